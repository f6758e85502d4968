"""`accelkit sweep`: an 8-point bench grid in the local process pool, the same grid as Ray tasks on a local
Ray runtime (identical sets of results stored), and a failed point recorded without stopping the sweep."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import accelkit

GRID = """
name: tiny-grid
kind: bench
workloads:
  llm-train: {model: tiny-llama, seq_len: 16}
  resnet: {size: tiny, image_size: 32}
precisions: [fp32, bf16]
batch_sizes: [2, 4]
loop: {warmup_iterations: 0, warmup_time_s: 0, min_iterations: 1, min_time_s: 0}
bench: {device: cpu, accuracy: false, auto_probe: false}
resources: {num_cpus: 1}
"""  # one timed step a point: the sweep runs, spreads and stores the points — the figures are not what is tested


def stored_set(run_id: str) -> set[tuple[str, str, str]]:
    """(point key, status, kinds of its stored rows) for every point of a sweep, from the store."""
    from accelkit.results import ResultStore

    with ResultStore() as store:
        rows = {s.id: s.result for s in store.query(run_id=run_id)}
    (summary,) = [r for r in rows.values() if r.kind == "sweep"]
    return {(p["key"], p["status"], ",".join(sorted(rows[i].kind for i in p["result_ids"])))
            for p in summary.details["points"]}


def test_eight_point_grid_locally_and_on_ray(tmp_path: Path):
    path = tmp_path / "grid.yaml"
    path.write_text(GRID)
    proc = accelkit("sweep", str(path), "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    local = json.loads(proc.stdout)
    assert local["num_points"] == 8 and local["num_failed"] == 0, local["points"]
    assert local["executor"].startswith("local process pool")
    local_set = stored_set(local["run_id"])
    assert len(local_set) == 8 and all(status == "ok" and "bench" in kinds for _, status, kinds in local_set)

    ray = pytest.importorskip("ray")
    from accelkit.sweep import load_sweep, run_sweep

    # one CPU: one Ray worker process runs the points in turn (a second one would import torch and transformers
    # again, beside the first, for no other result)
    ray.init(num_cpus=1, include_dashboard=False, log_to_driver=False)
    try:
        on_ray = run_sweep(load_sweep(path), ray="auto")
    finally:
        ray.shutdown()
    assert on_ray.executor == "ray (auto)" and not on_ray.failed
    assert stored_set(on_ray.run_id) == local_set


def test_a_failed_point_is_recorded_and_the_sweep_goes_on(tmp_path: Path):
    path = tmp_path / "plan.yaml"
    path.write_text("""
name: with-a-bad-point
kind: plan
hardware: h100
workloads:
  tiny-llama: {task: train, seq_len: 128}
layouts: [{dp: 2}, {tp: 3}, {dp: 4, zero: 3}]
""")
    proc = accelkit("sweep", str(path), "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert [p["status"] for p in doc["points"]] == ["ok", "error", "ok"]
    assert "tp" in doc["points"][1]["error"]
    kinds = {k for k in (s.split(",")[0] for _, _, s in stored_set(doc["run_id"]))}
    assert kinds == {"plan", "sweep-error"}
