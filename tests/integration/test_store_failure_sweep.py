"""`accelkit sweep` when the results store stops taking writes mid-sweep, as `accelkit bench` does: every point's
figures are kept (stored, or whole in its line's `unstored`), no write is tried after the first refused one (points
handed out later run with saving off), stderr names the stored ids and what was not stored, exit 1 (Ctrl-C: the
points finished so far, `interrupted`), and --json stdout stays one strict JSON document. Also: the store's rows
are strict JSON when a sweep's grid holds an inf rate."""

from __future__ import annotations

import json
import math
import os
import resource
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from accelkit.results import ResultStore
from tests.conftest import REPO

PLAN_GRID = """
name: plan-grid
kind: plan
hardware: h100
workloads:
  tiny-llama: {task: train, seq_len: 128}
layouts: [{dp: 1}, {dp: 2}, {dp: 4}, {dp: 8}]
"""


def strict_loads(text: str):
    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    return json.loads(text, parse_constant=refuse)


def _plan_grid(tmp_path: Path) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(PLAN_GRID)
    return path


def _key(point: dict) -> str:
    return f"point {point['index']} · {point['key']}"


def test_a_sweep_whose_disk_fills_prints_every_point_and_names_what_was_stored(_isolated_home, tmp_path):
    """The disk 'fills' (RLIMIT_FSIZE: the EFBIG a full quota gives) after the first point's row: that point stays
    stored, the next one's write is refused in its worker, the later ones are handed out with saving off, and the
    summary is not tried. Before, the refused write failed the point and the driver's sweep-error row raised out
    of the sweep: exit 1 with nothing on stdout, every figure lost."""
    ResultStore(_isolated_home / "results.db").close()  # 20 KiB; its -shm index is 32 KiB

    def small_files() -> None:  # the WAL takes one plan row (~20 KiB of pages), not two
        resource.setrlimit(resource.RLIMIT_FSIZE, (48 * 1024, 48 * 1024))

    proc = subprocess.run([sys.executable, "-m", "accelkit", "sweep", str(_plan_grid(tmp_path)), "--json"],
                          capture_output=True, text=True, timeout=300, env=dict(os.environ), cwd=REPO,
                          preexec_fn=small_files)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    doc = strict_loads(proc.stdout)  # stdout is the one document
    assert "disk full" in doc["store_error"] and doc["summary_id"] is None and not doc["interrupted"]
    points = doc["points"]
    assert [p["status"] for p in points] == ["ok"] * 4
    stored = [p for p in points if p["result_ids"]]
    unstored = [p for p in points if p.get("unstored")]
    assert stored and unstored and len(stored) + len(unstored) == 4, points
    for p in unstored:  # the planner's estimate itself, not a pointer to a row that does not exist
        (estimate,) = p["unstored"]
        assert estimate["kind"] == "plan" and estimate["throughput"] > 0 and "disk full" in p["store_error"]
    named = [f"{_key(p)} (result {p['result_ids'][0]})" for p in stored]
    not_named = [_key(p) for p in unstored] + ["the sweep summary"]
    assert f"Stored before the failure: {', '.join(named)}; not stored: {', '.join(not_named)}." in proc.stderr
    with ResultStore(_isolated_home / "results.db", readonly=True) as store:
        assert sorted(r.id for r in store.query()) == sorted(p["result_ids"][0] for p in stored)


@pytest.fixture
def locked_driver(tmp_path):
    """The driver's store (not the points' default one: the driver copies their rows into it), held locked by
    another writer for the whole sweep; its lock timeout is 0.05 s. Yields the store and the writes it tried."""
    path = tmp_path / "driver.db"
    ResultStore(path).close()
    store = ResultStore(path, timeout_s=0.05)
    writes: list[str] = []
    store._conn.set_trace_callback(lambda sql: writes.append(sql) if sql.startswith("BEGIN") else None)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield store, writes
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        store.close()


def test_a_locked_store_is_tried_once_and_later_points_store_nothing(locked_driver, tmp_path, _isolated_home):
    from accelkit.sweep import load_sweep, run_sweep

    store, writes = locked_driver
    run = run_sweep(load_sweep(_plan_grid(tmp_path)), store=store)
    assert "stayed locked by another process for 0.05 s" in run.store_error
    assert writes == ["BEGIN IMMEDIATE"]  # copying point 0's row; not one lock timeout per point, no summary
    assert run.summary_id is None and [p["status"] for p in run.points] == ["ok"] * 4
    assert all(p["result_ids"] == [] and p["unstored"][0]["kind"] == "plan" for p in run.points)
    assert run.to_json()["store_error"] == run.store_error
    with ResultStore(readonly=True) as points_store:  # point 0 ran before the refusal; the rest with saving off
        assert points_store.count() == 1


def test_ctrl_c_keeps_the_points_finished_and_tries_no_summary_on_a_refusing_store(locked_driver, tmp_path):
    from accelkit.sweep import load_sweep, run_sweep

    store, writes = locked_driver

    def interrupt(line: dict) -> None:
        raise KeyboardInterrupt  # Ctrl-C right after the first point landed

    run = run_sweep(load_sweep(_plan_grid(tmp_path)), store=store, on_point=interrupt)
    assert run.interrupted and [p["index"] for p in run.points] == [0]
    assert run.unfinished == [f"point {i} · tiny-llama seq_len=128 task=train · bf16 · dp={dp}"
                              for i, dp in ((1, 2), (2, 4), (3, 8))]
    assert run.points[0]["unstored"][0]["kind"] == "plan" and run.store_error and writes == ["BEGIN IMMEDIATE"]
    assert run.to_json()["interrupted"] is True


def test_a_grid_with_an_inf_rate_is_stored_as_strict_json(_isolated_home, tmp_path):
    """The sweep row stores its grid: YAML's `.inf` rate was written as `Infinity`, which strict JSON readers
    (jq, JSON.parse, sqlite's json_valid) reject. Now every column is strict: the rate is null
    in the row, named under `non_finite`, and read back as inf."""
    from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
    from accelkit.sweep import load_sweep, run_sweep

    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.001, itl_s=0.001)) as server:
        path = tmp_path / "rates.yaml"
        path.write_text(f"""
name: inf-rate
kind: loadtest
workloads:
  fake-model: {{num_prompts: 2, random_input_len: 4, random_output_len: 2, warmup: 0}}
rates: [.inf]
loadtest: {{base_url: "{server.base_url}"}}
""")
        run = run_sweep(load_sweep(path))
    assert run.store_error is None and run.points[0]["status"] == "ok", run.points
    with sqlite3.connect(_isolated_home / "results.db") as conn:
        rows = conn.execute("SELECT id, kind, payload, samples, environment FROM results").fetchall()
    assert sorted(kind for _, kind, *_ in rows) == ["loadtest", "sweep"]
    for _, _, *columns in rows:
        for column in columns:
            strict_loads(column)
    (payload,) = [strict_loads(p) for _, kind, p, _, _ in rows if kind == "sweep"]
    assert payload["details"]["grid"]["rates"] == [None]
    assert payload["non_finite"] == {"/details/grid/rates/0": "inf"}
    with ResultStore(readonly=True) as store:
        back = store.get(run.summary_id)
    assert back.result.details["grid"]["rates"] == [math.inf]
    assert back.non_finite == {"/details/grid/rates/0": "inf"}
    assert back.to_dict()["non_finite"] == {"/details/grid/rates/0": "inf"}  # `results show --json`, export
