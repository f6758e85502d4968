"""The quick start a newcomer copies: where `accelkit` lives after `make demo`, and which torch gets pulled."""

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _dry_run(*args: str) -> str:
    if shutil.which("make") is None:
        pytest.fail("make is not installed; the README's two commands need it")
    proc = subprocess.run(["make", "-n", "-B", ".venv/.base", *args], cwd=REPO, capture_output=True, text=True, check=True)
    return proc.stdout


def test_torch_index_selects_where_torch_comes_from():
    line = next(ln for ln in _dry_run("TORCH_INDEX=https://download.pytorch.org/whl/cpu").splitlines() if '"torch==' in ln)
    assert "--index-url https://download.pytorch.org/whl/cpu" in line
    plain = next(ln for ln in _dry_run().splitlines() if '"torch==' in ln)
    assert "--index-url" not in plain


def test_quick_start_says_how_to_reach_the_command():
    readme = (REPO / "README.md").read_text()
    quick = readme[readme.index("## Quick start"):readme.index("## A short tour")]
    assert ". .venv/bin/activate" in quick and ".venv/bin/accelkit" in quick
    assert "TORCH_INDEX=" in quick
