"""On a CPU without the planner's estimate for every recipe, tune's memory column is the measured RSS peak, which
depends on the order the recipes run in (the same two recipes, run in the other order, swapped which looked leaner:
the first measured, fp32 always, is charged the runtime's own warm-up). It is shown, not ranked: the Pareto column
and the winner's star leave it out, and ``--objective memory`` is refused there."""

import pytest

from accelkit.core import Recipe, UserError
from accelkit.tune.search import Trial, TuneConfig, _rank, check_memory_objective, memory_ranked


def _trial(name: str, mem_mib: int, basis: str) -> Trial:
    t = Trial(name, Recipe(), status="measured", throughput=100.0, unit="samples/s", latency_s=0.01,
              memory_bytes=mem_mib << 20, memory_basis=basis, passed=True)
    t.gate = {"passed": True, "criterion": "cosine", "candidate_value": 1.0, "threshold": 0.99}
    t.vs_baseline = ({"baseline": "fp32", "ratio": 1.0, "verdict": "baseline"} if name == "fp32" else
                     {"baseline": "fp32", "ratio": 1.0, "p25": 0.9, "p75": 1.1, "pairs": 10, "interleaved": True})
    return t


def test_rss_peaks_on_a_cpu_rank_nothing():
    """fp32 'used' 80 MiB and bf16 84 KiB in the docs' own table: bf16 dominated fp32 on RSS alone."""
    notes: list[str] = []
    trials = [_trial("fp32", 80, "measured peak"), _trial("bf16", 1, "measured peak")]
    assert not memory_ranked(trials, "cpu")
    _rank(trials, TuneConfig(device="cpu"), "cpu", notes)
    assert all(t.pareto for t in trials)  # equal in speed and accuracy: neither is off the front
    assert any("depends on the order the recipes run in, so the Pareto column and the winner leave memory out" in n
               for n in notes), notes


@pytest.mark.parametrize(("device", "basis"), [("cuda:0", "measured peak"), ("cpu", "planner estimate")])
def test_comparable_memory_still_ranks(device, basis):
    trials = [_trial("fp32", 80, basis), _trial("bf16", 1, basis)]
    assert memory_ranked(trials, device)
    _rank(trials, TuneConfig(device="cpu"), device, [])
    assert [t.pareto for t in trials] == [False, True]


def test_objective_memory_is_refused_on_a_cpu_without_every_estimate():
    measured = [Trial("fp32", Recipe()), Trial("bf16", Recipe(precision="bf16"))]
    unestimated = {"the planner models no custom model": ["fp32", "bf16"], "unused": ["int8-dynamic"]}
    with pytest.raises(UserError) as caught:
        check_memory_objective(TuneConfig(objective="memory"), "cpu", measured, unestimated)
    assert str(caught.value) == (
        "--objective memory on a CPU ranks the planner's memory estimates, and it has none for fp32, bf16: the "
        "planner models no custom model (measured RSS peaks depend on the order the recipes run in); use --objective "
        "throughput or latency, or tune on a GPU")
    # fine: another objective, a GPU's measured peaks, or an estimate for every recipe measured
    check_memory_objective(TuneConfig(objective="latency"), "cpu", measured, unestimated)
    check_memory_objective(TuneConfig(objective="memory"), "cuda:0", measured, unestimated)
    check_memory_objective(TuneConfig(objective="memory"), "cpu", measured, {"x": ["int8-dynamic"]})
