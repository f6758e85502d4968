"""`results list`, `results export`, `results import` and `accelkit report` on real stores: small figures listed as
what they are (not '0.000'), a CSV piped out keeping a stored name's every character, a `results list --json` file
given to import named as such, and a report that does not send the user to a --limit for rows it could not read."""

from __future__ import annotations

import csv
import io
import sqlite3

from accelkit.core import Measurement
from accelkit.core.bench_result import BenchResult, Throughput
from accelkit.results import ResultStore


def _bench(store: ResultStore, name: str) -> int:
    bench = BenchResult(name=name, step="forward", throughput=Throughput(value=10.0, unit="samples/s"))
    return store.add(bench.to_measurement(label="bert tiny", workload="bert", config={}, device="cpu",
                                          hardware="cpu: x", environment={}, spec=None, samples={}), run_id="r1")


def test_list_shows_a_small_mfu_and_throughput_not_as_zero(cli, _isolated_home):
    """A CPU prefill's MFU of 0.00056 was listed as '0.000' (and 0.0004 images/s as '0.000 images/s'): a figure that
    is not zero read as zero."""
    with ResultStore() as store:
        store.add(Measurement(kind="profile", name="slow", throughput=0.0004, throughput_unit="images/s",
                              mfu=0.000556))
    proc = cli("results", "list")
    assert proc.returncode == 0, proc.stderr
    assert "4.00e-04 images/s" in proc.stdout and "5.56e-04" in proc.stdout
    assert "0.000" not in proc.stdout


def test_list_headline_without_a_unit_does_not_say_none(cli, _isolated_home):
    """A result stored without a throughput unit (the Python API's default) was listed as '2.500 None'."""
    with ResultStore() as store:
        store.add(Measurement(kind="profile", name="no-unit", throughput=2.5))
    proc = cli("results", "list")
    assert proc.returncode == 0, proc.stderr
    assert "2.500" in proc.stdout and "None" not in proc.stdout


def test_csv_piped_out_keeps_an_escape_sequence_in_a_name(cli, _isolated_home):
    """`results export --format csv > f.csv` went through click's echo, which strips what looks like an ANSI style
    when stdout is not a terminal: a stored name's '\\x1b[31m' was lost from the CSV (docs: a file or pipe gets the
    text exactly)."""
    name = "run \x1b[31mred\x1b[0m"
    with ResultStore() as store:
        store.add(Measurement(kind="profile", name=name, throughput=1.0))
    proc = cli("results", "export", "--format", "csv")
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in csv.DictReader(io.StringIO(proc.stdout))] == [name]


def test_import_names_a_results_list_json_file(cli, _isolated_home, tmp_path):
    """`results list --json > f.json; results import f.json` said 'does not describe a estimate (Estimate has no
    field accelkit_git, …)': it now says what the file is and what import takes."""
    with ResultStore() as store:
        store.add(Measurement(kind="profile", name="p", throughput=1.0))
    listed = cli("results", "list", "--json")
    path = tmp_path / "listed.json"
    path.write_text(listed.stdout)
    proc = cli("results", "import", str(path))
    assert proc.returncode == 2
    assert "is a row of `accelkit results list --json`" in proc.stderr and "results export --format json" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_report_does_not_offer_a_limit_for_an_unreadable_row(_isolated_home):
    """A bench row that cannot be read (skipped with a warning) made the header say 'the newest 1 of 2 … (`accelkit
    report --limit 2` lists all)', which lists nothing more; `results list` says 'could not be read'."""
    from accelkit.report.html import build_report

    with ResultStore() as store:
        bad = _bench(store, "fp32")
        _bench(store, "bf16")
    with sqlite3.connect(_isolated_home / "results.db") as conn:
        conn.execute("UPDATE results SET payload = '{bad' WHERE id = ?", (bad,))
    with ResultStore(readonly=True) as store:
        html = build_report(store)
    assert "--limit 2</code> lists all" not in html
    assert "1 of\n2 benchmark results (1 could not be read" in html


def test_an_empty_export_to_stdout_says_why_on_stderr(cli, _isolated_home):
    """`results export --hardware h100` with no H100 row printed `[]` and nothing else (`results list` says why)."""
    with ResultStore() as store:
        _bench(store, "bert")
    proc = cli("results", "export", "--kind", "loadtest")
    assert proc.returncode == 0 and proc.stdout.strip() == "[]"
    assert "no result matches --kind loadtest; 1 results in" in proc.stderr
