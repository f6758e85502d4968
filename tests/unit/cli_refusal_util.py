"""What the tests of the CLI's refusals share: the one error line of a refused command, and refusals run in a fresh
interpreter (for the tests whose claim is that a refusal comes before torch is imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

_SCRIPT = """import contextlib, io, json, sys
from accelkit.cli.app import main
runs = []
for argv in json.loads(sys.argv[1]):
    err, code = io.StringIO(), 0
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code
    runs.append([code, err.getvalue(), "torch" in sys.modules])
"""


def one_error(proc: Any) -> str:
    """The command's one stderr line (exit 2, nothing on stdout): no "starting" or progress line before it."""
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    return line


def refusals_in_a_fresh_interpreter(commands: list[list[str]], home: Path, then: str = "") -> list[list[Any]]:
    """``[exit status, stderr, whether torch was imported by then]`` of each command, run one after another in one
    new interpreter (this one imported torch long ago), with ``home`` as its working directory and store. ``then``:
    more lines of that interpreter's script, after the commands, appending to ``runs`` likewise."""
    proc = subprocess.run([sys.executable, "-c", _SCRIPT + then + "print(json.dumps(runs))\n", json.dumps(commands)],
                          capture_output=True, text=True, timeout=120, cwd=home,
                          env={**os.environ, "ACCELKIT_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs: list[list[Any]] = json.loads(proc.stdout)
    return runs
