"""No package directory is invisible to the linters (ruff's default excludes once hid accelkit/dist)."""

import subprocess
import sys
import tomllib
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_ruff_sees_every_python_file():
    ruff = Path(sys.executable).with_name("ruff")
    proc = subprocess.run([str(ruff), "check", "--show-files", "."], cwd=REPO, capture_output=True, text=True, check=True)
    seen = {Path(line).resolve() for line in proc.stdout.splitlines() if line.endswith(".py")}
    tracked = subprocess.run(["git", "ls-files", "*.py"], cwd=REPO, capture_output=True, text=True, check=True)
    expected = {(REPO / p).resolve() for p in tracked.stdout.split()}
    assert expected, "git ls-files found no Python files"
    missing = sorted(str(p.relative_to(REPO)) for p in expected - seen)
    assert not missing, f"ruff skips {len(missing)} files, e.g. {missing[:5]}"


def test_mypy_checks_the_whole_package():
    config = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["mypy"]
    assert config["files"] == ["accelkit"]
    assert "exclude" not in config
