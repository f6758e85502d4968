"""Issue 29 item 3 in the browser: a quick probe far under this CPU's real fp32 peak is the only fp32 probe stored,
so a real `bench bert` reads MFU above 100% against it. The report (in chromium) draws that bar red, labelled
'⚠ above peak', with a dotted 100% line and a note explaining it; the roofline draws each dtype from its best probe
(the full probe's bf16 line survives a newer quick fp32-only probe)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from accelkit.bench.runner import identify
from accelkit.cli.app import app
from accelkit.core import Measurement
from accelkit.report.html import ABOVE_PEAK_COLOR
from accelkit.results import ResultStore
from tests.integration.test_report_browser import rendered


def _probe(hardware: str, *, quick: bool, rows: dict[str, float]) -> Measurement:
    details = {"device": "cpu", "catalog_name": None, "quick": quick,
               "matmul": {dt: {"tflops": t, "size": 2048} for dt, t in rows.items()},
               "bandwidth": {"gbps": 10.0, "bytes_per_iteration": 2 * (256 << 20), "fraction_of_peak": None}}
    return Measurement(kind="probe", name="hw probe", hardware=hardware, details=details)


def test_an_mfu_above_the_peak_is_red_and_explained_and_the_roofline_keeps_the_best_probes(tmp_path):
    hardware = identify("cpu")[0]
    with ResultStore() as store:
        full = store.add(_probe(hardware, quick=False, rows={"bf16": 0.5}))
        # a 2048² fp32 matmul at a millionth of a TFLOP/s: a quick probe taken on a machine that was anything but idle
        quick = store.add(_probe(hardware, quick=True, rows={"fp32": 1e-6}))
    runner = CliRunner()
    bench = runner.invoke(app, ["bench", "bert", "--size", "tiny", "--seq-len", "32", "--batch-size", "2",
                                "--precision", "fp32", "--warmup", "2", "--warmup-time", "0", "--min-iterations",
                                "5", "--min-time", "0.2", "--no-predict", "--no-probe", "--json"])
    assert bench.exit_code == 0, bench.output
    (variant,) = json.loads(bench.stdout)["variants"]
    assert variant["mfu"]["value"] > 1 and "that probe ran slower" in variant["mfu"]["above_peak"]
    out = tmp_path / "report.html"
    report = runner.invoke(app, ["report", "--out", str(out)])
    assert report.exit_code == 0, report.output

    def check(page):
        mfu = page.evaluate("""() => { const d = document.getElementById('plot-mfu');
            return {colors: d.data[0].marker.color, text: d.data[0].text, hover: d.data[0].customdata,
                    shapes: (d.layout.shapes || []).map(s => s.x0),
                    drawn: [...d.querySelectorAll('.bartext')].map(t => t.textContent)}; }""")
        assert mfu["colors"] == [ABOVE_PEAK_COLOR] and mfu["text"] == ["⚠ above peak"]
        assert mfu["hover"][0].startswith("⚠ above peak: MFU ") and "that probe ran slower" in mfu["hover"][0]
        assert mfu["shapes"] == [100] and mfu["drawn"] == ["⚠ above peak"]  # the label is on the page
        notes = page.locator("p.meta").all_inner_texts()
        assert any(n.startswith("note: MFU above 100% (") and "full `accelkit hw probe`" in n for n in notes), notes
        names = page.evaluate("document.getElementById('plot-roofline').data.map(t => t.name)")
        assert names == [f"{hardware} fp32 (measured, #{quick}, quick)", f"{hardware} bf16 (measured, #{full})"]

    assert rendered(out, check) == []
