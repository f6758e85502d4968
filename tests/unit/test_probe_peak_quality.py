"""Issue 29 item 3: MFU can never silently exceed 1. `accelkit tune bert --size tiny` stored a quick fp16 probe (a
512×512 matmul at 0.0011 TFLOP/s); the next fp16 result read MFU 107%, and the same probe replaced the machine's
roofline in the report (the full probe's fp32/bf16 lines vanished) and became `results list --kind probe`'s headline.

A probe records its size and quality; a device's peak per dtype is the best full probe, a quick or smaller one only
where no full one is stored; an MFU above 1 is flagged and explained in the bench table, the JSON and the report."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from accelkit.bench.metrics import Peak, mfu_result, probe_peak
from accelkit.cli.app import app
from accelkit.core import Measurement
from accelkit.hardware.detect import this_cpu
from accelkit.hardware.probe import ProbeConfig, probe
from accelkit.hardware.probe_quality import matmul_quality, probe_quality
from accelkit.results import ResultStore

CPU = this_cpu()  # the planner reads the probes of the CPU it runs on


def _probe(*, quick: bool, rows: dict[str, tuple[float, int]], reduced: bool = False) -> Measurement:
    """A stored CPU probe as `hw probe` writes it: dtype → (TFLOP/s, matmul side)."""
    matmul = {dt: {"tflops": tflops, "size": size, **({"reduced_from": 2048} if reduced else {})}
              for dt, (tflops, size) in rows.items()}
    details = {"device": "cpu", "catalog_name": None, "quick": quick, "matmul": matmul,
               "bandwidth": {"gbps": 12.0, "bytes_per_iteration": 2 * (256 << 20), "fraction_of_peak": None}}
    return Measurement(kind="probe", name="hw probe", hardware=CPU, details=details, throughput=max(
        t for t, _ in rows.values()), throughput_unit="TFLOP/s (best matmul dtype)")


FULL = dict(quick=False, rows={"fp32": (0.60, 2048), "bf16": (0.68, 2048)})
QUICK_FP16 = dict(quick=True, rows={"fp16": (0.0011, 512)}, reduced=True)  # what `tune` stored
QUICK_FP32 = dict(quick=True, rows={"fp32": (0.30, 2048)})  # a quick probe on a busy machine


def test_a_real_probe_records_its_size_and_quality():
    quick = probe(ProbeConfig(device="cpu", dtypes=("fp32",), quick=True, matmul_size=128, copy_bytes=1 << 20))
    row = quick.details["matmul"]["fp32"]
    assert (row["size"], row["quality"], quick.details["quality"]) == (128, "small", "small")
    assert quick.details["bandwidth"]["quality"] == "small"
    # at the default side a --quick probe is 'quick', not 'full'
    assert matmul_quality({**quick.details, "matmul": {"fp32": {"size": 2048}}}, "fp32") == "quick"
    assert probe_quality({**quick.details, "quick": False, "matmul": {"fp32": {"size": 2048}},
                          "bandwidth": {"bytes_per_iteration": 2 * (256 << 20)}}) == "full"


def test_a_quicker_probe_never_replaces_the_full_one_and_the_best_full_one_wins(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        full = store.add(_probe(**FULL))
        better = store.add(_probe(quick=False, rows={"fp32": (0.65, 2048)}))
        store.add(_probe(quick=False, rows={"fp32": (0.50, 2048)}))  # newest full, lower: a busy machine
        store.add(_probe(**QUICK_FP32))  # newer still, quick
        quick16 = store.add(_probe(**QUICK_FP16))
        fp32, fp32_id = probe_peak(store, CPU, "fp32")
        bf16, bf16_id = probe_peak(store, CPU, "bf16")
        fp16, fp16_id = probe_peak(store, CPU, "fp16")
    assert (fp32_id, fp32.flops) == (better, 0.65e12) and "the best of 3 full probes" in fp32.source
    assert (bf16_id, bf16.flops) == (full, 0.68e12)
    # no full fp16 probe: the quick one, said so (the MFU it gives can read high)
    assert fp16_id == quick16 and "a --quick probe" in fp16.source and "can read high" in fp16.source


def test_mfu_above_1_is_flagged_in_the_json_the_table_and_results_list(tmp_path):
    from accelkit.core.bench_result import BenchResult, BenchRunResult
    from accelkit.core.stats import summarize
    from accelkit.report.tables import bench_footnotes, mfu_text

    with ResultStore(tmp_path / "r.db") as store:
        store.add(_probe(**QUICK_FP16))
        peak, _ = probe_peak(store, CPU, "fp16")
    # a tiny bert in fp16 on a CPU: small matmuls that stay in cache ran above the 512² probe
    mfu = mfu_result(1.0e6, 1181.0, peak, "counted", probe=peak)
    assert mfu.value is not None and mfu.value > 1
    assert mfu.above_peak is not None and "that probe ran slower than this workload's own matmuls" in mfu.above_peak
    assert "full `accelkit hw probe`" in mfu.above_peak
    assert mfu.to_dict()["above_peak"] == mfu.above_peak  # the JSON
    ok = mfu_result(1.0e6, 100.0, peak, "counted", probe=peak)
    assert ok.above_peak is None and "above peak" not in mfu_text(BenchResult(name="a", step="s", mfu=ok))
    # a datasheet peak cannot be beaten: the FLOPs or the device are wrong, not the probe
    sheet = mfu_result(1.0e12, 2000.0, Peak(989e12, "catalog: H100 dense bf16"), "counted")
    assert sheet.above_peak is not None and "counted FLOPs or the device" in sheet.above_peak

    entry = BenchResult(name="fp16", step="forward", precision="fp16", mfu=mfu, latency_s=summarize([0.01] * 5))
    assert mfu_text(entry).endswith("⚠ above peak")  # the table's cell
    run = BenchRunResult(workload="bert", label="bert", device="cpu", hardware=CPU, run_id="r", variants=[entry])
    (line,) = [x for x in bench_footnotes(run) if "MFU above 100%" in x]
    assert line == f"⚠ MFU above 100% (fp16 · forward): {mfu.above_peak}"

    # results list: the row's MFU cell and its --json say so
    with ResultStore() as store:
        rid = store.add(entry.to_measurement(label="bert", workload="bert", config={}, device="cpu", hardware=CPU,
                                             environment={}, spec=None, samples={}))
    listed = CliRunner().invoke(app, ["results", "list", "--json"])
    assert listed.exit_code == 0, listed.output
    (row,) = [r for r in json.loads(listed.stdout) if r["id"] == rid]
    assert row["mfu"] > 1 and row["mfu_above_peak"] == mfu.above_peak
    table = CliRunner().invoke(app, ["results", "list"], terminal_width=400, env={"COLUMNS": "400"})
    assert "⚠ above peak" in table.stdout


def test_results_list_says_which_probe_is_the_peak():
    with ResultStore() as store:
        full = store.add(_probe(**FULL))
        quick = store.add(_probe(**QUICK_FP32))  # the newest: listed first
    listed = CliRunner().invoke(app, ["results", "list", "--kind", "probe", "--json"])
    assert listed.exit_code == 0, listed.output
    rows = {r["id"]: r for r in json.loads(listed.stdout)}
    assert (rows[full]["probe_quality"], rows[full]["peak_role"]) == ("full", "full; the peak of fp32, bf16")
    assert (rows[quick]["probe_quality"], rows[quick]["peak_role"]) == ("quick", f"quick: no peak (the peaks: #{full})")
    table = CliRunner().invoke(app, ["results", "list", "--kind", "probe"]).stdout
    words = " ".join(table.replace("│", " ").split())  # the headline cell wraps on a narrow terminal
    assert "quick: no" in words and "full; the" in words, table


def test_the_roofline_shows_the_best_probe_per_dtype(tmp_path):
    from accelkit.report.html import roofline_figure

    with ResultStore(tmp_path / "r.db") as store:
        full = store.add(_probe(**FULL))
        store.add(_probe(**QUICK_FP32))
        quick16 = store.add(_probe(**QUICK_FP16))  # the newest probe measured fp16 only
        notes: list[str] = []
        names = [t["name"] for t in roofline_figure(store, notes)["data"]]
    assert names == [f"{CPU} fp16 (measured, #{quick16}, quick)", f"{CPU} fp32 (measured, #{full})",
                     f"{CPU} bf16 (measured, #{full})"]
    assert notes == [f"{CPU} fp16: drawn from probe #{quick16} (a --quick probe: a few calls, so one slow call on a "
                     "busy machine lowers it), as no full fp16 probe is stored: run `accelkit hw probe --dtype fp16`"]
