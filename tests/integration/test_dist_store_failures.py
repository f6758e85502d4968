"""A results store that refuses a write during a distributed run, on 2 gloo ranks under torchrun: the measurement
is kept and printed, never lost with rank 0's exception, and once one write was refused no rank writes again."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from dataclasses import replace

from accelkit.results import ResultStore
from tests.conftest import REPO
from tests.integration.dist_fault.full_disk import NUM_ROWS, full_store, small_files


def test_a_probe_the_store_refused_stops_the_ranks_writes(_isolated_home, monkeypatch):
    """d80f0bd: the quick probe's row is the run's first write; when the store refused it, the launch still told
    rank 0 to save, so a store that took writes again (here: the other writer's lock, released as torchrun
    starts) got the run's rows after the bench had stopped writing — unlike a single-process bench, whose
    StoreWriter stops at the first refusal, and unlike what the document's store_error says.

    The quick probe is the real one at a small size (256² matmuls, 1 MiB copies): at the default 2048² and
    256 MiB it took 5-8 s (3.5 CPU-seconds) on a test worker's one thread, and its figures are not what is tested
    — its row is."""
    import accelkit.bench.peaks as peaks
    from accelkit.bench.runner import BenchConfig, Reporter
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.distributed.bench_launch import run_distributed_bench
    from accelkit.distributed.launch import DistConfig
    from accelkit.timing import LoopConfig

    probe = peaks.probe
    monkeypatch.setattr(peaks, "probe", lambda config, **kw: probe(replace(config, matmul_size=256,
                                                                          copy_bytes=1 << 20), **kw))
    path = _isolated_home / "results.db"
    store = ResultStore(path, timeout_s=0.05)  # no probe stored: the bench runs a quick one and stores it first
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process mid-write: the probe's row waits 0.05 s and is refused
    lines: list[str] = []
    released: list[str] = []

    class LockFreedAtLaunch(Reporter):
        def phase(self, lane: str, text: str) -> None:
            if text.startswith("torchrun:") and holder.in_transaction:
                holder.execute("ROLLBACK")  # from here on every write would succeed
                released.append(lane)

        def note(self, text: str) -> None:
            lines.append(text)

    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=2, min_time_s=0)
    try:
        run = run_distributed_bench(
            make_workload("resnet", {"size": "tiny", "batch_size": 2, "image_size": 32}), [Variant(precision="fp32")],
            BenchConfig(device="cpu", loop=loop), DistConfig(nproc_per_node=2, collective_timeout_s=120),
            store=store, reporter=LockFreedAtLaunch())
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
    assert released == ["fp32"]  # the lock was free before torchrun started the ranks
    (entry,) = run.variants
    assert entry.throughput.value and entry.world_size == 2  # measured on both ranks and kept
    assert run.store_error and "stayed locked by another process for 0.05 s" in run.store_error
    assert entry.result_id is None and run.result_ids == []
    assert store.count() == 0  # neither the probe nor, after it, the ranks' measurement and estimate
    store.close()
    # the launch's collective timeout reached the ranks' process group
    assert any("a collective waits at most 120 s for its peers" in line for line in lines), lines[-20:]


def test_collective_probe_prints_what_the_store_cannot_take(_isolated_home):
    """Rank 0 stored the probe with a bare store.add: a refused write raised in rank 0, torchrun stopped the group
    and the measurement of every rank was lost behind 'torchrun exited with code 1'. Now, as `accelkit bench`:
    the JSON on stdout (result_id null, store_error), what was not stored and why on stderr, exit 1."""
    with full_store(_isolated_home) as path:
        proc = subprocess.run(
            [sys.executable, "-m", "accelkit", "hw", "probe", "--collectives", "--nproc-per-node", "2", "--device",
             "cpu", "--quick", "--json", "--max-message-size", "64KiB"], capture_output=True, text=True, timeout=300, cwd=REPO,
            env={**os.environ, "ACCELKIT_HOME": str(_isolated_home)}, preexec_fn=small_files)
        assert proc.returncode == 1, proc.stderr[-3000:]
        doc = json.loads(proc.stdout)  # the one document, not lost
        assert doc["kind"] == "collectives" and doc["details"]["world_size"] == 2
        assert doc["details"]["bus_bandwidth_gbps"]["all_reduce"] > 0
        assert doc["result_id"] is None and "disk full" in doc["store_error"]
        *progress, line = proc.stderr.strip().splitlines()  # one error line, no traceback, no torchrun failure
        assert all(re.match(r"\[ *\d+\.\d s\] probing collectives", p) for p in progress), progress  # #29
        assert line.startswith("error: ") and "disk full" in line, line
        assert "was not stored; its JSON is printed on stdout" in line and doc["name"] in line, line
        with ResultStore(path, readonly=True) as store:
            assert store.count() == NUM_ROWS  # nothing half-written
