"""The report's charts: titled axes with units on every chart (plotly ignores a bare-string title), a section
without data left out, predicted vs measured one trace per unit. (tests/integration/test_report_browser.py reads
the rendered titles back from Chromium.)"""

from __future__ import annotations

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
    comparison_figure,
    latency_figure,
    mfu_figure,
    predicted_figure,
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
