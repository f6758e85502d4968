"""`accelkit results export --out` naming the store's own file (``--out ~/.accelkit/results.db``, a link to it, or its
-wal) wrote the export over the store: every later command then said "not an SQLite database". It is refused in one
line before anything is written (exit 2), and the store still reads."""

from __future__ import annotations

import os

import pytest

from accelkit.core import Measurement
from accelkit.results import ResultStore
from tests.conftest import main_in_process


@pytest.mark.parametrize("how", ["same path", "relative", "symlink", "wal"])
def test_export_over_the_store_is_refused_and_the_store_survives(capsys, tmp_path, monkeypatch, _isolated_home, how):
    store = _isolated_home / "results.db"
    with ResultStore(store) as s:
        s.add(Measurement(kind="tune", name="t", hardware="cpu"))
    before = store.read_bytes()
    out = {"same path": str(store), "wal": f"{store}-wal"}.get(how, "results.db")
    if how == "relative":
        monkeypatch.chdir(_isolated_home)
    if how == "symlink":
        monkeypatch.chdir(tmp_path)
        os.symlink(store, tmp_path / "results.db")
    code, stdout, err = main_in_process(capsys, "results", "export", "--out", out)
    assert code == 2 and stdout == ""
    assert err.strip().splitlines() == [
        f"error: --out {out} is the results store's own file {os.path.realpath(out)}; writing the export there would "
        f"destroy the store — pick another path, e.g. --out {store.parent / 'export.json'}"]
    assert store.read_bytes() == before
    with ResultStore(store, readonly=True) as s:
        assert [r.result.name for r in s.query()] == ["t"]


def test_export_beside_the_store_is_written(capsys, _isolated_home):
    with ResultStore(_isolated_home / "results.db") as s:
        s.add(Measurement(kind="tune", name="t", hardware="cpu"))
    code, _, err = main_in_process(capsys, "results", "export", "--out", str(_isolated_home / "export.json"))
    assert code == 0, err
    assert '"name": "t"' in (_isolated_home / "export.json").read_text()


def test_a_report_over_the_store_is_refused_too(capsys, _isolated_home):
    """`accelkit report --out ~/.accelkit/results.db` wrote the HTML over the store (exit 0, the store gone)."""
    store = _isolated_home / "results.db"
    with ResultStore(store) as s:
        s.add(Measurement(kind="tune", name="t", hardware="cpu"))
    before = store.read_bytes()
    code, stdout, err = main_in_process(capsys, "report", "--out", str(store))
    assert code == 2 and stdout == ""
    assert err.strip() == (f"error: --out {store} is the results store's own file {os.path.realpath(store)}; writing "
                           f"the report there would destroy the store — pick another path, e.g. --out "
                           f"{store.parent / 'report.html'}")
    assert store.read_bytes() == before
