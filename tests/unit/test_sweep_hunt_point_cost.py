"""A sweep point checks only its own cell of the grid, not the whole grid again: each point re-checking every other
point made a sweep quadratic in its size (a 10,000-point plan grid: ~1.2 s of checks per point, ~3 hours instead of
~30 s), and a point failed for another point's workload (a model preset that does not resolve on that Ray node)."""

from __future__ import annotations

from accelkit.sweep.grid import expand
from accelkit.sweep.point import run_point
from accelkit.sweep.spec import SweepSpec


def _grid() -> SweepSpec:
    return SweepSpec.from_dict({"name": "s", "kind": "plan", "hardware": "h100", "workloads": {"llama-3-8b": {}},
                                "batch_sizes": [1, 2], "layouts": [{"dp": 8}, {"tp": 2, "dp": 4}]})


def test_a_point_does_not_check_the_other_points_workloads() -> None:
    spec = _grid()
    points = expand(spec)
    # as a Ray node sees the file: another point's model preset does not resolve there
    shipped = {**spec.to_dict(), "workloads": {"llama-3-8b": {}, "a-model-only-the-driver-has": {}}}
    outcome = run_point(points[3].to_dict(), shipped, "run1", save=True)
    assert outcome["status"] == "ok", outcome.get("error")
    assert len(outcome["result_ids"]) == 1
    stored = outcome["results"][0]
    assert stored["run_id"] == "run1"
    assert stored["workload"]["recipe"]["tp"] == 2 and stored["workload"]["recipe"]["dp"] == 4
    assert stored["workload"]["recipe"]["micro_batch"] == 2


def test_default_axes_stay_default_in_a_point() -> None:
    spec = SweepSpec.from_dict({"name": "s", "kind": "plan", "hardware": "h100", "workloads": {"llama-3-8b": {}}})
    (point,) = expand(spec)
    outcome = run_point(point.to_dict(), spec.to_dict(), "run2", save=True)
    assert outcome["status"] == "ok", outcome.get("error")
    assert outcome["results"][0]["workload"]["recipe"]["precision"] == "bf16"
