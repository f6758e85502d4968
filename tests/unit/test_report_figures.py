"""The report's charts: titled axes with units on every chart (plotly ignores a bare-string title), a section
without data left out, predicted vs measured one trace per unit. (tests/integration/test_report_browser.py reads
the rendered titles back from Chromium.)"""

from __future__ import annotations

import dataclasses

import pytest

from accelkit.core import summarize
from accelkit.core.bench_result import (
    BenchResult,
    Comparison,
    MfuResult,
    PeakShare,
    Prediction,
    Throughput,
)
from accelkit.report.html import (
    BenchRow,
    _table_rows,
    comparison_figure,
    latency_figure,
    mfu_figure,
    predicted_figure,
    run_verdicts,
)


def row(i: int, name: str, unit: str, measured: float, predicted: float | None, *, run: str = "r1") -> BenchRow:
    result = BenchResult(
        name=name, step="forward", latency_s=summarize([0.01, 0.02]), throughput=Throughput(value=measured, unit=unit),
        mfu=MfuResult(value=0.2, peak_flops=1e12, peak_source="catalog: H200",
                      datasheet=PeakShare(value=0.2, peak_flops=1e12, source="catalog"),
                      probe=PeakShare(value=0.29, peak_flops=0.69e12, source="probe #3")),
        predicted=Prediction(throughput=predicted, unit=unit, ratio=measured / predicted if predicted else None,
                             explanation="measured ÷ predicted …") if predicted else None,
        comparison=Comparison(baseline="fp32", ratio=1.0 + i / 10, p25=1.0, p75=1.2 + i / 10, pairs=3, verdict="faster"),
    )
    return BenchRow(id=i, run_id=run, label="bert tiny", hardware="H200", created_at="t", result=result,
                    samples={"latency_s": [0.01, 0.02]})


def _titles(fig):
    layout = fig["layout"]
    return layout["xaxis"]["title"]["text"], layout["yaxis"]["title"]["text"]


def test_every_chart_titles_both_axes_with_units():
    rows = [row(1, "fp32", "samples/s", 100, 80), row(2, "bf16", "samples/s", 300, 160),
            row(3, "decode", "tokens/s", 50, 100, run="r2")]
    for fig in (comparison_figure(rows), latency_figure(rows), mfu_figure(rows), predicted_figure(rows)):
        x, y = _titles(fig)
        assert x and y, fig["layout"]
        assert fig["layout"]["xaxis"]["automargin"] and fig["layout"]["yaxis"]["automargin"]
    assert "ms" in _titles(latency_figure(rows))[0] and "%" in _titles(mfu_figure(rows))[0]


def test_mfu_shows_the_datasheet_and_the_probe_peak():
    fig = mfu_figure([row(1, "bf16", "samples/s", 1, None)])
    assert [t["x"] for t in fig["data"]] == [[20.0], [pytest.approx(29.0)]]


def test_predicted_vs_measured_keeps_each_unit_apart():
    fig = predicted_figure([row(1, "fp32", "samples/s", 100, 80), row(2, "decode", "tokens/s", 50, 100)])
    by_name = {t["name"]: t for t in fig["data"]}
    assert by_name["samples/s"]["x"] == [80] and by_name["tokens/s"]["y"] == [50]
    assert "measured = predicted" in by_name


def test_sections_without_data_are_left_out():
    lonely = [row(1, "fp32", "samples/s", 100, None)]
    assert comparison_figure(lonely) is None  # one variant: nothing to compare
    assert predicted_figure(lonely) is None
    assert latency_figure([]) is None and mfu_figure([]) is None


def _own_baseline(i: int, name: str, measured: float, *, run: str = "sweep1") -> BenchRow:
    """A sweep point as the store keeps it: its own bench, so its own baseline."""
    r = row(i, name, "images/s", measured, None, run=run)
    return dataclasses.replace(r, result=r.result.replace(
        comparison=Comparison(baseline=name, ratio=1.0, verdict="baseline")))


def test_a_sweep_over_precisions_is_compared_by_throughput_not_by_each_points_own_baseline():
    """Each point of a sweep is its own bench, stored as {baseline: itself, ratio: 1.0}: the chart drew bf16 at 1.00×
    and the verdict said 'next bf16 at 1.00×' when it ran at 0.125×. Now a hatched trace of the throughputs' ratio,
    without error bars, and the verdict says the ratio has no spread."""
    rows = [_own_baseline(6, "bf16", 1.1), _own_baseline(3, "fp32", 8.8)]  # newest first, as the store returns them
    (trace,) = comparison_figure(rows)["data"]
    assert trace["y"] == ["fp32", "bf16"] and trace["x"] == [1.0, pytest.approx(0.125)]
    assert "error_x" not in trace and trace["marker"]["pattern"]["shape"] and "no spread" in trace["name"]
    ((verdict,),) = [v["lines"] for v in run_verdicts(rows)]
    assert "bf16 at 0.12× by throughput, not interleaved: no spread" in verdict and "1.00×" not in verdict


def test_comparison_traces_name_their_run_and_hardware():
    """Two runs of the same workload on two machines gave two traces both named 'bert tiny · forward'."""
    rows = [row(4, "bf16", "samples/s", 300, None, run="r2"), row(3, "fp32", "samples/s", 100, None, run="r2"),
            row(2, "bf16", "samples/s", 300, None), row(1, "fp32", "samples/s", 100, None)]
    rows[:2] = [dataclasses.replace(r, hardware="cpu: other") for r in rows[:2]]
    names = [t["name"] for t in comparison_figure(rows)["data"]]
    assert names == ["bert tiny · forward · run r1 · H200", "bert tiny · forward · run r2 · cpu: other"]
    assert all("run r" in text for t in comparison_figure(rows)["data"] for text in t["text"])


def test_the_runs_table_writes_small_figures_as_the_bench_table_does():
    """A CPU text-to-image row at 0.00123 images/s read '0.00 images/s' (',.2f') in the report's runs table, where the
    terminal table wrote 1.23e-03; the median latency is in the terminal's units too."""
    (cells,) = _table_rows([row(7, "fp32", "images/s", 0.00123, None)])
    assert cells["throughput"] == "1.23e-03 images/s" and cells["p50"] == "15 ms"
    (cells,) = _table_rows([row(8, "fp32", "samples/s", 1234.5, None)])
    assert cells["throughput"] == "1,234.50 samples/s"


def test_the_mfu_above_peak_note_names_the_stored_row():
    """The note said 'result None': it named the bench entry's result_id, which a stored row never has."""
    r = row(12, "fp32", "samples/s", 1, None)
    r = dataclasses.replace(r, result=r.result.replace(mfu=r.result.mfu.replace(value=1.35)))
    notes: list[str] = []
    mfu_figure([r], notes)
    (note,) = notes
    assert note.startswith("MFU above 100% (#12 fp32 · bert tiny · forward, result 12): ") and "None" not in note
