import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own results store."""
    home = tmp_path / "accelkit-home"
    monkeypatch.setenv("ACCELKIT_HOME", str(home))
    return home


def run_cli(*args: str, check: bool = False, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real `accelkit` entry point in a subprocess (as a user would)."""
    proc = subprocess.run(
        [sys.executable, "-m", "accelkit", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"accelkit {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


@pytest.fixture
def cli():
    return run_cli
