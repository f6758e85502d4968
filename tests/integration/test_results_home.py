"""Where the results store is: ACCELKIT_HOME as users set it (quoted with a ~, or by mistake a file)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from accelkit.core import Estimate
from accelkit.results import ResultStore
from tests.conftest import run_cli


def _accelkit(cwd, env, *args):
    return subprocess.run([sys.executable, "-m", "accelkit", *args], capture_output=True, text=True, timeout=120,
                          cwd=cwd, env={**os.environ, **env})


def test_a_quoted_tilde_in_accelkit_home_is_the_home_folder(tmp_path):
    """ACCELKIT_HOME='~/acc' (quoted: the shell leaves the ~) made a folder named '~' in the working directory."""
    home, work = tmp_path / "home", tmp_path / "work"
    work.mkdir()
    with ResultStore(home / "acc" / "results.db") as store:
        store.add(Estimate(kind="plan", name="mine"))
    env = {"HOME": str(home), "ACCELKIT_HOME": "~/acc"}
    proc = _accelkit(work, env, "results", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["name"] for r in json.loads(proc.stdout)] == ["mine"]
    code = ("from accelkit.core import Estimate; from accelkit.results import ResultStore; "
            "ResultStore().add(Estimate(kind='plan', name='x'))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=work,
                          env={**os.environ, **env})
    assert proc.returncode == 0, proc.stderr
    assert list(work.iterdir()) == []  # no '~' folder here
    with ResultStore(home / "acc" / "results.db", readonly=True) as store:
        assert store.count() == 2


def test_accelkit_home_that_is_a_file_is_one_line(tmp_path):
    """Reading said 'No results yet in …/afile/results.db'; writing '(File exists)'."""
    afile = tmp_path / "afile"
    afile.write_text("hi\n")
    for args in (("results", "list"), ("results", "export")):  # (in-process: run_cli, with the variable set)
        proc = run_cli(*args, env={"ACCELKIT_HOME": str(afile)})
        assert proc.returncode == 2 and proc.stdout == "", proc.stdout  # (the user's setting: exit 2)
        assert proc.stderr == (f"error: {afile} is a file, not a folder, so the results store {afile}/results.db "
                               "cannot be there; set ACCELKIT_HOME to a folder\n"), proc.stderr
    proc = run_cli("hw", "probe", "--quick", "--device", "cpu", "--size", "64", "--copy-size", "1MiB",
                   env={"ACCELKIT_HOME": str(afile / "sub")})
    assert proc.returncode == 2 and f"{afile} is a file, not a folder" in proc.stderr and "--no-save" in proc.stderr
    assert afile.read_text() == "hi\n"
