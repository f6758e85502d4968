"""benchmarks/structured_vs_vllm.py: vLLM's interpreter runs this file for its half (standard library at the top);
accelkit's half measures guided batches against unguided twins of the same lengths."""

from __future__ import annotations

import ast
import subprocess
import sys

from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "structured_vs_vllm.py"


def test_the_module_level_imports_only_the_standard_library_and_vs_vllm():
    tree = ast.parse(SCRIPT.read_text())
    top = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
    names = {alias.name.split(".")[0] for node in top if isinstance(node, ast.Import) for alias in node.names}
    names |= {node.module.split(".")[0] for node in top if isinstance(node, ast.ImportFrom) and node.module}
    allowed = set(sys.stdlib_module_names) | {"__future__", "vs_vllm"}  # (vs_vllm: the same rule, its own test)
    assert "vs_vllm" in names and names <= allowed, names - allowed


def test_a_missing_vllm_python_is_one_error_line(tmp_path):
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--vllm-python", str(tmp_path / "none" / "python"),
                           "--out", str(out)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --vllm-python ") and proc.stderr.count("\n") == 1
    assert not out.exists()


def test_accelkits_half_times_guided_batches_against_twins_of_their_lengths(tmp_path):
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import structured_vs_vllm as bench
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    from accelkit.serve.testing import save_bytelevel_model

    model = save_bytelevel_model(tmp_path / "m", seed=3)
    job = {"model_dir": str(model), "backend": "llguidance", "batch": 3, "max_tokens": 12, "repeats": 2,
           "kinds": {"choice": {"choice": ["yes", "no"]}}}
    (result,) = bench.child_accelkit(job)
    assert result["kind"] == "choice" and [r["cold"] for r in result["runs"]] == [True, False]
    for run in result["runs"]:
        assert run["finished_stop"] == 3  # (every request ends where its choice does)
        assert 3 <= run["output_tokens"] <= 3 * 12 and run["guided_s"] > 0 and run["plain_s"] > 0
        assert run["ratio"] == run["plain_s"] / run["guided_s"]
    assert result["warm_ratio_median"] == result["runs"][1]["ratio"]
