"""The one typed bench result: built once, stored as a Measurement, read back typed (by the report and
`results export`), and printed as the JSON docs/bench.md documents."""

from __future__ import annotations

import pytest

from accelkit.core import Recipe, summarize
from accelkit.core.bench_result import (
    Accuracy,
    BenchResult,
    BenchRunResult,
    Comparison,
    MfuResult,
    PeakShare,
    Prediction,
    Throughput,
    verdicts,
)

#: the per-variant fields docs/bench.md documents for `accelkit bench --json`
DOCUMENTED = {"name", "step", "precision", "options", "phases", "latency_s", "latency_name", "unbacked_percentiles",
              "noise", "throughput", "mfu", "memory_bytes", "memory_scope", "energy_j_per_item", "energy", "accuracy",
              "predicted", "predicted_reason", "comparison", "timer", "result_id"}


def entry(name: str = "bf16", tput: float = 200.0, *, losses=None, ratio: float | None = None, mfu: float = 0.3,
          baseline: str = "fp32"):
    return BenchResult(
        name=name, step="train step", precision=name, recipe=Recipe(precision="bf16"),
        latency_s=summarize([0.01, 0.011, 0.012]), throughput=Throughput(value=tput, unit="tokens/s"),
        mfu=MfuResult(value=mfu, peak_flops=1e12, peak_source="catalog", flops_source="meta",
                      datasheet=PeakShare(value=mfu, peak_flops=1e12, source="catalog"),
                      probe=PeakShare(value=mfu * 1.4, peak_flops=0.7e12, source="probe")),
        accuracy=Accuracy(cosine=0.999, sqnr_db=30.0, identical=False, rows=2),
        loss_first_steps=losses,
        predicted=Prediction(throughput=150.0, unit="tokens/s", ratio=tput / 150.0, explanation="x"),
        comparison=Comparison(baseline=baseline, ratio=ratio, p25=ratio and ratio * 0.9, p75=ratio and ratio * 1.1,
                              pairs=5, interleaved=True, verdict="faster") if ratio else None,
    )


def test_json_keeps_the_documented_fields_and_leaves_out_what_a_run_has_not():
    doc = entry().to_json()
    assert set(doc) >= DOCUMENTED
    assert "world_size" not in doc and "input_bound" not in doc and "ranks" not in doc
    assert doc["mfu"]["datasheet"]["value"] == 0.3 and doc["mfu"]["probe"]["peak_flops"] == 0.7e12
    assert doc["recipe"]["precision"] == "bf16" and doc["latency_s"]["median"] == pytest.approx(0.011)


def test_measurement_round_trip_is_typed_and_lossless():
    e = entry(losses=[5.0, 4.5, 4.1]).replace(result_id=None)
    m = e.to_measurement(label="llm-train tiny b2 s64", workload="llm-train", config={"model": "tiny-llama"},
                         device="cpu", hardware="cpu: x", environment={"torch": "2"}, spec=None,
                         samples={"latency_s": [0.01, 0.011, 0.012]})
    assert m.kind == "bench" and m.throughput == 200.0 and m.throughput_unit == "tokens/s" and m.mfu == 0.3
    assert m.details["label"] == "llm-train tiny b2 s64" and "latency_s" not in m.details
    back = BenchResult.from_measurement(type(m).from_dict(m.to_dict()))
    assert back == e


def test_a_row_written_by_another_version_still_reads():
    e = entry()
    m = e.to_measurement(label="l", workload="w", config={}, device="cpu", hardware="h", environment={}, spec=None,
                         samples={})
    old = m.replace(details={**m.details, "retired_key": 1, "mfu": {**m.details["mfu"], "retired": True}})
    assert BenchResult.from_measurement(old).mfu.value == 0.3


def test_run_result_json_round_trip():
    run = BenchRunResult(workload="llm-train", label="l", device="cpu", hardware="h", run_id="r",
                         variants=[entry("fp32"), entry("bf16")])
    doc = run.to_json()
    assert "world_size" not in doc and doc["failed"] == [] and len(doc["variants"]) == 2
    assert BenchRunResult.from_dict(doc) == run


def test_verdict_names_the_winner_the_ratio_mfu_and_the_loss():
    lines = verdicts([entry("bf16", 100.0, losses=[9.0, 8.0, 7.5], mfu=0.30),
                      entry("fp8", 131.0, losses=[9.0, 8.1, 7.6], ratio=1.31, mfu=0.393, baseline="bf16")])
    assert lines == ["train step: fp8 fastest at 1.31× [1.18–1.44] bf16 (131 vs 100 tokens/s); MFU 39.3% vs 30.0%; "
                     "loss after 3 steps 7.6 vs 7.5"]
    assert verdicts([entry("fp32", 100.0)]) == []  # one variant: nothing to say


def test_results_export_reads_bench_rows_typed(tmp_path):
    import csv
    import io

    from accelkit.results import ResultStore, export

    m = entry().to_measurement(label="l", workload="w", config={}, device="cpu", hardware="h", environment={},
                               spec=None, samples={"latency_s": [0.01]})
    with ResultStore(tmp_path / "r.db") as store:
        store.add(m)
        rows = list(csv.DictReader(io.StringIO(export(store.query(), "csv"))))
    assert rows[0]["variant"] == "bf16" and rows[0]["step"] == "train step"
    assert float(rows[0]["mfu_vs_probe"]) == pytest.approx(0.42) and float(rows[0]["measured_over_predicted"]) > 1


def test_variants_that_would_not_fit_together_run_one_after_another():
    from accelkit.bench.runner import _too_big_together
    from accelkit.core import Estimate

    def est(total: int):
        return Estimate(kind="plan", name="p", memory_bytes={"total": total}), None

    assert _too_big_together({"a": est(10**6), "b": est(10**6)}, "cpu") is None
    why = _too_big_together({"a": est(10**15), "b": est(10**15)}, "cpu")
    assert why is not None and "one after another" not in why and "free" in why
    assert _too_big_together({"a": est(10**15), "b": (None, "no planner")}, "cpu") is None  # nothing to go by


def test_an_overflowed_variant_reads_inf_nan_in_the_table_with_its_note():
    """The drift column of a variant whose output had inf/NaN showed '-' (as if not compared) and its note was
    printed nowhere; with its figures null the table says inf/NaN and the footnotes carry the note."""
    from rich.console import Console

    from accelkit.report.tables import bench_footnotes, bench_table

    note = "the output has inf/NaN (8 of 32 values): no drift figure is finite, so none is recorded"
    bad = entry("fp16").replace(accuracy=Accuracy(identical=False, rows=4, note=note))
    run = BenchRunResult(workload="w", label="l", device="cpu", hardware="h", run_id="r", variants=[entry("fp32"), bad])
    console = Console(width=250, record=True)
    console.print(bench_table(run))
    assert "inf/NaN" in console.export_text()
    assert f"drift (fp16 · train step): {note}" in bench_footnotes(run)


def test_a_comparison_on_too_few_pairs_is_printed_as_inconclusive():
    """compare() has said 'inconclusive (N pairs of blocks; …)' under 5 pairs since 06a4a46, but the verdict line
    still read 'bf16 fastest at 2.00× fp32' and the table '2.00× [1.90–2.10]', a firm result with no spread behind
    it. Both now say it is inconclusive, and why."""
    from rich.console import Console

    from accelkit.bench.metrics import compare
    from accelkit.report.tables import bench_footnotes, bench_table

    cmp = compare("fp32", [100.0, 101.0, 99.0], [200.0, 199.0, 201.0], interleaved=True)
    assert cmp.is_inconclusive and not Comparison(baseline="fp32", verdict="faster").is_inconclusive
    base = entry("fp32", 100.0).replace(comparison=Comparison(baseline="fp32", ratio=1.0, verdict="baseline"))
    fast = entry("bf16", 200.0).replace(comparison=cmp)
    (line,) = verdicts([base, fast])
    assert "bf16 fastest at" not in line and "bf16 measured fastest at 2.00×" in line
    assert "inconclusive (3 pairs of blocks; a spread needs at least 5" in line
    slow = entry("bf16", 50.0).replace(comparison=cmp.replace(ratio=0.5))
    (line,) = verdicts([base, slow])
    assert "the baseline fp32 measured fastest" in line and "inconclusive (3 pairs" in line
    run = BenchRunResult(workload="w", label="l", device="cpu", hardware="h", run_id="r", variants=[base, fast])
    console = Console(width=250, record=True)
    console.print(bench_table(run))
    assert f"{cmp.ratio:.2f}× [{cmp.p25:.2f}–{cmp.p75:.2f}] ?" in console.export_text()
    assert f"? bf16 · train step: {cmp.verdict}" in bench_footnotes(run)


def test_the_noise_flag_sits_beside_the_statistic_it_is_read_from():
    """The table showed CV with the noise flag, but the flag is read from IQR/median: '859.2% (noisy)' sat next to an
    unflagged '257.5%'. Now the cell gives both, CV · IQR/median, and the flag follows the IQR/median figure."""
    from accelkit.report.tables import bench_table

    outliers = summarize([0.010] * 40 + [0.5])  # one huge outlier: CV ≈ 500%, IQR/median 0
    spread = summarize([0.010, 0.013, 0.016, 0.019, 0.022] * 8)  # wide middle: IQR/median ≈ 50%, CV ≈ 28%
    assert outliers.cv > spread.cv and outliers.noise == "ok" and spread.noise == "unstable"
    run = BenchRunResult(workload="w", label="l", device="cpu", hardware="h", run_id="r",
                         variants=[entry("fp32").replace(latency_s=outliers, noise=outliers.noise),
                                   entry("bf16").replace(latency_s=spread, noise=spread.noise)])
    table = bench_table(run)
    assert "CV · IQR/med" in [c.header for c in table.columns]
    cells = [str(c) for c in table.columns[[c.header for c in table.columns].index("CV · IQR/med")].cells]
    text = " | ".join(cells)
    assert f"{outliers.cv * 100:.1f}% · 0.0%" in text and f"{outliers.cv * 100:.1f}% · 0.0% (" not in text
    assert f"{spread.cv * 100:.1f}% · {spread.iqr_over_median * 100:.1f}% (unstable)" in text


def test_the_verdict_ranks_by_the_ratio_it_quotes():
    """Ranked by total throughput but quoting the paired ratio, a noisy run printed 'bf16 fastest at 0.61× fp32
    (7,254 vs 7,116 tokens/s)': bf16 lost most pairs of blocks, while a few very slow fp32 blocks lowered fp32's
    total. The ranking now uses the ratio the line quotes, and the line says the totals disagree."""
    base = entry("fp32", 100.0).replace(comparison=Comparison(baseline="fp32", ratio=1.0, verdict="baseline"))
    slower = entry("bf16", 105.0).replace(comparison=Comparison(baseline="fp32", ratio=0.61, p25=0.57, p75=0.81,
                                                                pairs=8, interleaved=True, verdict="slower"))
    (line,) = verdicts([base, slower])
    assert line.startswith("train step: the baseline fp32 was fastest"), line
    assert "next bf16 at 0.61× [0.57–0.81]" in line and "total throughput says otherwise, 105 vs 100" in line
    faster = entry("bf16", 150.0).replace(comparison=Comparison(baseline="fp32", ratio=1.5, p25=1.4, p75=1.6,
                                                                pairs=8, interleaved=True, verdict="faster"))
    (line,) = verdicts([base, faster])
    assert line.startswith("train step: bf16 fastest at 1.50× [1.40–1.60] fp32") and "says otherwise" not in line


def test_verdict_rates_are_never_in_e_notation():
    """':,.4g' printed 59,449.73 tokens/s as '5.945e+04'."""
    base = entry("fp32", 59449.73).replace(comparison=Comparison(baseline="fp32", ratio=1.0, verdict="baseline"))
    slower = entry("bf16", 35719.15).replace(comparison=Comparison(baseline="fp32", ratio=0.6, p25=0.59, p75=0.61,
                                                                   pairs=8, interleaved=True, verdict="slower"))
    (line,) = verdicts([base, slower])
    assert "(59,450 tokens/s)" in line and "e+" not in line, line


def test_a_ratio_within_the_spread_names_no_winner_and_reads_in_order():
    """'fp16 fastest at 2.31× [0.46–3.02], within the run-to-run spread fp32 (…)': the spread clause sat between
    the ratio and the baseline's name, and a ratio the comparison called no difference was called fastest."""
    cmp = Comparison(baseline="fp32", ratio=2.31, p25=0.46, p75=3.02, verdict="no difference (within the spread)")
    base = entry("fp32", 100.0).replace(comparison=Comparison(baseline="fp32", ratio=1.0, verdict="baseline"))
    (line,) = verdicts([base, entry("fp16", 231.0).replace(comparison=cmp)])
    assert line.startswith("train step: fp16 measured fastest at 2.31× [0.46–3.02] fp32, within the run-to-run "
                           "spread (231 vs 100 tokens/s)"), line
    (line,) = verdicts([base, entry("fp16", 90.0).replace(comparison=cmp.replace(ratio=0.9))])
    assert "the baseline fp32 measured fastest" in line and "next fp16 at 0.90× [0.46–3.02], within" in line, line


def test_mfu_above_100_percent_is_flagged_with_the_fix():
    """MFU 120.7% (a quick probe taken under load is the peak every later run divides by) was printed without a
    word; the footnotes now say what it means and which probe to re-run."""
    from accelkit.report.tables import bench_footnotes

    run = BenchRunResult(workload="w", label="l", device="cpu", hardware="h", run_id="r",
                         variants=[entry("fp32", mfu=0.8), entry("bf16", mfu=0.5)])  # fp32: 112% of its probe
    flagged = [line for line in bench_footnotes(run) if line.startswith("MFU above 100%")]
    assert flagged == ["MFU above 100% (fp32 · train step: 112.0% of probe) — re-run `accelkit hw probe` (without "
                       "--quick) on a quiet machine"]
    # above a datasheet peak, re-probing changes nothing: the FLOPs or the device are wrong
    run = BenchRunResult(workload="w", label="l", device="cuda", hardware="h", run_id="r",
                         variants=[entry("fp32", mfu=1.05)])
    flagged = [line for line in bench_footnotes(run) if line.startswith("MFU above 100%")]
    assert flagged[-1] == ("MFU above 100% (fp32 · train step: 105.0% of catalog) — a datasheet peak cannot be beaten: "
                           "check the counted FLOPs and the device accelkit identified")


def test_separate_benches_of_one_run_compare_by_throughput_not_by_their_own_baselines():
    """A sweep over precisions stores each point as its own bench, its own baseline ({baseline: itself, ratio 1.0})
    under one run id. The report read that 1.0 as bf16 against fp32: 'next bf16 at 1.00×' when bf16 ran at 0.13×.
    A comparison counts only when it was made against this baseline; otherwise the throughputs' ratio, said to
    have no spread."""
    fp32 = entry("fp32", 8.8).replace(comparison=Comparison(baseline="fp32", ratio=1.0, verdict="baseline"))
    bf16 = entry("bf16", 1.1).replace(comparison=Comparison(baseline="bf16", ratio=1.0, verdict="baseline"))
    (line,) = verdicts([fp32, bf16])
    assert "next bf16 at 0.12× by throughput, not interleaved: no spread" in line and "1.00×" not in line, line
    (line,) = verdicts([bf16, fp32])  # the faster one second: named fastest by its throughputs' ratio
    assert line.startswith("train step: fp32 fastest at 8.00× bf16 by throughput, not interleaved: no spread"), line
    # the same name as the baseline but its own baseline row (two sweep points differing outside the label)
    twin = entry("fp32", 4.4).replace(comparison=Comparison(baseline="fp32", ratio=1.0, verdict="baseline"))
    (line,) = verdicts([fp32, twin])
    assert "next fp32 at 0.50× by throughput" in line, line
