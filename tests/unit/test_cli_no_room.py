"""A command whose output finds no room (a full disk, standard output sent to /dev/full) says so in one line and
exits 1; it was called "internal error … a bug in accelkit"."""

from __future__ import annotations

import os

import pytest

from accelkit.cli.app import main


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux), where every write fails ENOSPC")
def test_output_to_a_full_device_is_one_line_not_a_bug(monkeypatch, capsys):
    with open("/dev/full", "w") as full:
        monkeypatch.setattr("sys.stdout", full)
        with pytest.raises(SystemExit) as exc:
            main(["hw", "list", "--json"])
        monkeypatch.undo()
    assert exc.value.code == 1
    (line,) = capsys.readouterr().err.strip().splitlines()
    assert "failed: No space left on device; free some space or write elsewhere" in line
    assert "internal error" not in line
