"""`accelkit results import`: another store's export (a GPU machine's) merged into this one — every figure back as
it was (an inf sample too), each result once however often the file is imported, and a bad file refused
whole in one line."""

from __future__ import annotations

import json
import math
import subprocess
import sys

import pytest

from accelkit.core import Estimate, Measurement
from accelkit.results import ResultStore


def _export(cli, path):
    proc = cli("results", "export", "--out", str(path))
    assert proc.returncode == 0, proc.stderr
    return json.loads(path.read_text())


def _seed_store():
    with ResultStore() as store:
        store.add(Estimate(kind="plan", name="llama on h200", hardware="H200", throughput=12.5, mfu=0.41,
                           details={"ratio": math.inf}))
        store.add_many([Measurement(kind="bench", name="fp32", hardware="NVIDIA H200", throughput=3.0,
                                    samples={"latency_s": [0.1, math.inf, 0.2]}, environment={"hostname": "gpu-1"}),
                        Measurement(kind="bench", name="bf16", hardware="NVIDIA H200", throughput=5.0)], run_id="run-7")


def test_an_export_imports_into_another_store_exactly_and_once(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "gpu-box"))
    _seed_store()
    exported = _export(cli, tmp_path / "gpu.json")
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "laptop"))
    with ResultStore() as store:  # the laptop holds a result of its own: ids go on from it
        store.add(Measurement(kind="probe", name="local"))
    proc = cli("results", "import", str(tmp_path / "gpu.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["imported"] == 3 and json.loads(proc.stdout)["ids"] == [2, 3, 4]
    again = cli("results", "import", str(tmp_path / "gpu.json"))
    assert again.returncode == 0, again.stderr
    assert "imported 0 of 3" in again.stdout and "3 already stored, skipped" in again.stdout
    with ResultStore(readonly=True) as store:
        assert store.count() == 4
        bench = store.query(kind="bench", run_id="run-7", newest_first=False)
        assert [b.result.name for b in bench] == ["fp32", "bf16"]
        latency = bench[0].result.samples["latency_s"]
        assert latency == [0.1, math.inf, 0.2]  # put back, not left as null
        assert store.query(kind="plan")[0].result.details["ratio"] == math.inf
    # what the laptop exports of them is what the GPU box exported, but for the ids
    mine = [r for r in _export(cli, tmp_path / "laptop.json") if r["kind"] != "probe"]
    assert [{**r, "id": None} for r in mine] == [{**r, "id": None} for r in exported]


def test_one_record_from_results_show_and_standard_input(cli, tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "a"))
    _seed_store()
    shown = cli("results", "show", "1", "--json").stdout
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "b"))
    proc = subprocess.run([sys.executable, "-m", "accelkit", "results", "import", "-"], input=shown, text=True,
                          capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "imported 1 of 1 results from standard input" in proc.stdout
    with ResultStore(readonly=True) as store:
        assert store.get(1).result.name == "llama on h200"


@pytest.mark.parametrize(("content", "needle"), [
    ("id,run_id,type\n1,,measurement\n", "looks like CSV"),
    ("{not json", "is not JSON"),
    ('"a string"', "holds a JSON str, not a list of results"),
    ('[{"type": "measurement", "kind": "bench", "name": "ok", "samples": {}}, 5]', "record 1 is a JSON int"),
    ('[{"type": "guess", "kind": "bench", "name": "x"}]', "record 0 has type='guess'"),
    ('[{"type": "measurement", "kind": "bench", "name": "x", "samples": {}, "throughput": "fast"}]',
     "record 0 does not describe"),
    ('[{"type": "measurement", "kind": "bench", "name": "x", "run_id": 7}]', "run_id=7"),
])
def test_a_bad_file_is_one_line_and_stores_nothing(cli, tmp_path, content, needle):
    path = tmp_path / "in.json"
    path.write_text(content)
    proc = cli("results", "import", str(path))
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr
    assert not (tmp_path / "accelkit-home" / "results.db").exists() or ResultStore(readonly=True).count() == 0


@pytest.mark.parametrize("which", ["missing", "directory", "binary"])
def test_a_path_that_is_not_an_export_is_named(cli, tmp_path, which):
    path = tmp_path / "x.json"
    if which == "directory":
        path.mkdir()
    elif which == "binary":
        path.write_bytes(b"\xff\xfe\x00bad")
    proc = cli("results", "import", str(path))
    assert proc.returncode == 2 and str(path) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_references_between_imported_results_follow_their_new_ids(cli, tmp_path, monkeypatch):
    """A bench row cites its prediction's id (details.predicted.estimate_id) and a tune summary its trials'
    (result_ids): in a store that numbers them differently they must name the imported rows, not whatever holds the
    old ids there."""
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "gpu-box"))
    with ResultStore() as store:
        estimate = store.add(Estimate(kind="plan", name="prediction"))
        bench = store.add(Measurement(kind="bench", name="fp32", details={"predicted": {"estimate_id": estimate}}))
        store.add(Measurement(kind="tune", name="summary", details={"trials": [{"result_ids": [estimate, bench]}]}))
    _export(cli, tmp_path / "gpu.json")
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "laptop"))
    with ResultStore() as store:
        store.add_many([Measurement(kind="probe", name=f"local {i}") for i in range(5)])
    proc = cli("results", "import", str(tmp_path / "gpu.json"), "--json")
    assert proc.returncode == 0, proc.stderr
    new_estimate, new_bench, new_tune = json.loads(proc.stdout)["ids"]
    with ResultStore(readonly=True) as store:
        assert store.get(new_bench).result.details["predicted"]["estimate_id"] == new_estimate
        assert store.get(new_tune).result.details["trials"][0]["result_ids"] == [new_estimate, new_bench]


def import_in_process(path, capsys) -> tuple[int, str, str]:
    """`accelkit results import PATH` through the CLI's own entry point, in this process: (exit code, stdout, stderr)."""
    from accelkit.cli.app import main

    try:
        main(["results", "import", str(path)])
        code = 0
    except SystemExit as exc:
        code = 0 if exc.code is None else int(exc.code)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


GOOD = {"id": 1, "run_id": None, "type": "measurement", "kind": "bench", "name": "x", "samples": {},
        "created_at": "2026-11-29T15:04:05Z"}
HUGE = "9" * 5000


@pytest.mark.parametrize(("content", "needle"), [
    (json.dumps([{**GOOD, "type": "measurement", "kind": "plan", "details": {"assumptions": []}}]),
     "record 0 is a plan but has type='measurement'"),
    (json.dumps([{k: v for k, v in GOOD.items() if k != "samples"}]), "type='measurement' but no samples"),
    (json.dumps([{**GOOD, "created_at": "not a date"}]), "created_at='not a date', which is not an ISO-8601 time"),
    (json.dumps([{**GOOD, "created_at": "99999-01-01T00:00:00Z"}]), "created_at='99999-01-01T00:00:00Z'"),
    (json.dumps([{**GOOD, "created_at": "1900-01-01T00:00:00Z"}]), "outside 2000-01-01 to now"),
    (json.dumps([{**GOOD, "num_devices": 2**80}]), f"num_devices={2**80}; at most"),
    (json.dumps([{**GOOD, "memory_bytes": {"peak": -5}}]), "memory_bytes.peak=-5"),
    (json.dumps([{**GOOD, "non_finite": "x"}]), "non_finite='x'; expected an object"),
    (json.dumps([{**GOOD, "non_finite": {"/throughput": "big"}}]), "non_finite entry '/throughput'"),
    (json.dumps([{**GOOD, "non_finite": {"/name": "inf"}}]), "names no null"),
    (f'[{{"id": {HUGE}, "type": "measurement", "kind": "bench", "name": "x", "samples": {{}}}}]',
     "record 0 has id of 5000 digits"),
    (json.dumps([{**GOOD, "id": 2**70}]), f"id={2**70}; a result id is between 1 and"),
    ("[" * 100_000 + "]" * 100_000, "nests JSON arrays or objects too deeply"),
    (json.dumps([{**GOOD, "details": {"a": []}}]).replace("[]", "[" * 900 + "]" * 900), "more than 64 deep"),
    (json.dumps([GOOD]).replace('"x"', '"x\\ud800"'), "not valid Unicode (a lone surrogate) at name"),
    (json.dumps([{**GOOD, "details": {"k": 1}}]).replace('"k"', '"\\udfff"'), "key that is not valid Unicode"),
    # an integer literal no float holds (1 and 400 zeros) was an OverflowError: an internal error, exit 1
    (json.dumps([{**GOOD, "throughput": 0}]).replace(": 0", ": 1" + "0" * 400),
     "throughput is an integer beyond ±1.8e308: out of range; expected a finite number"),
    (json.dumps([{**GOOD, "samples": {"latency_s": [1.0, 0]}}]).replace(" 0]", " 1" + "0" * 400 + "]"),
     "samples['latency_s'][1] is an integer beyond ±1.8e308: out of range"),
])
def test_wrong_data_is_refused_in_one_line_and_nothing_is_stored(tmp_path, capsys, content, needle):
    """#30 item 4: each of these was stored and listed (or was an "internal error")."""
    path = tmp_path / "in.json"
    path.write_text(content)
    code, _, err = import_in_process(path, capsys)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and needle in lines[0] and "internal error" not in err, err
    assert not (tmp_path / "accelkit-home" / "results.db").exists() or ResultStore(readonly=True).count() == 0


def test_the_checks_take_what_export_writes(tmp_path, capsys, monkeypatch):
    """The checks refuse nothing export writes: a plan at the largest device count, an inf sample, a time with an
    offset."""
    from accelkit.results import export

    with ResultStore() as store:
        store.add(Estimate(kind="plan", name="p", details={"ratio": math.inf}, num_devices=1 << 20))
        store.add(Measurement(kind="bench", name="m", samples={"s": [-math.inf, 1.0]},
                              created_at="2026-01-02T03:04:05+02:00"))
        exported = [r.to_dict() for r in store.query(newest_first=False)]
        text = export(store.query(newest_first=False), "json")
    path = tmp_path / "export.json"
    path.write_text(text)
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path / "laptop"))
    code, out, err = import_in_process(path, capsys)
    assert code == 0 and "imported 2 of 2" in out, err
    with ResultStore(readonly=True) as store:
        assert [r.to_dict() for r in store.query(newest_first=False)] == exported
