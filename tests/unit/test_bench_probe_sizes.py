"""A `hw probe` run below the default sizes (`--size 64 --copy-size 1MiB`, a smoke run) is no peak: a 64×64 bf16
matmul reached 0.024 TFLOP/s where 2048×2048 reached 0.68 (MFU read ~27× high), and a 1 MiB copy measured the cache
at 159 GB/s (the planner put tiny-llama decode at 352k tok/s instead of 25k). MFU, the planner's CPU roofline and
the report's roofline take the newest probe at the default sizes; a smaller one only when none is stored, saying so.
"""

from __future__ import annotations

from accelkit.bench.metrics import probe_peak
from accelkit.core import Measurement
from accelkit.hardware.detect import this_cpu
from accelkit.hardware.probe import ProbeConfig, probe
from accelkit.hardware.probe_quality import small_copy, small_matmul, small_probe
from accelkit.plan import resolve_hardware
from accelkit.results import ResultStore

CPU = this_cpu()  # the planner reads the probes of the CPU it runs on


def _cpu_probe(size: int, copy_mib: int, *, tflops: float, gbps: float, quick: bool = True) -> Measurement:
    """A stored CPU probe as `hw probe` writes it (the sizes where it puts them)."""
    details = {"device": "cpu", "catalog_name": None, "quick": quick,
               "matmul": {dt: {"tflops": tflops, "size": size} for dt in ("fp32", "bf16")},
               "bandwidth": {"gbps": gbps, "bytes_per_iteration": 2 * (copy_mib << 20), "fraction_of_peak": None}}
    return Measurement(kind="probe", name="hw probe", hardware=CPU, details=details)


FULL = dict(size=2048, copy_mib=256, tflops=0.68, gbps=12.0, quick=False)
SMALL = dict(size=64, copy_mib=1, tflops=0.024, gbps=159.0)


def test_a_real_small_probe_says_it_is_no_peak():
    result = probe(ProbeConfig(device="cpu", dtypes=("fp32",), quick=True, matmul_size=64, copy_bytes=1 << 20,
                               min_time_s=0))
    d = result.details
    assert small_matmul(d, "fp32") == "a 64×64 matmul, below the 2048×2048 default: call overhead holds it under the peak"
    assert small_copy(d) is not None and small_copy(d).startswith("a 1 MiB copy, below the 256 MiB default")
    assert small_probe(d) is not None
    # what `hw probe` prints under its table (details["note"]): not "these measured figures are its peak"
    assert d["note"].startswith("--size 64 (default 2048) and --copy-size 1 MiB (default 256 MiB) are below the default")
    assert "MFU and the planner use a probe at the default sizes" in d["note"]
    assert small_matmul({**d, "matmul": {"fp32": {"size": 2048}}}, "fp32") is None


def test_mfu_takes_the_older_full_size_probe_over_a_newer_small_one(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        full = store.add(_cpu_probe(**FULL))
        store.add(_cpu_probe(**SMALL))  # newer
        peak, pid = probe_peak(store, CPU, "bf16")
    assert pid == full and peak.flops == 0.68e12 and "2048×2048" in peak.source and "reads high" not in peak.source


def test_a_small_probe_is_the_peak_only_when_nothing_else_is_stored_and_says_so(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        store.add(_cpu_probe(**SMALL))
        larger = store.add(_cpu_probe(**{**SMALL, "size": 512, "tflops": 0.4}))
        store.add(_cpu_probe(**SMALL))  # newest, but smaller than the 512 one
        peak, pid = probe_peak(store, CPU, "bf16")
    assert pid == larger and peak.flops == 0.4e12
    assert "a 512×512 matmul, below the 2048×2048 default" in peak.source and "this MFU reads high" in peak.source
    assert "run `accelkit hw probe` without --size" in peak.source


def test_the_planner_takes_matmul_and_bandwidth_from_the_full_size_probe():
    with ResultStore() as store:
        full = store.add(_cpu_probe(**FULL))
        store.add(_cpu_probe(**SMALL))
    device = resolve_hardware("cpu")
    assert device.peak_flops == {"fp32": 0.68e12, "bf16": 0.68e12}
    assert device.memory_bandwidth_bytes_per_s == 12.0e9  # not the 1 MiB copy's 159 GB/s of the cache
    assert f"copy bandwidth from result {full}," in device.source and "below" not in device.source


def test_the_planner_says_when_only_a_small_probe_describes_the_cpu():
    with ResultStore() as store:
        store.add(_cpu_probe(**SMALL))
    device = resolve_hardware("cpu")
    assert device.memory_bandwidth_bytes_per_s == 159.0e9
    assert "a 1 MiB copy, below the 256 MiB default: it can fit in a cache and measure the cache" in device.source
    assert "a 64×64 matmul, below the 2048×2048 default" in device.source


def test_the_report_roofline_is_drawn_from_the_full_size_probe(tmp_path):
    from accelkit.report.html import roofline_figure

    with ResultStore(tmp_path / "r.db") as store:
        full = store.add(_cpu_probe(**FULL))
        store.add(_cpu_probe(**SMALL))
        notes: list[str] = []
        names = [t["name"] for t in roofline_figure(store, notes)["data"]]
    assert names == [f"{CPU} fp32 (measured, #{full})", f"{CPU} bf16 (measured, #{full})"] and notes == []
    with ResultStore(tmp_path / "only-small.db") as store:
        small = store.add(_cpu_probe(**SMALL))
        notes = []
        names = [t["name"] for t in roofline_figure(store, notes)["data"]]
    assert names[0] == f"{CPU} fp32 (measured, #{small}, below the default sizes)"
    assert notes[0].startswith(f"{CPU}: the bandwidth is probe #{small}'s (a 1 MiB copy, below the 256 MiB default")
    assert notes[1].startswith(f"{CPU} fp32: drawn from probe #{small} (a 64×64 matmul, below the 2048×2048 default")


# ---- a CPU dtype without a fast kernel: fp16 on a CPU without AVX512-FP16 ran at 0.24 GFLOP/s, so a quick probe's
# eight 2048² calls took 9 minutes (and `accelkit tune`, which probes fp16 for MFU, past its test's 300 s)
def test_a_dtype_too_slow_for_the_default_side_is_probed_smaller_and_still_counts_as_its_peak(monkeypatch):
    import accelkit.hardware.probe as probe_module

    # every call "too slow": the threshold, not the CPU, decides here (the path fp16 takes on such a CPU)
    monkeypatch.setattr(probe_module, "SLOW_CALL_S", 0.0)
    d = probe(ProbeConfig(device="cpu", dtypes=("fp32",), quick=True, copy_bytes=1 << 20, min_time_s=0)).details
    row = d["matmul"]["fp32"]
    assert row["size"] == probe_module.SCOUT_SIDE and row["reduced_from"] == 2048
    assert row["reduced_why"].startswith("one 256×256 fp32 matmul ran at ") and "so it was probed at 256×256" in row["reduced_why"]
    assert small_matmul(d, "fp32") is None  # at seconds a call, overhead is nothing: it is the peak
    # --size given: the user's side, whatever the speed
    d = probe(ProbeConfig(device="cpu", dtypes=("fp32",), quick=True, matmul_size=128, copy_bytes=1 << 20,
                     min_time_s=0)).details
    assert d["matmul"]["fp32"]["size"] == 128 and "reduced_from" not in d["matmul"]["fp32"]


def test_the_side_doubles_while_a_call_fits(monkeypatch):
    import accelkit.hardware.probe as probe_module

    monkeypatch.setattr(probe_module, "SLOW_CALL_S", 1e9)
    assert probe_module.cpu_side_for("fp32", 2048) == (2048, None)
    assert probe_module.cpu_side_for("fp32", 700) == (700, None)  # the last step is to the size itself
    assert probe_module.cpu_side_for("fp32", 100) == (100, None)
    # a 512² fp32 call takes a few ms here, a 1024² one eight times that: a threshold between them stops at 512
    calls = {}
    for n in (512, 1024):
        fn = probe_module._matmul_fn("fp32", n, "cpu")
        fn()
        calls[n] = min(probe_module._one_call_s(fn) for _ in range(5))
    monkeypatch.setattr(probe_module, "SLOW_CALL_S", calls[512] * 2.5)  # 512 fits; 1024 (≈8×) does not
    side, why = probe_module.cpu_side_for("fp32", 2048)
    assert side in (256, 512) and why is not None and f"probed at {side}×{side}" in why


def test_the_roofline_of_one_runs_report_is_only_its_machines(tmp_path):
    """A probe is of a machine, not of a run: `report --run` drew every stored machine's roofline beside the run's."""
    from accelkit.report.html import roofline_figure

    with ResultStore(tmp_path / "r.db") as store:
        ours = store.add(_cpu_probe(**FULL))
        other = _cpu_probe(**FULL)
        store.add(Measurement(kind="probe", name="hw probe", hardware="another cpu", details=other.details))
        every = [t["name"] for t in roofline_figure(store)["data"]]
        mine = [t["name"] for t in roofline_figure(store, hardware_names={CPU})["data"]]
    assert any(n.startswith("another cpu") for n in every)
    assert mine == [f"{CPU} fp32 (measured, #{ours})", f"{CPU} bf16 (measured, #{ours})"]
