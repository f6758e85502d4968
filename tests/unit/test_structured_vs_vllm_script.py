"""benchmarks/structured_vs_vllm.py: accelkit's half measures guided batches against unguided twins of the same
lengths (its imports and its missing-venv error are tested with vs_vllm.py's, tests/unit/test_vs_vllm_script.py)."""

from __future__ import annotations

import sys

from tests.conftest import REPO


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
