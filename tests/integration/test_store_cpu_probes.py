"""Which stored CPU probes are this machine's, and what "newest" means once rows are imported: an import keeps each
row's own time, so another machine's probe, imported last, is neither this CPU's probe nor the newest result."""

from __future__ import annotations

import json

from accelkit.core import Measurement
from accelkit.hardware.detect import this_cpu
from accelkit.results import ResultStore


def _cpu_probe(hardware: str, created_at: str, tflops: float) -> Measurement:
    return Measurement(kind="probe", name=f"hw probe {hardware}", hardware=hardware, created_at=created_at,
                       details={"device": "cpu", "matmul": {"fp32": {"tflops": tflops, "size": 2048}},
                                "bandwidth": {"gbps": 10.0}})


def test_cpu_probes_are_this_machines_whatever_else_was_imported(tmp_path):
    """`ssh gpu-box accelkit results export | accelkit results import -` brings the GPU box's CPU probe: as the
    highest id, or the newest time, it became 'this CPU' and plans here used its peaks (40× off)."""
    here = this_cpu()
    assert here.startswith("cpu: ") and len(here) > len("cpu: ")
    with ResultStore(tmp_path / "r.db") as store:
        mine = store.add(_cpu_probe(here, "2026-01-01T00:00:00Z", 0.11))
        store.add(_cpu_probe("cpu: Another CPU 8480+", "2026-02-01T00:00:00Z", 4.4))  # newer, and imported last
        store.add(Measurement(kind="probe", name="not a CPU probe", hardware=here, details={"device": "cuda:0"}))
        assert [s.id for s in store.cpu_probes()] == [mine]
        older_mine = store.add(_cpu_probe(here, "2025-12-01T00:00:00Z", 0.10))
        assert [s.id for s in store.cpu_probes()] == [mine, older_mine]  # newest first, by time


def test_newest_first_is_by_creation_time_then_id(cli, _isolated_home):
    """`results list` said 'newest first' and sorted by id: an imported row from last year led the list."""
    with ResultStore() as store:
        a = store.add(Measurement(kind="probe", name="a", created_at="2026-03-01T00:00:00Z"))
        b = store.add(Measurement(kind="probe", name="b", created_at="2026-03-01T00:00:00Z"))  # same second: by id
        old = store.add(Measurement(kind="probe", name="imported", created_at="2025-06-01T00:00:00Z"))
        assert store.latest("probe").id == b
        assert [s.id for s in store.query(newest_first=False)] == [old, a, b]
    proc = cli("results", "list", "--json")
    assert proc.returncode == 0 and [r["id"] for r in json.loads(proc.stdout)] == [b, a, old]
    proc = cli("results", "list", "--limit", "1", "--json")
    assert [r["name"] for r in json.loads(proc.stdout)] == ["b"]


def test_the_planner_plans_this_cpu_with_its_own_probe(_isolated_home):
    """What the planner reads (plan/calibrate.py): this CPU's probe, though another machine's is newer."""
    from accelkit.plan.calibrate import cpu_probes

    with ResultStore() as store:
        mine = store.add(_cpu_probe(this_cpu(), "2026-01-01T00:00:00Z", 0.11))
        store.add(_cpu_probe("cpu: Another CPU 8480+", "2026-02-01T00:00:00Z", 4.4))
    assert [s.id for s in cpu_probes()] == [mine]
