"""`benchmarks/plan_search.py --help` ran the benchmark and rewrote the committed plan_search.json, and
`benchmarks/grad_compression.py --help` launched the torchrun runs: both take --help and --out (default: the
committed result file), as the other benchmarks/*.py do."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

RESULTS = REPO / "benchmarks" / "results"


def _script(name: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO / "benchmarks" / name), *args], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)})


def _digest(path):
    return hashlib.sha256(path.read_bytes()).hexdigest() if path.exists() else None


@pytest.mark.parametrize(("script", "committed"), [("plan_search.py", "plan_search.json"),
                                                   ("grad_compression.py", "grad_compression_cpu.json"),
                                                   ("serve_request_path.py", "serve_request_path.json"),
                                                   ("structured_hostile.py", "structured_hostile.json")])
def test_help_runs_nothing(script, committed):
    before = _digest(RESULTS / committed)
    proc = _script(script, "--help")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("usage:") and "--out" in proc.stdout and committed in proc.stdout
    assert proc.stderr == ""  # grad_compression names each run on stderr as it starts one
    assert _digest(RESULTS / committed) == before


def test_plan_search_writes_out(tmp_path):
    before = _digest(RESULTS / "plan_search.json")
    out = tmp_path / "sub" / "plan_search.json"
    proc = _script("plan_search.py", "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert json.loads(out.read_text())["candidates"] >= 1000
    assert _digest(RESULTS / "plan_search.json") == before
