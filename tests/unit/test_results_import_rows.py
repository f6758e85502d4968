"""Loadtest and probe records are checked on import as bench records are: the figures the report reads (a loadtest's
curve, a probe's datasheet figures) must be what accelkit writes. One imported curve point without its
request_throughput (or a rate of 'fast', a curve of "abc", a catalog peak of "x") was stored, and every `accelkit
report` of the store was then an internal error, with no command to remove the row. Now the import refuses it
naming the field (exit 2); a store that already holds one skips it by name and reports the rest; and `results
delete ID --yes` removes it. Real rows — a real load test over HTTP, a real `hw probe` — still pass."""

from __future__ import annotations

import copy
import json
import math
import shutil

import pytest

from accelkit.core import Measurement
from accelkit.loadtest import LoadTestConfig, run_loadtest
from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from accelkit.results import ResultStore, export
from tests.conftest import main_in_process


@pytest.fixture(scope="module")
def loadtest_record(tmp_path_factory) -> dict:
    """A real load test (two rates, one of them inf) against a fake server on 127.0.0.1, as `results export` writes
    it."""
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.005, itl_s=0.001)) as server:
        result = run_loadtest(LoadTestConfig(base_url=server.base_url, model="fake-model", num_prompts=2, warmup=0,
                                             random_input_len=4, random_output_len=3, sweep_rates=(50.0, math.inf)))
    with ResultStore(tmp_path_factory.mktemp("loadtest") / "results.db") as store:
        store.add(result)
        (record,) = json.loads(export(store.query(), "json"))
    return record


@pytest.fixture
def probe_record(probe_db) -> dict:
    """The shared real `hw probe` row, exported."""
    with ResultStore(probe_db, readonly=True) as store:
        (stored,) = store.query(kind="probe")
    return json.loads(json.dumps(stored.to_dict()))


def _import(capsys, tmp_path, record: dict) -> tuple[int, str]:
    path = tmp_path / "export.json"
    path.write_text(json.dumps([record]))
    code, _, err = main_in_process(capsys, "results", "import", str(path))
    return code, err


def test_real_rows_import_and_report(capsys, tmp_path, loadtest_record, probe_record):
    gpu_probe = copy.deepcopy(probe_record)  # as a probe of a catalog GPU writes its datasheet figures
    gpu_probe["details"]["bandwidth"]["catalog_gbps"] = 3350.0
    for row in gpu_probe["details"]["matmul"].values():
        row["catalog_peak_tflops"] = 989.4
    assert [p["rate"] for p in loadtest_record["details"]["curve"]] == [50.0, "inf"]
    for record in (loadtest_record, probe_record, gpu_probe):
        code, err = _import(capsys, tmp_path, record)
        assert code == 0, err
    code, _, err = main_in_process(capsys, "report", "--out", str(tmp_path / "r.html"))
    assert code == 0 and "warning" not in err, err
    html = (tmp_path / "r.html").read_text()
    assert '"name": "#1 TTFT p50"' in html and "(catalog)" in html


BAD_CURVES = [
    ([{"rate": 1.0}], "details.curve[0] has no request_throughput (a number)"),
    ([{"rate": "fast", "request_throughput": 1.0}], "details.curve[0].rate='fast' is not a number or 'inf'"),
    ("abc", "details.curve='abc' is not a list of points"),
    ([{"rate": 1.0, "request_throughput": True}], "details.curve[0].request_throughput=True is not a number"),
    ([{"rate": 1.0, "request_throughput": 1.0, "ttft_ms": {"p50": "3 ms"}}],
     "details.curve[0].ttft_ms.p50='3 ms' is not a number (ms) or null"),
    ([{"rate": 1.0, "request_throughput": 1.0, "tpot_ms": [1.0]}], "details.curve[0].tpot_ms=[1.0] is not an object"),
    ([7], "details.curve[0]=7 is not an object"),
    ([{"rate": 10**400, "request_throughput": 1.0}], "details.curve[0].rate=1000"),  # float() overflows
]


@pytest.mark.parametrize(("curve", "says"), BAD_CURVES, ids=["no-throughput", "rate-text", "curve-text",
                                                              "throughput-bool", "percentile-text", "metric-list",
                                                              "point-number", "rate-overflows"])
def test_import_refuses_a_loadtest_curve_the_report_cannot_read(capsys, tmp_path, loadtest_record, curve, says,
                                                                 _isolated_home):
    record = copy.deepcopy(loadtest_record)
    record["details"]["curve"] = curve
    code, err = _import(capsys, tmp_path, record)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and f"record 0 (loadtest '{record['name']}'): {says}" in lines[0], err
    assert not (_isolated_home / "results.db").exists() or ResultStore(readonly=True).count() == 0


@pytest.mark.parametrize(("where", "value"), [("bandwidth", "x"), ("matmul", "x"), ("matmul", [1.0]),
                                              ("matmul", 10**400)])
def test_import_refuses_a_probe_catalog_figure_that_is_no_number(capsys, tmp_path, probe_record, where, value):
    record = copy.deepcopy(probe_record)
    if where == "bandwidth":
        record["details"]["bandwidth"]["catalog_gbps"] = value
        field = "details.bandwidth.catalog_gbps"
    else:
        record["details"]["matmul"]["fp32"]["catalog_peak_tflops"] = value
        field = "details.matmul.fp32.catalog_peak_tflops"
    code, err = _import(capsys, tmp_path, record)
    assert code == 2 and f"{field}={value!r:.40} is not a number or null" in err, err


def test_a_stored_bad_row_is_skipped_by_the_report_and_deleted(capsys, tmp_path, probe_db, _isolated_home):
    """Rows stored before the check (or by another version): the report skips each by name and draws the rest;
    `results delete` needs --yes, then removes the row (unreadable as it is) and the warning goes."""
    _isolated_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(probe_db, _isolated_home / "results.db")
    with ResultStore() as store:
        (probe,) = store.query(kind="probe")
        details = copy.deepcopy(probe.result.details)
        details["matmul"]["fp32"]["catalog_peak_tflops"] = "x"
        bad_probe = store.add(Measurement(kind="probe", name="bad probe", hardware=probe.result.hardware,
                                          details=details))
        bad_loadtest = store.add(Measurement(kind="loadtest", name="lt", details={"curve": [{"rate": 1.0}]}))
    code, _, err = main_in_process(capsys, "report", "--out", str(tmp_path / "r.html"))
    assert code == 0, err
    assert f"warning: skipped result {bad_probe}: details.matmul.fp32.catalog_peak_tflops='x'" in err
    assert f"warning: skipped result {bad_loadtest}: details.curve[0] has no request_throughput" in err
    assert f"measured, #{probe.id}" in (tmp_path / "r.html").read_text()  # the good probe's roofline is drawn

    code, _, err = main_in_process(capsys, "results", "delete", str(bad_loadtest))
    assert code == 2 and "add --yes to delete it" in err and ResultStore(readonly=True).count() == 3
    for rid in (bad_loadtest, bad_probe):
        code, out, err = main_in_process(capsys, "results", "delete", str(rid), "--yes", "--json")
        assert code == 0 and json.loads(out)["deleted"] == rid, err
    code, _, err = main_in_process(capsys, "results", "delete", str(bad_loadtest), "--yes")
    assert code == 2 and f"no result with id {bad_loadtest}" in err
    code, _, err = main_in_process(capsys, "results", "list")
    assert code == 0 and "warning" not in err, err
    assert [s.id for s in ResultStore(readonly=True).query()] == [probe.id]
