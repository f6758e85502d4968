"""`accelkit results` as a user meets it (issue #18 item 7, #15 CLI items): --hardware takes the names every
other command takes, --kind is checked, the default limit is said out loud, and bad ids or --out paths get one
line instead of a traceback."""

import json

import pytest

from accelkit.core import Estimate, Measurement
from accelkit.results import ResultStore


@pytest.fixture
def store_34(_isolated_home):
    """34 rows on four kinds of hardware names: catalog names (plan), a driver's name (a GPU bench), a CPU."""
    with ResultStore() as store:
        for i in range(10):
            store.add(Estimate(kind="plan", name=f"plan {i}", hardware="H100-SXM5-80GB"))
        for i in range(8):
            store.add(Measurement(kind="bench", name=f"gpu bench {i}", hardware="NVIDIA H100 80GB HBM3"))
        for i in range(6):
            store.add(Estimate(kind="plan", name=f"mi {i}", hardware="MI300X"))
        for i in range(10):
            store.add(Measurement(kind="probe" if i < 2 else "bench", name=f"cpu {i}", hardware="cpu: AMD EPYC 7763"))
    return _isolated_home


def _ids(cli, *args):
    proc = cli("results", "list", "--json", "--limit", "1000", *args)
    assert proc.returncode == 0, proc.stderr
    return [r["hardware"] for r in json.loads(proc.stdout)]


@pytest.mark.parametrize(("name", "expected"), [
    ("h100", {"H100-SXM5-80GB": 10, "NVIDIA H100 80GB HBM3": 8}),   # an alias: catalog name and driver name
    ("H100-SXM5-80GB", {"H100-SXM5-80GB": 10, "NVIDIA H100 80GB HBM3": 8}),
    ("mi300x", {"MI300X": 6}),
    ("cpu", {"cpu: AMD EPYC 7763": 10}),                              # every CPU, whatever its model
    ("EPYC", {"cpu: AMD EPYC 7763": 10}),                             # a part of a stored name
])
def test_hardware_matches_catalog_names_and_aliases(cli, store_34, name, expected):
    found = _ids(cli, "--hardware", name)
    assert {h: found.count(h) for h in set(found)} == expected


def test_no_match_says_so_and_lists_what_is_there(cli, store_34):
    proc = cli("results", "list", "--hardware", "b200")
    assert proc.returncode == 0
    assert "No result matches --hardware b200" in proc.stdout and "No results yet" not in proc.stdout
    assert "34 results" in proc.stdout and "cpu: AMD EPYC 7763" in proc.stdout
    proc = cli("results", "list", "--hardware", "h300")  # a typo is a usage error with a suggestion
    assert proc.returncode == 2 and "did you mean" in proc.stderr and "H100" in proc.stderr


def test_kind_is_checked_against_the_kinds(cli, store_34):
    proc = cli("results", "list", "--kind", "bogus")
    assert proc.returncode == 2 and proc.stdout == ""
    assert "--kind 'bogus' is not a result kind" in proc.stderr
    for kind in ("bench", "plan", "probe", "loadtest", "tune"):
        assert kind in proc.stderr
    assert len(_ids(cli, "--kind", "probe")) == 2
    proc = cli("results", "export", "--kind", "benhc")
    assert proc.returncode == 2 and "did you mean bench" in proc.stderr


def test_the_default_limit_is_said(cli, store_34):
    proc = cli("results", "list")
    assert proc.returncode == 0
    assert "20 of 34" in proc.stdout and "--limit 34" in proc.stdout
    proc = cli("results", "list", "--json")
    assert len(json.loads(proc.stdout)) == 20 and "20 of 34 shown" in proc.stderr  # stdout stays one document
    proc = cli("results", "list", "--kind", "bench", "--hardware", "cpu")
    assert "8 of 8" in proc.stdout and "(34 in all)" in proc.stdout


def test_an_empty_store_says_how_to_make_a_result(cli, _isolated_home):
    proc = cli("results", "list")
    assert proc.returncode == 0 and "No results yet" in proc.stdout
    assert not (_isolated_home / "results.db").exists()  # listing creates nothing


@pytest.mark.parametrize(("args", "code", "needle"), [
    (("results", "show", "99999999999999999999999"), 2, "no result with id 99999999999999999999999"),
    (("results", "show", "0"), 2, "no result with id 0"),
    (("results", "export", "--out", "/tmp"), 2, "--out /tmp is a directory"),
    (("results", "export", "--out", "/nonexistent-dir/r.json"), 2, "the folder /nonexistent-dir does not exist"),
    (("results", "export", "--out", "/dev/full"), 1, "cannot write --out /dev/full (No space left on device)"),
])
def test_bad_ids_and_paths_get_one_line(cli, store_34, args, code, needle):
    proc = cli(*args)
    assert proc.returncode == code, proc.stderr
    assert proc.stderr.count("\n") == 1 and needle in proc.stderr and "Traceback" not in proc.stderr
    assert not __import__("os").path.exists("/nonexistent-dir")


def test_export_out_writes_the_file_whole(cli, store_34, tmp_path):
    folder = tmp_path / "out"
    folder.mkdir()
    out = folder / "all.json"
    proc = cli("results", "export", "--out", str(out))
    assert proc.returncode == 0 and len(json.loads(out.read_text())) == 34
    assert proc.stderr.splitlines() == [f"wrote 34 results to {out}"] and proc.stdout == ""  # #29 item 12
    assert out.stat().st_mode & 0o777 != 0o600  # a normal file, not the temporary file's private mode
    assert [p.name for p in folder.iterdir()] == ["all.json"]
