"""A bench row whose details cannot be read as a bench result (another version's, a hand edit: ``mfu.value`` =
"41%"): import refuses it in one line, and a store that holds one still lists, exports and reports every other row,
naming the one it skipped — it made `results list`, `export --format csv` and `report` an internal error for the
whole store."""

from __future__ import annotations

import csv
import io
import json

from accelkit.core import Measurement
from accelkit.core.bench_result import BenchResult, Throughput
from accelkit.results import ResultStore

BAD_DETAILS = {"mfu": {"value": "41%"}}


def _good_bench() -> Measurement:
    bench = BenchResult(name="fp32", step="forward", throughput=Throughput(value=10.0, unit="samples/s"))
    return bench.to_measurement(label="bert tiny", workload="bert", config={}, device="cpu", hardware="cpu: x",
                                environment={}, spec=None, samples={})


def test_import_refuses_a_bench_record_its_readers_could_not_read(cli, tmp_path, _isolated_home):
    record = {"type": "measurement", "kind": "bench", "name": "old row", "hardware": "cpu: x",
              "created_at": "2026-01-01T00:00:00Z", "samples": {}, "details": BAD_DETAILS}
    path = tmp_path / "bad.json"
    path.write_text(json.dumps([record]))
    proc = cli("results", "import", str(path))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert "record 0 (bench 'old row'): details do not read as a bench result" in lines[0] and "'41%'" in lines[0]
    assert not (_isolated_home / "results.db").exists() or ResultStore(readonly=True).count() == 0


def test_one_unreadable_bench_row_is_skipped_by_name_and_hides_nothing_else(cli, tmp_path, _isolated_home):
    with ResultStore() as store:
        good = store.add(_good_bench())
        bad = store.add(Measurement(kind="bench", name="old row", details=BAD_DETAILS))  # as another version wrote it
        probe = store.add(Measurement(kind="probe", name="probe"))
    warning = f"warning: skipped result {bad}: details do not read as a bench result"
    listed = cli("results", "list", "--json")
    assert listed.returncode == 0 and warning in listed.stderr, listed.stderr
    assert [r["id"] for r in json.loads(listed.stdout)] == [probe, good]
    exported = cli("results", "export", "--format", "csv")
    assert exported.returncode == 0 and warning in exported.stderr, exported.stderr
    assert [r["id"] for r in csv.DictReader(io.StringIO(exported.stdout))] == [str(good), str(probe)]
    report = cli("report", "--out", str(tmp_path / "r.html"))
    assert report.returncode == 0 and warning in report.stderr, report.stderr
    assert "fp32" in (tmp_path / "r.html").read_text()
    shown = cli("results", "show", str(bad))
    assert shown.returncode == 1 and f"result {bad}" in shown.stderr and "internal error" not in shown.stderr
