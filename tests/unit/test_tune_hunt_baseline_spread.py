"""The fp32 baseline has no spread of its own (it is 1× by definition), and tune read that as "no doubt": a
`tune --module … --min-iterations 3` run starred fp32 as the firm winner from 3 pairs of blocks — the same 3 pairs
that left bf16 unstarred in the run before ("its own comparison … is inconclusive (3 pairs …)") — and its speed
note read "fastest fp32 1×, next bf16 0.702× [0.656–1.3]" without saying the two are within the spread."""

from __future__ import annotations

from accelkit.core import Recipe
from accelkit.tune.ranking import unsupported
from accelkit.tune.search import Trial, rank_by_paired_ratios

TOO_FEW = ("inconclusive (3 pairs of blocks; a spread needs at least 5: a longer --min-time or a larger "
           "--min-iterations gives more rounds, and --max-iterations, if set, at least 5)")


def _trial(name: str, ratio: float, p25: float | None = None, p75: float | None = None, *, verdict: str = "slower",
           tput: float = 100.0) -> Trial:
    t = Trial(name, Recipe(), status="measured", throughput=tput, unit="samples/s", latency_s=1 / tput, passed=True)
    t.gate = {"passed": True, "criterion": "cosine", "candidate_value": 1.0, "threshold": 0.99}
    t.vs_baseline = ({"baseline": "fp32", "ratio": 1.0, "verdict": "baseline"} if name == "fp32" else
                     {"baseline": "fp32", "ratio": ratio, "p25": p25, "p75": p75, "pairs": 3, "interleaved": True,
                      "verdict": verdict})
    return t


def test_a_baseline_winner_on_too_few_pairs_is_not_firm():
    trials = [_trial("fp32", 1.0, tput=1000.0), _trial("int8-dynamic", 0.845, 0.823, 0.881, verdict=TOO_FEW,
                                                        tput=850.0)]
    rank_by_paired_ratios(trials)
    why = unsupported(trials[0], trials, "throughput", memory=False)
    assert why is not None and "int8-dynamic's comparison with it is inconclusive (3 pairs" in why


def test_a_baseline_winner_on_enough_pairs_stays_firm():
    trials = [_trial("fp32", 1.0, tput=1000.0), _trial("int8-dynamic", 0.845, 0.823, 0.881, tput=850.0)]
    rank_by_paired_ratios(trials)
    assert unsupported(trials[0], trials, "throughput", memory=False) is None


def test_the_speed_note_says_when_the_baseline_and_the_next_overlap():
    overlapping = [_trial("fp32", 1.0), _trial("bf16", 0.702, 0.656, 1.3, verdict="no difference (…)")]
    assert rank_by_paired_ratios(overlapping).endswith("within the run-to-run spread of each other")
    # and the other way round: the baseline next, inside the fastest's spread
    second = [_trial("fp32", 1.0), _trial("bf16", 1.2, 0.95, 1.4, verdict="no difference (…)")]
    assert rank_by_paired_ratios(second).endswith("within the run-to-run spread of each other")
    apart = [_trial("fp32", 1.0), _trial("bf16", 0.70, 0.65, 0.75)]
    assert "within the run-to-run spread" not in rank_by_paired_ratios(apart)
