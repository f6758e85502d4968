"""The validation table (issue 14): benchmarks/results/plan_validation.json is what the planner predicts
today, the set has the composition the issue asks for, the free parameters are what the fit returns, and
docs/validation.md shows the same numbers. Acceptance figures are asserted as measured — the one that is
not met (worst run ≤ 20%) is a strict xfail, so it is reported, not hidden, and fails once it passes."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "benchmarks" / "results" / "plan_validation.json"
DOC = ROOT / "docs" / "validation.md"


def _script():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location("plan_validation", ROOT / "benchmarks" / "plan_validation.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def script():
    return _script()


@pytest.fixture(scope="module")
def committed():
    return json.loads(RESULT.read_text())


def test_committed_json_is_what_the_planner_predicts_today(script, committed):
    rows = script.evaluate_all(script.TRAINING)
    assert [r["id"] for r in rows] == [r["id"] for r in committed["training"]]
    for now, then in zip(rows, committed["training"], strict=True):
        assert now["predicted"]["tokens_per_s_per_device"] == pytest.approx(
            then["predicted"]["tokens_per_s_per_device"], rel=1e-9), now["id"]
    serving = script.evaluate_serving(script.SERVING)
    for now, then in zip(serving, committed["serving"]["runs"], strict=True):
        assert now["error"] == pytest.approx(then["error"], rel=1e-9), now["id"]


def test_composition_sources_and_layouts(committed):
    counted = [r for r in committed["training"] if r["split"] != "not-counted"]
    assert len(counted) >= 12
    sources = {r["source"] for r in counted}
    assert len(sources) >= 4
    for r in committed["training"]:
        assert r["source"] in committed["sources"] and r["row"]
        assert {"dp", "tp", "pp", "cp", "vp", "zero", "micro_batch", "grad_accum", "recompute"} <= set(r["layout"])
        assert r["split"] != "not-counted" or r["why_not_counted"]
    holdout = [r for r in counted if r["split"] == "holdout"]
    assert len(holdout) >= 12 and {r["source"] for r in holdout} >= {"llm-foundry", "megatron-sc21"}


def test_free_parameters_are_what_the_fit_returns(script):
    from accelkit.plan import fitted

    assert script.fit(script.TRAINING) == fitted.SUSTAINED_TENSOR


def test_mean_error_within_10_percent(committed):
    s = committed["summary"]
    assert s["all"]["mean_abs_error"] <= 0.10
    assert s["calibration"]["mean_abs_error"] <= 0.10
    assert s["holdout"]["n"] >= 12


@pytest.mark.xfail(strict=True, reason="issue 14 acceptance 1 not met: worst run ≤ 20% (hold-out MPT H100 rows "
                                       "at 8K context and without checkpointing are +20…+32%; docs/validation.md)")
def test_worst_error_within_20_percent(committed):
    assert committed["summary"]["all"]["worst_abs_error"] <= 0.20


def test_docs_show_the_same_numbers(script, committed):
    doc = DOC.read_text()
    table = script.markdown(committed["training"], committed["serving"]["runs"])
    for line in table.splitlines()[2:]:
        if line.startswith("| `"):
            assert line in doc, line
    s = committed["summary"]
    assert f"{s['all']['mean_abs_error']:.1%}" in doc and f"{s['holdout']['mean_abs_error']:.1%}" in doc
