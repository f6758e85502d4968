"""The MFU peak the bench takes from the store (``accelkit.bench.peaks``): a stored probe below the default size
(`hw probe --size 256`, no peak: call overhead holds it under) stopped the bench's own quick probe at the default
size from running, and became the peak — MFU 2143% where an empty store gave 75.7%. The bench treats it as no peak
now and runs its probe; with --no-probe it is still used, its source saying the MFU reads high."""

from __future__ import annotations

from accelkit.bench.peaks import Peaks
from accelkit.bench.record import StoreWriter
from accelkit.bench.runner import Reporter, identify
from accelkit.core import Measurement
from accelkit.results import ResultStore

HARDWARE = identify("cpu")[0]  # the name a probe run here is stored under


class Notes(Reporter):
    def __init__(self) -> None:
        self.notes: list[str] = []

    def note(self, text: str) -> None:
        self.notes.append(text)


def _small_probe(store: ResultStore) -> int:
    """A stored `hw probe --quick --size 256` of this CPU, as `hw probe` writes it: 0.0014 TFLOP/s."""
    details = {"device": "cpu", "catalog_name": None, "quick": True, "matmul": {"fp32": {"tflops": 0.0014, "size": 256}}}
    return store.add(Measurement(kind="probe", name="hw probe", hardware=HARDWARE, details=details))


def test_a_stored_small_probe_is_no_peak_the_bench_probes_at_the_default_size(tmp_path, monkeypatch):
    import accelkit.hardware.probe as probe_module

    # every matmul "too slow" for the default side: the probe runs at 256² in well under a second and, cut from the
    # default for speed (not asked for with --size), counts as this dtype's peak — the quick probe the bench runs
    monkeypatch.setattr(probe_module, "SLOW_CALL_S", 0.0)
    with ResultStore(tmp_path / "r.db") as store:
        small = _small_probe(store)
        reporter = Notes()
        peaks = Peaks("cpu", HARDWARE, None, store, True, reporter, StoreWriter(None), run_min_time_s=0.0)  # --no-save
        peaks.prefetch(["fp32"])
        peak = peaks.get("fp32")
        assert [p.id for p in store.query(kind="probe")] == [small]  # --no-save: nothing more stored
    (note,) = reporter.notes
    assert note.startswith(f"no fp32 matmul peak for {HARDWARE} in the store at the default size (a smaller probe")
    assert peak.flops is not None and peak.flops != 0.0014e12
    assert peak.source.startswith("measured: a quick `accelkit hw probe` run by this bench (not stored)"), peak.source


def test_with_no_probe_the_small_probe_is_used_and_says_the_mfu_reads_high(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        small = _small_probe(store)
        reporter = Notes()
        peaks = Peaks("cpu", HARDWARE, None, store, False, reporter, StoreWriter(store))
        peaks.prefetch(["fp32"])
        peak = peaks.get("fp32")
    assert reporter.notes == []  # no probe ran
    assert peak.flops == 0.0014e12 and f"result {small}" in peak.source and "this MFU reads high" in peak.source
