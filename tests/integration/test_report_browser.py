"""`accelkit report` in a real browser: Debian's chromium driven by Playwright opens the self-contained
HTML built from real benchmark results; no console errors, no network requests, every plot rendered,
the filters work; a screenshot is kept under test-artifacts/."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import REPO, accelkit

CHROMIUM = os.environ.get("ACCELKIT_CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync", "--no-first-run"]
ARTIFACTS = REPO / "test-artifacts"
EXPECTED_AXIS_TITLES = {
    "plot-comparison": ["throughput ÷ first variant of the run (×; bars p25–p75)", "variant"],
    "plot-latency": ["latency per iteration (ms, log scale)", "result"],
    "plot-mfu": ["MFU (% of the dense peak of the dtype used)", "result"],
    "plot-predicted": ["predicted by `accelkit plan` (items/s in the step's unit, log scale)",
                       "measured (items/s in the same unit, log scale)"],
    "plot-roofline": ["arithmetic intensity (FLOP/byte, log scale)", "attainable TFLOP/s (log scale)"],
    "plot-serving": ["achieved request throughput (requests/s)", "latency (ms)"],
    "plot-serving-dist": ["metric @ offered request rate", "latency (ms)"],
}


def _browser_or_skip():
    """Playwright + chromium, or a skip with the reason — a failure in CI, where .ci/run installs both."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        reason = "playwright is not installed (pip install -e '.[dev]')"
    else:
        if Path(CHROMIUM).exists():
            return sync_playwright
        reason = f"no chromium at {CHROMIUM} (apt-get install chromium)"
    if os.environ.get("CI"):
        pytest.fail(reason)
    pytest.skip(reason)


@pytest.fixture
def report_file(probed, tmp_path) -> Path:
    """A report of real results: a bert precision pair and an LLM run, plus the probe."""
    fast = ("--warmup", "2", "--warmup-time", "0", "--min-iterations", "8", "--min-time", "0.3")
    for args in (("bert", "--size", "tiny", "--seq-len", "32", "--batch-size", "2", "--precision", "fp32,bf16"),
                 ("llm", "--model", "tiny-llama", "--prompt-len", "32", "--output-len", "8")):
        proc = accelkit("bench", *args, *fast)
        assert proc.returncode == 0, proc.stderr
    from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig

    with FakeOpenAIServer(FakeServerConfig(model="fake", ttft_s=0.02, itl_s=0.005)) as fake:  # a small sweep: curves
        proc = accelkit("loadtest", "--base-url", fake.base_url, "--model", "fake", "--num-prompts", "12",
                        "--random-output-len", "6", "--sweep-rates", "20,inf", "--warmup", "0")
        assert proc.returncode == 0, proc.stderr
    out = tmp_path / "report.html"
    proc = accelkit("report", "--out", str(out), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["path"] == str(out.resolve())
    return out


def test_report_never_imports_torch(probed, tmp_path):
    code = ("import sys; from accelkit.report import write_report; write_report(sys.argv[1]); "
            "assert 'torch' not in sys.modules, 'torch imported'; print('ok')")
    proc = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r.html")], capture_output=True, text=True,
                          cwd=REPO, env=os.environ.copy(), timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr


@contextmanager
def chromium() -> Iterator[Any]:
    """Headless chromium (Playwright's Browser), closed on the way out; a test module opens one for its tests and
    each ``rendered`` page has a context of its own."""
    sync_playwright = _browser_or_skip()
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def rendered(path, check, browser: Any = None) -> list[str]:
    """Open the report ``path`` in headless chromium (``browser``, else one of its own), wait until every chart has
    drawn, run ``check(page)``; assert the page logged no error and return the URLs it requested outside the file
    (none, self-contained). The page is a context of its own: nothing is shared with another page of ``browser``."""
    if browser is None:
        with chromium() as own:
            return rendered(path, check, own)
    errors: list[str] = []
    requests: list[str] = []
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("request", lambda req: None if req.url.startswith(("file:", "data:", "blob:"))
                else requests.append(req.url))
        page.goto(path.resolve().as_uri())
        page.wait_for_function("window.accelkitPlotsRendered === window.accelkitPlotsExpected", timeout=60_000)
        check(page)
    finally:
        page.close()  # and its context
    assert errors == []
    return requests


def test_report_renders_in_chromium(report_file):
    def check(page):
        # self-contained: no external script, stylesheet or image, and (below) no request left the page
        assert page.evaluate("document.querySelectorAll('script[src], link[href], img[src]').length") == 0
        plots = page.locator("div.plot")
        assert plots.count() == 7
        for i in range(plots.count()):  # every plot drew its SVG
            assert plots.nth(i).locator(".main-svg").count() >= 1, plots.nth(i).get_attribute("id")
        # every chart's axes carry a rendered title with its unit (plotly drops a bare-string title silently)
        titles = page.evaluate("""() => Object.fromEntries([...document.querySelectorAll('div.plot')].map(d => [
            d.id, [d.querySelector('.xtitle')?.textContent || '', d.querySelector('.ytitle')?.textContent || '']]))""")
        assert titles == EXPECTED_AXIS_TITLES, titles
        # tick labels are drawn inside their chart (none clipped off the edge)
        clipped = page.evaluate("""() => [...document.querySelectorAll('div.plot')].flatMap(d => {
            const box = d.getBoundingClientRect();
            return [...d.querySelectorAll('.xtick text, .ytick text')].filter(t => {
                const r = t.getBoundingClientRect();
                return r.width > 0 && (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1
                                       || r.bottom > box.bottom + 1);
            }).map(t => d.id + ': ' + t.textContent);
        })""")
        assert clipped == [], clipped
        # no legend covers an axis title
        covered = page.evaluate("""() => [...document.querySelectorAll('div.plot')].filter(d => {
            const legend = d.querySelector('.legend'), titles = d.querySelectorAll('.xtitle, .ytitle');
            if (!legend) return false;
            const a = legend.getBoundingClientRect();
            return [...titles].some(t => { const b = t.getBoundingClientRect();
                return a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom; });
        }).map(d => d.id)""")
        assert covered == [], covered
        verdicts = page.locator("ul.verdicts").inner_text()
        assert "forward:" in verdicts and "fp32" in verdicts  # what won the bert fp32/bf16 run, in words
        # the comparison, latency and MFU plots have data (not the "no data" placeholder)
        for pid in ("plot-comparison", "plot-latency", "plot-mfu", "plot-roofline", "plot-serving",
                    "plot-serving-dist"):
            assert page.evaluate(f"document.getElementById('{pid}').data.length") >= 1, pid
        rows = page.locator("#runs-table tbody tr[data-hardware]")
        total = rows.count()
        assert total == 4  # bert fp32, bf16; llm prefill, decode
        page.fill("#filter-text", "decode")
        assert page.locator("#runs-table tbody tr[data-hardware]:visible").count() == 1
        page.fill("#filter-text", "")
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "report.png"), full_page=True)

    requests = rendered(report_file, check)
    assert requests == []
    assert (ARTIFACTS / "report.png").stat().st_size > 10_000
    shutil.copy(report_file, ARTIFACTS / "report.html")


def test_report_leaves_out_sections_without_data(_isolated_home, tmp_path):
    """Nothing measured yet: no chart placeholders, only the empty runs table that says what to run."""
    out = tmp_path / "empty.html"
    proc = accelkit("report", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    html = out.read_text()
    assert 'data-plot="' not in html and "What won each run" not in html
    assert "No benchmark results yet" in html


@pytest.mark.parametrize("where", ["dir", "missing-parent"])
def test_report_out_must_be_a_file_in_an_existing_directory(_isolated_home, tmp_path, where):
    target = tmp_path if where == "dir" else tmp_path / "no" / "such" / "r.html"
    proc = accelkit("report", "--out", str(target))
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and str(target) in proc.stderr
    assert ("is a directory" if where == "dir" else "does not exist") in proc.stderr
    assert not (tmp_path / "no").exists()  # nothing was created on the way
