"""`report --out` and `results export --out` through a symlink (a published page: report.html → www/report.html)
and to a long file name: the file the link points at gets the new text and the link stays a link (the rename
replaced the link with a regular file and left the target stale), and a 245-character name is written (the
temporary name, made from the target's, passed the 255-byte limit)."""

from __future__ import annotations

import json
import os

import pytest

from accelkit.core import Measurement
from accelkit.results import ResultStore
from accelkit.results.out_file import write_whole


@pytest.mark.parametrize("command", [("report",), ("results", "export")])
def test_out_through_a_symlink_writes_its_target_and_keeps_the_link(cli, tmp_path, command):
    with ResultStore() as store:
        store.add(Measurement(kind="probe", name="probe"))
    www = tmp_path / "www"
    www.mkdir()
    target = www / "page"
    target.write_text("old")
    target.chmod(0o644)
    link = tmp_path / "page"
    link.symlink_to(target)
    proc = cli(*command, "--out", str(link))
    assert proc.returncode == 0, proc.stderr
    assert link.is_symlink() and os.readlink(link) == str(target)
    text = target.read_text()
    assert text != "old" and (text.startswith("<!doctype html>") or json.loads(text)[0]["name"] == "probe")
    assert target.stat().st_mode & 0o777 == 0o644  # the published file's mode is kept
    assert sorted(p.name for p in www.iterdir()) == ["page"]  # no temporary file left beside it


def test_out_takes_a_long_valid_file_name(cli, tmp_path):
    """(`report --out` writes through the same ``write_whole``: the symlink test above runs it.)"""
    path = tmp_path / ("r" * 240 + ".json")
    proc = cli("results", "export", "--out", str(path))
    assert proc.returncode == 0, proc.stderr
    assert path.read_text() == "[]" and [p.name for p in tmp_path.iterdir()] == [path.name]


def test_write_whole_gives_a_new_file_the_umask_mode_and_leaves_nothing_on_failure(tmp_path):
    old = os.umask(0o027)
    try:
        write_whole(tmp_path / "new.json", "[]")
    finally:
        os.umask(old)
    assert (tmp_path / "new.json").stat().st_mode & 0o777 == 0o640 and (tmp_path / "new.json").read_text() == "[]"
    with pytest.raises(OSError):  # a dangling link into a folder that does not exist: nothing is made anywhere
        (tmp_path / "dangling").symlink_to(tmp_path / "missing" / "x")
        write_whole(tmp_path / "dangling", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["dangling", "new.json"]
