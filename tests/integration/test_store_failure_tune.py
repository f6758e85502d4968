"""`accelkit tune` when the results store stops taking writes, as `accelkit bench` does: every measured trial is in
the document printed on stdout (strict JSON, `store_error` set), stderr names what was stored and what was not
(each trial, the summary), no write is tried after the refused one, exit 1 — and Ctrl-C with a refusing store
keeps the result with `interrupted` and the recipes it did not finish."""

from __future__ import annotations

import json
import os
import resource
import sqlite3
import subprocess
import sys

from accelkit.bench.runner import Reporter
from accelkit.results import ResultStore
from tests.conftest import REPO

TUNE_TINY = ("tune", "bert", "--size", "tiny", "--batch-size", "2", "--seq-len", "16", "--no-compile",
             "--max-trials", "2", "--device", "cpu", "--warmup-time", "0.1", "--min-time", "0.1", "--json")


def strict_loads(text: str):
    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def test_tune_prints_every_trial_the_full_disk_cannot_take(probed):
    """The store (with a probe: no quick probe is run) opens fine; its disk 'fills' (RLIMIT_FSIZE) while the search
    stores. Before, stderr said only that something was not stored, and the document had no store_error."""
    db = probed / "results.db"
    with ResultStore(db) as store:
        before = store.count()

    def small_files() -> None:  # the -shm index is 32 KiB; the WAL fills before the trials' rows and the summary fit
        resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 1024, 32 * 1024))

    proc = subprocess.run([sys.executable, "-m", "accelkit", *TUNE_TINY], capture_output=True, text=True,
                          timeout=600, env=dict(os.environ), cwd=REPO, preexec_fn=small_files)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    doc = strict_loads(proc.stdout)
    assert "disk full" in doc["store_error"] and doc["result_id"] is None and not doc["interrupted"]
    measured = [t for t in doc["trials"] if t["status"] == "measured"]
    assert [t["name"] for t in measured] == ["fp32", "bf16"] and all(t["throughput"] > 0 for t in measured)
    # how many rows fit before the WAL fills depends on the samples this machine takes: stderr names each side
    stored = [f"{t['name']} (result {', '.join(map(str, t['result_ids']))})" for t in measured if t["result_ids"]]
    unstored = ", ".join([t["name"] for t in measured if not t["result_ids"]] + ["the tune summary"])
    if stored:
        assert f"Stored before the failure: {', '.join(stored)}; not stored: {unstored}." in proc.stderr
    else:
        assert "The measurement was not stored; its JSON is printed on stdout above" in proc.stderr
        assert f"; not stored: {unstored}" in proc.stderr
    with ResultStore(db, readonly=True) as store:  # what was named, nothing half-written
        assert store.count() == before + sum(len(t["result_ids"]) for t in measured)


class _CtrlC(Reporter):
    """Ctrl-C (KeyboardInterrupt, as the bench's SIGINT handler raises it) at the first measuring round."""

    def progress(self, lane, iterations, measured_s, loop) -> None:
        raise KeyboardInterrupt


def test_ctrl_c_and_a_locked_store_keep_the_result(probed):
    from accelkit.bench.workloads import make_workload
    from accelkit.tune import tune
    from accelkit.tune.search import QUICK_LOOP, TuneConfig

    store = ResultStore(probed / "results.db", timeout_s=0.05)
    writes: list[str] = []
    store._conn.set_trace_callback(lambda sql: writes.append(sql) if sql.startswith("BEGIN") else None)
    holder = sqlite3.connect(probed / "results.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        result = tune(make_workload("bert", {"size": "tiny", "batch_size": 2, "seq_len": 16}),
                      TuneConfig(max_trials=2, compile=False, device="cpu",
                                 loop=QUICK_LOOP.replace(warmup_time_s=0.1, min_time_s=0.1)), store=store, reporter=_CtrlC())
    finally:
        holder.execute("ROLLBACK")
        store.close()
    assert result.interrupted and result.unfinished == ["fp32", "bf16"]
    # its own status, not "failed": a trial Ctrl-C cut short is not broken
    assert [(t.status, t.reason) for t in result.trials if t.name in ("fp32", "bf16")] == \
        [("interrupted", "not measured (interrupted)")] * 2
    assert "locked" in result.store_error and result.result_id is None  # the summary: the one write tried
    assert writes == ["BEGIN IMMEDIATE"]
    doc = result.to_json()
    assert doc["interrupted"] and doc["unfinished"] == ["fp32", "bf16"] and doc["store_error"] == result.store_error


class _Notes(Reporter):
    """What the bench runner announces (a probe it runs for MFU peaks is one such note)."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


def test_a_refused_quick_probe_is_not_measured_again_by_the_bench(_isolated_home):
    """A store with no probe of this CPU whose writes are refused (a lock held by another connection): tune measures
    its quick probe, the store refuses it — and the bench inside then found no stored probe and ran a second quick one
    (`hw probe --quick --dtype fp32`), for an MFU the tune's document does not carry."""
    from accelkit.bench.workloads import make_workload
    from accelkit.tune import tune
    from accelkit.tune.search import QUICK_LOOP, TuneConfig

    _isolated_home.mkdir(parents=True, exist_ok=True)
    store = ResultStore(_isolated_home / "results.db", timeout_s=0.05)
    holder = sqlite3.connect(_isolated_home / "results.db", isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    reporter, steps = _Notes(), []
    try:
        result = tune(make_workload("bert", {"size": "tiny", "batch_size": 2, "seq_len": 16}),
                      TuneConfig(max_trials=1, compile=False, device="cpu",
                                 loop=QUICK_LOOP.replace(warmup_time_s=0.1, min_time_s=0.1)), store=store, reporter=reporter,
                      on_step=steps.append)
    finally:
        holder.execute("ROLLBACK")
        store.close()
    assert result.ran_quick_probe and result.quick_probe_id is None and "locked" in result.store_error
    assert sum(s.startswith("no stored probe of this CPU") for s in steps) == 1  # the one probe, by tune
    assert not [n for n in reporter.notes if "hw probe" in n], reporter.notes  # none by the bench
    (fp32,) = [t for t in result.trials if t.status == "measured"]
    assert fp32.name == "fp32" and fp32.throughput > 0 and fp32.result_ids == []
    with ResultStore(_isolated_home / "results.db", readonly=True) as check:
        assert check.count() == 0
