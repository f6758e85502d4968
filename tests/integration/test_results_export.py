"""`results list` and `results export` on real stores: what the CSV's cells mean (memory, where and by what it was
measured), cells a spreadsheet would run as formulas, --run, and what the list says when rows cannot be read."""

from __future__ import annotations

import csv
import io
import json
import sqlite3

from accelkit.core import Estimate, Measurement
from accelkit.core.bench_result import BenchResult, MemoryUse, Throughput
from accelkit.results import ResultStore

ENV = {"hostname": "node-7", "accelkit": "0.1.0", "accelkit_git": "b47538cc73d2"}


def _csv(cli, *args: str) -> list[dict[str, str]]:
    proc = cli("results", "export", "--format", "csv", *args)
    assert proc.returncode == 0, proc.stderr
    return list(csv.DictReader(io.StringIO(proc.stdout)))


def test_memory_total_is_the_total_or_the_peak_never_a_sum(cli, _isolated_home):
    """A bench row's memory is {peak, load, step_peak_increase} with peak = load + the step's increase: the CSV summed
    all three (the load counted twice, 1.6× the peak here)."""
    bench = BenchResult(name="fp32", step="forward", throughput=Throughput(value=10.0, unit="samples/s"),
                        memory_bytes=MemoryUse(peak=100 * 2**20, load=40 * 2**20, step_peak_increase=60 * 2**20))
    with ResultStore() as store:
        store.add(bench.to_measurement(label="bert tiny", workload="bert", config={}, device="cpu", hardware="cpu: x",
                                       environment=ENV, spec=None, samples={}))
        store.add(Estimate(kind="plan", name="plan", memory_bytes={"weights": 10, "activations": 5, "total": 15,
                                                                   "capacity": 80}))
        store.add(Measurement(kind="probe", name="probe"))
    bench_row, plan_row, probe_row = _csv(cli)
    assert bench_row["memory_total_bytes"] == str(100 * 2**20)
    assert plan_row["memory_total_bytes"] == "15" and probe_row["memory_total_bytes"] == ""


def test_csv_names_the_host_and_version_and_defuses_formulas(cli, _isolated_home):
    """A name or hardware string starting with = + - @ is run as a formula by a spreadsheet that opens the CSV
    ('=HYPERLINK(…)'): such text cells get a leading ' (OWASP's rule); JSON keeps the text as it is."""
    with ResultStore() as store:
        store.add(Measurement(kind="bench", name='=HYPERLINK("http://x","y")', hardware="@cpu", throughput=1.5,
                              environment=ENV))
        store.add(Measurement(kind="bench", name="+1", hardware="-x", throughput=2.0))
    first, second = _csv(cli)
    assert first["name"] == "'=HYPERLINK(\"http://x\",\"y\")" and first["hardware"] == "'@cpu"
    assert first["throughput"] == "1.5"
    assert (second["name"], second["hardware"]) == ("'+1", "'-x")
    assert (first["hostname"], first["accelkit_version"], first["accelkit_git"]) == ("node-7", "0.1.0", "b47538cc73d2")
    assert (second["hostname"], second["accelkit_version"]) == ("", "")  # not recorded: empty, not made up
    proc = cli("results", "export", "--format", "json")  # JSON keeps the text exactly
    assert json.loads(proc.stdout)[0]["name"] == '=HYPERLINK("http://x","y")'


def test_run_filters_list_and_export(cli, _isolated_home):
    """docs/distributed.md sends users to a sweep's run id in `results list` and `results export`, which had no
    --run."""
    with ResultStore() as store:
        store.add_many([Estimate(kind="plan", name="a"), Estimate(kind="plan", name="b")], run_id="sweep1")
        store.add(Estimate(kind="plan", name="c"), run_id="other")
        store.add(Estimate(kind="plan", name="d"))
    proc = cli("results", "list", "--run", "sweep1", "--json")
    assert proc.returncode == 0 and [r["name"] for r in json.loads(proc.stdout)] == ["b", "a"]
    proc = cli("results", "list", "--run", "sweep1")
    assert "matching --run sweep1: 2 of 2 (4 in all)" in proc.stdout and "sweep1" in proc.stdout.split("┃ run")[1]
    assert [r["name"] for r in _csv(cli, "--run", "sweep1")] == ["a", "b"]
    proc = cli("results", "export", "--run", "nope")
    assert proc.returncode == 2 and "--run 'nope': no result" in proc.stderr and proc.stdout == ""
    for command in ("list", "export"):  # '' is no filter to the store: not every result
        proc = cli("results", command, "--run", "")
        assert proc.returncode == 2 and "--run '' names no run" in proc.stderr and proc.stdout == ""


def test_list_says_rows_were_unreadable_instead_of_a_larger_limit(cli, _isolated_home):
    """With 2 corrupt rows of 19, `results list --limit 100` said '17 of 19 shown …; --limit 19 shows all', and
    --limit 19 said the same again."""
    with ResultStore() as store:
        for i in range(19):
            store.add(Estimate(kind="plan", name=f"e{i + 1}"))
    with sqlite3.connect(_isolated_home / "results.db") as conn:
        conn.execute("UPDATE results SET payload = '{' WHERE id IN (4, 9)")
    for limit in ("100", "19"):
        proc = cli("results", "list", "--limit", limit)
        assert proc.returncode == 0, proc.stderr
        text = " ".join(proc.stdout.split())
        assert "17 of 19 shown, newest first; 2 could not be read (see the warnings)" in text, text
        assert "--limit 19 shows all" not in text
    text = " ".join(cli("results", "list", "--limit", "5").stdout.split())  # the limit does leave rows out here
    assert "5 of 19 shown, newest first; --limit 19 shows all" in text and "could not be read" not in text
