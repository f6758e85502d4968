"""`accelkit report` on stores a real bench would not make in a quick test: text with HTML in it, CPU names with runs
of spaces, a probe row without figures, more rows than the table shows, a store of plans only. Rows are built
typed (BenchResult.to_measurement, as the bench stores them) into a real SQLite store; the browser checks run the
report in Debian's headless chromium (as tests/integration/test_report_browser.py)."""

from __future__ import annotations

import re

import pytest

from accelkit.core import Estimate, Measurement, summarize
from accelkit.core.bench_result import BenchResult, Comparison, Throughput
from accelkit.report import write_report
from accelkit.results import ResultStore
from tests.conftest import accelkit
from tests.integration.test_report_browser import chromium, rendered


@pytest.fixture(scope="module")
def browser():
    """One chromium for the module's two browser checks (a page of its own each)."""
    with chromium() as opened:
        yield opened


def _bench_pair(store: ResultStore, *, label: str, hardware: str, run_id: str, name_prefix: str = "") -> None:
    """One bench run's two variants (fp32 the baseline, bf16 compared with it), as the bench stores them."""
    rows = []
    for name, rate, ratio in (("fp32", 100.0, 1.0), ("bf16", 150.0, 1.5)):
        result = BenchResult(name=name_prefix + name, step="forward", latency_s=summarize([0.01, 0.012, 0.011]),
                             throughput=Throughput(value=rate, unit="samples/s"),
                             comparison=Comparison(baseline=name_prefix + "fp32", ratio=ratio, p25=ratio * 0.9,
                                                   p75=ratio * 1.1, pairs=8, interleaved=True,
                                                   verdict="baseline" if name == "fp32" else "faster"))
        rows.append(result.to_measurement(label=label, workload="bert", config={}, device="cpu", hardware=hardware,
                                          environment={}, spec=None, samples={"latency_s": [0.01, 0.012, 0.011]}))
    store.add_many(rows, run_id=run_id)


def test_stored_text_cannot_break_the_charts_script(_isolated_home, tmp_path, browser):
    """A workload label '<!--<script>' in the figures' JSON put chromium's parser in 'script data double escaped':
    the script never ended and no chart drew. Everything < > & in that JSON is now a \\u escape."""
    with ResultStore() as store:
        _bench_pair(store, label="<!--<script> bert", hardware="cpu: <b>x</b> & y", run_id="r1",
                    name_prefix="</script><script>window.__xss=1</script>")
    out = write_report(tmp_path / "r.html")
    html = out.read_text()
    script = html[html.index("var figures"):]
    assert "<!--" not in script and "</script><script>" not in script.split("</script>")[0]

    def check(page):
        assert page.evaluate("window.accelkitPlotsExpected") == 2  # comparison and latency, both drawn
        assert page.evaluate("window.__xss === undefined")
        assert "<!--<script> bert" in page.locator("ul.verdicts").inner_text()  # shown as text

    rendered(out, check, browser)


def test_the_hardware_filter_keeps_names_with_runs_of_spaces(_isolated_home, tmp_path, browser):
    """An <option> without value= gives its text with whitespace collapsed: 'Xeon(R) CPU           E5645' became
    'Xeon(R) CPU E5645', matched no row, and selecting it hid the whole table."""
    names = ["cpu: Intel(R) Xeon(R) CPU           E5645  @ 2.40GHz", "cpu: AMD EPYC 7742 64-Core Processor"]
    with ResultStore() as store:
        for i, hardware in enumerate(names):
            _bench_pair(store, label="bert tiny", hardware=hardware, run_id=f"r{i}")
    out = write_report(tmp_path / "r.html")

    def check(page):
        for i in range(len(names)):
            page.select_option("#filter-hardware", index=i + 1)
            assert page.inner_text("#filter-count") == "2 of 4 shown"

    rendered(out, check, browser)


def test_a_probe_row_without_figures_is_left_out_with_a_note(_isolated_home, tmp_path):
    """A probe stored through the Python API (no bandwidth, no matmul) stopped the report: KeyError 'bandwidth'."""
    with ResultStore() as store:
        store.add(Measurement(kind="probe", name="hand-made", hardware="cpu: x", throughput=1.0))
        store.add(Measurement(kind="probe", name="half", hardware="cpu: y",
                              details={"bandwidth": {"gbps": 20.0}, "matmul": {"fp32": {"tflops": None}}}))
    proc = accelkit("report", "--out", str(tmp_path / "r.html"))
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "r.html").read_text()
    assert "note: probe #1 (cpu: x) has no bandwidth or matmul figures; it is left out of the roofline" in html
    assert "note: probe #2 (cpu: y) has no bandwidth or matmul figures" in html and 'data-plot="roofline"' not in html


def test_the_runs_table_says_how_many_it_leaves_out(_isolated_home, tmp_path):
    """The table stopped at the newest 500 benchmark results without a word; now it says so, and --limit shows more."""
    with ResultStore() as store:
        for i in range(4):
            _bench_pair(store, label="bert tiny", hardware="cpu: x", run_id=f"r{i}")
    proc = accelkit("report", "--out", str(tmp_path / "r.html"), "--limit", "5")
    assert proc.returncode == 0, proc.stderr
    html = (tmp_path / "r.html").read_text()
    assert len(re.findall(r"<tr data-hardware=", html)) == 5
    assert "the newest 5 of 8 benchmark results\n(<code>accelkit report --limit 8</code> lists all)" in html
    proc = accelkit("report", "--out", str(tmp_path / "all.html"), "--limit", "8")
    html = (tmp_path / "all.html").read_text()
    assert len(re.findall(r"<tr data-hardware=", html)) == 8 and "lists all" not in html


@pytest.mark.parametrize("run", [None, "s1"])
def test_a_store_without_benchmarks_says_what_it_has(_isolated_home, tmp_path, run):
    """'No benchmark results yet' over a store of plans and a sweep read as an empty store."""
    with ResultStore() as store:
        store.add_many([Estimate(kind="plan", name="a"), Estimate(kind="plan", name="b"),
                        Measurement(kind="sweep", name="sweep")], run_id="s1")
        store.add(Estimate(kind="plan", name="c"))
    args = ("--run", run) if run else ()
    proc = accelkit("report", "--out", str(tmp_path / "r.html"), *args)
    assert proc.returncode == 0, proc.stderr
    text = " ".join(re.sub(r"<[^>]+>", " ", (tmp_path / "r.html").read_text()).split())
    expected = ("No benchmark results in run s1 — the run has 2 plan, 1 sweep" if run else
                "No benchmark results yet — the store has 3 plan, 1 sweep")
    assert expected + " ( accelkit results list ): accelkit bench --suite quick makes some." in text, text[-600:]
