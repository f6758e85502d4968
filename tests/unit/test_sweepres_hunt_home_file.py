"""An ACCELKIT_HOME that is a regular file is the user's setting to fix: one line naming it, exit 2 (was 1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli


@pytest.mark.parametrize("args", [["results", "list"], ["results", "show", "1"], ["results", "export"]])
def test_a_home_that_is_a_file_is_exit_2(tmp_path: Path, args: list[str]):
    home = tmp_path / "home"
    home.write_text("")
    r = run_cli(*args, env={"ACCELKIT_HOME": str(home)})
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line == (f"error: {home} is a file, not a folder, so the results store {home / 'results.db'} cannot be "
                    "there; set ACCELKIT_HOME to a folder")
