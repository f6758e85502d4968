"""Ctrl-C during a distributed bench, on a real 2-rank gloo run of tiny-llama: the variants that had finished are
printed (`"interrupted": true`, the unfinished ones named) and stay in the store, exit 130, no rank left running.

Before, rank 0 stored a launch's variants and wrote its document only at the end of the launch, and the launcher
raised on Ctrl-C: the finished variants of the launch Ctrl-C stopped were lost, those of earlier launches (one per
precision) were stored but never printed, and nothing said which variants had not run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil

from accelkit.results import ResultStore
from tests.conftest import REPO
from tests.integration.test_dist_failures import FAULT, _alive

#: each variant measures 2 iterations; the last one is held by the ranks (``dist_fault/sitecustomize.py``), so the
#: Ctrl-C lands before it could finish however slow the machine is — without the ranks measuring meanwhile
LOOP = ("--warmup", "1", "--warmup-time", "0", "--min-iterations", "2", "--min-time", "0")


def _launched(pid: int) -> tuple[list[psutil.Process], list[psutil.Process]]:
    """(torchrun and the ranks, the ranks) among ``pid``'s descendants: their command lines name the worker module,
    torchrun's also torch.distributed.run."""
    launched, ranks = [], []
    for p in psutil.Process(pid).children(recursive=True):
        try:
            cmdline = p.cmdline()
        except psutil.Error:  # gone, or not ours to read
            continue
        if "accelkit.distributed.worker" in cmdline:
            launched.append(p)
            if "torch.distributed.run" not in cmdline:
                ranks.append(p)
    return launched, ranks


def test_ctrl_c_keeps_the_variants_the_ranks_finished(_isolated_home, tmp_path):
    """Two launches (fp32, then bf16), two variants each: Ctrl-C once the second launch's first variant (bf16) is
    done — its ranks are loading bf16+recompute, held there until stopped — keeps fp32 and fp32+recompute (the first
    launch) and bf16 (the one the interrupt stopped), and names bf16+recompute."""
    hold = {"ACCELKIT_TEST_FAIL": "hold", "ACCELKIT_TEST_HOLD_VARIANT": "bf16+recompute",
            "PYTHONPATH": os.pathsep.join(filter(None, [str(FAULT), os.environ.get("PYTHONPATH")]))}
    out = tmp_path / "stdout.json"
    with out.open("w") as stdout:  # a file: stderr is read line by line, and the document must not fill a pipe
        proc = subprocess.Popen(
            [sys.executable, "-m", "accelkit", "bench", "llm-train", "--model", "tiny-llama", "--batch-size", "2",
             "--seq-len", "32", "--device", "cpu", "--nproc-per-node", "2", "--precision", "fp32,bf16", "--recompute",
             *LOOP, "--no-probe", "--no-predict", "--progress", "--json"],
            stdout=stdout, stderr=subprocess.PIPE, text=True, bufsize=1, cwd=REPO, env={**os.environ, **hold})
    lines: list[str] = []
    family: list[psutil.Process] = []
    ranks: list[psutil.Process] = []
    deadline = time.monotonic() + 180
    try:
        assert proc.stderr is not None
        for line in proc.stderr:  # the ranks' progress, forwarded line by line
            lines.append(line.rstrip())
            if "[rank 0/2] bf16+recompute: load" in line:  # bf16 was gathered on rank 0 before this
                family, ranks = _launched(proc.pid)
                proc.send_signal(signal.SIGINT)
                break
            assert time.monotonic() < deadline, "\n".join(lines[-30:])
        rest = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = "\n".join(lines) + "\n" + rest
    assert len(ranks) == 2, stderr[-3000:]
    assert proc.returncode == 130, stderr[-3000:]
    # the CLI's Ctrl-C path printed no traceback of its own (torchrun's forwarded lines may carry one of torchrun's:
    # a rank that aborts shutting down after its job — gloo, now and then — is a warning, with torchrun's report)
    assert "KeyboardInterrupt" not in stderr and "accelkit/cli/" not in stderr, stderr[-3000:]
    assert not _alive(family), [p.cmdline() for p in _alive(family)]  # torchrun and the ranks were stopped

    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and doc["unfinished"] == ["bf16+recompute"]
    names = [v["name"] for v in doc["variants"]]
    assert names == ["fp32", "fp32+recompute", "bf16"], names
    for entry in doc["variants"]:  # measured on both ranks, with their numbers
        assert entry["world_size"] == 2 and [r["rank"] for r in entry["ranks"]] == [0, 1]
        assert entry["throughput"]["value"] > 0 and entry["latency_s"]["n"] >= 2
        assert entry["result_id"] is not None
    assert doc["result_ids"] == [v["result_id"] for v in doc["variants"]]
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted: kept 3 finished variant(s) in the store") and \
        last.endswith("not finished: bf16+recompute"), last

    with ResultStore(_isolated_home / "results.db", readonly=True) as store:
        assert store.count() == 3  # what the document lists, nothing more
        rows = [store.get(v["result_id"]) for v in doc["variants"]]
    assert {r.run_id for r in rows} == {doc["run_id"]}
    for row, entry in zip(rows, doc["variants"], strict=True):
        stored = row.result
        assert stored.kind == "bench" and stored.details["name"] == entry["name"] and stored.num_devices == 2
        assert len(stored.samples["latency_s"]) == entry["latency_s"]["n"]


SWEEP = """
name: dist-interrupt
kind: bench
workloads:
  llm-train: {model: tiny-llama, seq_len: 16}
precisions: [fp32]
batch_sizes: [2]
layouts: [{nproc_per_node: 2}]
loop: {warmup_iterations: 1, warmup_time_s: 0, min_iterations: 3, min_time_s: 600}
bench: {device: cpu, accuracy: false, auto_probe: false}
workers: 1
"""


def test_ctrl_c_in_a_sweep_leaves_its_distributed_point_not_run(_isolated_home, tmp_path):
    """A terminal's Ctrl-C reaches the sweep's pool worker too: its distributed point, stopped before its one variant
    finished, is listed as not run — as before the change above; a point that returned an empty interrupted run was
    counted as finished, and an interrupt that could not be pickled back from the worker broke the pool."""
    grid = tmp_path / "grid.yaml"
    grid.write_text(SWEEP)
    out = tmp_path / "stdout.json"
    with out.open("w") as stdout:
        proc = subprocess.Popen([sys.executable, "-m", "accelkit", "sweep", str(grid), "--json"], stdout=stdout,
                                stderr=subprocess.PIPE, text=True, cwd=REPO, start_new_session=True)
    launched: list[psutil.Process] = []  # torchrun and the ranks
    ranks: list[psutil.Process] = []
    deadline = time.monotonic() + 180
    try:
        while len(ranks) < 2:  # both ranks started
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
            launched, ranks = _launched(proc.pid)
        os.killpg(proc.pid, signal.SIGINT)  # the foreground group, as a terminal sends it (torchrun has its own)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 130, stderr[-3000:]
    assert not _alive(launched), [p.cmdline() for p in _alive(launched)]
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True and doc["points"] == [], doc["points"]
    assert doc["unfinished"] == ["point 0 · llm-train model=tiny-llama seq_len=16 · fp32 · b2 · nproc_per_node=2"]
