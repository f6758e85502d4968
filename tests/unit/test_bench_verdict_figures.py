"""Issue 29 item 4: a verdict contradicted its own numbers on a loaded machine — `make demo` printed "prefill: bf16
fastest at 1.77× [1.75–1.86] fp32 (288.7 vs 324.1 tokens/s)" beside median latencies of 26.1 ms (fp32) and 252 ms
(bf16). The verdict, the ratio, the throughputs and the medians now tell one story, or the verdict says it is
inconclusive and which figure says what."""

from __future__ import annotations

from accelkit.bench.metrics import Totals, compare
from accelkit.core.bench_result import DISAGREE, BenchResult, Comparison, Throughput, verdicts
from accelkit.core.stats import summarize

TOKENS = 512  # per prefill iteration, the same for both variants


def _entry(name: str, tput: float, median_s: float, cmp: Comparison) -> BenchResult:
    return BenchResult(name=name, step="prefill", precision=name, latency_s=summarize([median_s] * 9),
                       throughput=Throughput(value=tput, unit="tokens/s"), comparison=cmp)


def test_the_demo_verdict_is_inconclusive_and_says_which_figure_says_what():
    # the pairs of blocks: bf16 1.77× fp32 (a hog ran during fp32's blocks of most rounds)
    base_rates = [100.0, 101.0, 99.0, 100.0, 100.0, 98.0, 102.0]
    rates = [177.0, 176.0, 186.0, 175.0, 180.0, 170.0, 190.0]
    fp32, bf16 = Totals(324.1, 0.0261, TOKENS), Totals(288.7, 0.252, TOKENS)
    cmp = compare("fp32", base_rates, rates, interleaved=True, base_totals=fp32, totals=bf16)
    assert cmp.ratio is not None and cmp.ratio > 1.7 and cmp.is_inconclusive and cmp.verdict.startswith(DISAGREE)
    assert "the median of pairs of blocks says faster at 1.77×" in cmp.verdict
    assert "total throughput gives 0.89× and median latency gives 0.10×" in cmp.verdict
    # without the figures beside it (the call before this issue) the same rates read "faster"
    assert compare("fp32", base_rates, rates, interleaved=True).verdict == "faster"

    base = _entry("fp32", 324.1, 0.0261, Comparison(baseline="fp32", ratio=1.0, verdict="baseline"))
    (line,) = verdicts([base, _entry("bf16", 288.7, 0.252, cmp)])
    assert line.startswith("prefill: no verdict between bf16 and fp32 — inconclusive (the figures disagree"), line
    assert "fastest" not in line
    assert line.endswith(f"printed: 1.77× [{cmp.p25:.2f}–{cmp.p75:.2f}] fp32 by the median of pairs, total "
                         "throughput 288.7 vs 324.1 tokens/s, median latency 252 ms vs 26.1 ms"), line


def test_figures_that_agree_keep_the_firm_verdict_and_one_disagreeing_figure_is_enough():
    base_rates, rates = [100.0] * 6, [150.0, 149.0, 151.0, 150.0, 152.0, 148.0]
    agree = compare("fp32", base_rates, rates, interleaved=True, base_totals=Totals(100.0, 0.01, 1),
                    totals=Totals(149.0, 0.0067, 1))
    assert agree.verdict == "faster"
    # the total agrees, the median latency does not: still no firm verdict
    one = compare("fp32", base_rates, rates, interleaved=True, base_totals=Totals(100.0, 0.01, 1),
                  totals=Totals(149.0, 0.012, 1))
    assert one.verdict.startswith(DISAGREE) and "median latency gives 0.83×" in one.verdict
    assert "total throughput" not in one.verdict
    # per item: a variant at twice the batch has twice the latency per iteration and is not slower for it
    batch = compare("b8", base_rates, rates, interleaved=True, base_totals=Totals(100.0, 0.08, 8),
                    totals=Totals(150.0, 0.107, 16))
    assert batch.verdict == "faster"
    # "no difference" beside figures that both lie past its spread, on one side: inconclusive too
    same = compare("fp32", [100.0, 110.0, 90.0, 100.0, 100.0], [105.0, 95.0, 100.0, 100.0, 100.0],
                   interleaved=True, base_totals=Totals(100.0, 0.01, 1), totals=Totals(180.0, 0.005, 1))
    assert same.verdict.startswith(DISAGREE) and "says no difference (1.00× [" in same.verdict


def test_a_contradicted_comparison_names_no_winner_when_the_baseline_leads_either():
    cmp = compare("fp32", [100.0] * 6, [80.0, 81.0, 79.0, 80.0, 82.0, 78.0], interleaved=True,
                  base_totals=Totals(100.0, 0.02, TOKENS), totals=Totals(120.0, 0.015, TOKENS))
    assert cmp.verdict.startswith(DISAGREE) and "says slower at 0.80×" in cmp.verdict
    base = _entry("fp32", 100.0, 0.02, Comparison(baseline="fp32", ratio=1.0, verdict="baseline"))
    (line,) = verdicts([base, _entry("bf16", 120.0, 0.015, cmp)])
    assert line.startswith("prefill: no verdict between bf16 and fp32 — ") and "fastest" not in line, line
