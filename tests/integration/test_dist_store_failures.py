"""A results store that refuses a write during a distributed run, on 2 gloo ranks under torchrun: once one write
was refused no rank writes again."""

from __future__ import annotations

import sqlite3

from accelkit.results import ResultStore


def test_a_probe_the_store_refused_stops_the_ranks_writes(_isolated_home):
    """d80f0bd: the quick probe's row is the run's first write; when the store refused it, the launch still told
    rank 0 to save, so a store that took writes again (here: the other writer's lock, released as torchrun
    starts) got the run's rows after the bench had stopped writing — unlike a single-process bench, whose
    StoreWriter stops at the first refusal, and unlike what the document's store_error says."""
    from accelkit.bench.runner import BenchConfig, Reporter
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.distributed.bench_launch import run_distributed_bench
    from accelkit.distributed.launch import DistConfig
    from accelkit.timing import LoopConfig

    path = _isolated_home / "results.db"
    store = ResultStore(path, timeout_s=0.05)  # no probe stored: the bench runs a quick one and stores it first
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process mid-write: the probe's row waits 0.05 s and is refused
    released: list[str] = []

    class LockFreedAtLaunch(Reporter):
        def phase(self, lane: str, text: str) -> None:
            if text.startswith("torchrun:") and holder.in_transaction:
                holder.execute("ROLLBACK")  # from here on every write would succeed
                released.append(lane)

    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=2, min_time_s=0)
    try:
        run = run_distributed_bench(
            make_workload("resnet", {"size": "tiny", "batch_size": 2, "image_size": 32}), [Variant(precision="fp32")],
            BenchConfig(device="cpu", loop=loop), DistConfig(nproc_per_node=2),
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

