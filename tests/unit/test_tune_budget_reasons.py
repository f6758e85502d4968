"""The reasons `tune` gives for what it does not rank: a budget comparison whose two figures read the same at one
decimal, and an accuracy gate missed by a figure the table's four digits round up to its threshold."""

from accelkit.core import Recipe
from accelkit.tune.search import Trial, _gate, check_measured_budget, over_budget

MiB = 2**20


def test_budget_figures_get_the_digits_that_tell_them_apart():
    """`--memory-budget 2050.28MiB` printed 'planner estimates 2050.3 MiB > budget 2050.3 MiB'."""
    budget = int(2050.28 * MiB)
    assert over_budget("planner estimates", int(2050.31 * MiB), budget) == \
        "planner estimates 2050.31 MiB > budget 2050.28 MiB"
    assert over_budget("measured peak", 3 * MiB, MiB) == "measured peak 3.0 MiB > budget 1.0 MiB"
    assert over_budget("measured peak", 450 * MiB, 1024) == "measured peak 450.0 MiB > budget 1.0 KiB"  # not 0.0 MiB
    assert over_budget("measured peak", 2000, 1000) == "measured peak 2.0 KiB > budget 1000 B"
    assert over_budget("planner estimates", budget + 1, budget) == \
        f"planner estimates {budget + 1:,} B > budget {budget:,} B"  # equal to three decimals: exact bytes


def test_a_measured_peak_over_the_budget_is_not_ranked_and_says_both_figures():
    within, over, failed_gate = (Trial(n, Recipe(), status="measured", passed=True) for n in ("a", "b", "c"))
    within.measured_peak_bytes, over.measured_peak_bytes, failed_gate.measured_peak_bytes = MiB, 5 * MiB, 5 * MiB
    failed_gate.passed, failed_gate.reason = False, "accuracy gate: cosine 0.98 < 0.99 (1 − --max-accuracy-drop 0.01)"
    check_measured_budget([within, over, failed_gate], 2 * MiB)
    assert (within.status, within.reason) == ("measured", None)
    assert (over.status, over.reason) == ("over-budget", "measured peak 5.0 MiB > budget 2.0 MiB")
    assert failed_gate.status == "over-budget" and failed_gate.reason == (
        "measured peak 5.0 MiB > budget 2.0 MiB; accuracy gate: cosine 0.98 < 0.99 (1 − --max-accuracy-drop 0.01)")
    check_measured_budget([within], None)  # no budget: nothing to hold it to
    assert within.status == "measured"


def test_a_failed_gate_names_its_figure_and_threshold():
    """`tune bert --size tiny --max-accuracy-drop 0` showed 'cosine 0.9999 … fail' with an empty why column."""
    gate = _gate({"cosine": 0.99999999, "top1_agreement": None, "identical": False}, 0.0, logits=False)
    assert not gate["passed"]
    assert gate["reason"] == "cosine 0.99999999 < 1 (1 − --max-accuracy-drop 0)"
    gate = _gate({"cosine": 0.9999, "top1_agreement": 0.98, "identical": False}, 0.01)
    assert gate["reason"] == "top1 0.98 < 0.99 (1 − --max-accuracy-drop 0.01)"
    assert "reason" not in _gate({"cosine": 0.995, "top1_agreement": None, "identical": False}, 0.01)
