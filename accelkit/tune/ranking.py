"""Honest marks in `accelkit tune`'s table: which recipes are on the Pareto front and whether the starred winner is
one the table supports.

A difference inside the noise is no difference. Compared on raw figures, 7 of 8 recipes came out "pareto" (a cosine
of 0.99998 against 0.99997, a 2% throughput gap inside the run-to-run spread: every recipe "best" at something), and
the star went to compile at 14.4 samples/s beside int8-dynamic's 16.9 in the same table. Here

* speed differs only when the paired-ratio spreads (p25–p75 against the baseline) do not overlap, or — without
  pairs — when total throughputs differ by more than SPEED_TIE;
* memory differs by more than MEMORY_TIE (relative; an unknown figure is worse than any known one);
* accuracy differs by more than a tenth of the gate's allowed drop (1e-3 without a gate threshold);

a recipe dominates another when it is clearly better on one axis and clearly worse on none, and the starred winner
needs a lead outside the runner-up's spread on the stated objective, and the table's own column for it to agree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from accelkit.tune.search import Trial

#: total throughputs this close (relative) are a tie where there are no paired blocks to give a spread
SPEED_TIE = 0.05
#: memory figures this close (relative) are a tie: a planner estimate or an RSS delta is no finer
MEMORY_TIE = 0.05
#: the accuracy tie without a gate threshold to scale it by
ACCURACY_TIE = 1e-3


def speed(t: Trial) -> float:
    """What speed is ranked by: the paired ratio against the baseline when every trial has one, else throughput."""
    return t.ranked_speed if t.ranked_speed is not None else (t.throughput or 0.0)


def _spread(t: Trial) -> tuple[float, float] | None:
    """(p25, p75) of ``t``'s paired ratio (the baseline's is exactly 1); None without one."""
    if t.ranked_speed is None:
        return None
    c = t.vs_baseline or {}
    if c.get("verdict") == "baseline":
        return (1.0, 1.0)
    lo, hi = c.get("p25"), c.get("p75")
    return (float(lo), float(hi)) if lo is not None and hi is not None else (t.ranked_speed, t.ranked_speed)


def _order(a: float, b: float, tie: float) -> int:
    """+1 when ``a`` is clearly above ``b`` (by more than ``tie``, relative), -1 clearly below, 0 a tie."""
    if a > b * (1 + tie):
        return 1
    if b > a * (1 + tie):
        return -1
    return 0


def speed_order(a: Trial, b: Trial) -> int:
    """+1 when ``a`` is clearly faster than ``b``, -1 clearly slower, 0 within the noise."""
    sa, sb = _spread(a), _spread(b)
    if sa is not None and sb is not None:
        return 1 if sa[0] > sb[1] else -1 if sa[1] < sb[0] else 0
    return _order(a.throughput or 0.0, b.throughput or 0.0, SPEED_TIE)


def memory_order(a: Trial, b: Trial) -> int:
    """+1 when ``a`` is clearly leaner than ``b``; an unknown figure is not lean."""
    if a.memory_bytes is None or b.memory_bytes is None:
        return 0 if a.memory_bytes is None and b.memory_bytes is None else (1 if b.memory_bytes is None else -1)
    return _order(float(b.memory_bytes), float(a.memory_bytes), MEMORY_TIE)


def accuracy_order(a: Trial, b: Trial) -> int:
    """+1 when ``a`` is clearly closer to fp32 than ``b``, by more than a tenth of the gate's allowed drop."""
    va, vb = (a.gate or {}).get("candidate_value"), (b.gate or {}).get("candidate_value")
    va, vb = (0.0 if va is None else float(va)), (0.0 if vb is None else float(vb))
    threshold = (a.gate or {}).get("threshold") or (b.gate or {}).get("threshold")
    tie = (1.0 - float(threshold)) / 10 if threshold is not None and threshold < 1 else ACCURACY_TIE
    return 1 if va - vb > tie else -1 if vb - va > tie else 0


def dominates(a: Trial, b: Trial, *, memory: bool = True) -> bool:
    """``a`` is clearly better than ``b`` on speed, memory or accuracy, and clearly worse on none. ``memory=False``
    leaves memory out (a CPU's measured RSS peaks, which depend on the order the recipes ran in)."""
    orders = (speed_order(a, b), memory_order(a, b) if memory else 0, accuracy_order(a, b))
    return min(orders) >= 0 and max(orders) > 0


def _shown(t: Trial) -> str:
    c = t.vs_baseline or {}
    if t.ranked_speed is not None and c.get("ratio") is not None:
        spread = f" [{c['p25']:.3g}–{c['p75']:.3g}]" if c.get("p25") is not None and c.get("p75") is not None else ""
        return f"{t.name} at {c['ratio']:.3g}×{spread}"
    return f"{t.name} at {t.throughput:.3g} {t.unit or ''}".rstrip()


def unsupported(winner: Trial, passing: Sequence[Trial], objective: str, *, memory: bool = True) -> str | None:
    """Why the table does not support starring ``winner`` on ``objective``, or None when it does: a runner-up within
    the noise of it, or — ranked by the paired ratios — a higher total throughput in the table's own column.
    ``memory=False``: memory is left out of the dominance (as :func:`dominates`)."""
    others = [t for t in passing if t is not winner]
    if not others:
        return None
    reasons = []
    if dominators := [t.name for t in others if dominates(t, winner, memory=memory)]:
        reasons.append(f"{', '.join(dominators)} {'is' if len(dominators) == 1 else 'are'} at least as good on every "
                       f"axis within the noise and clearly better on one, so {winner.name} is off the Pareto front")
    if objective == "throughput":
        reasons += _throughput_doubts(winner, others, passing)
    elif objective == "latency":
        runner = min(others, key=lambda t: t.latency_s if t.latency_s is not None else float("inf"))
        if winner.latency_s is not None and runner.latency_s is not None and \
                _order(runner.latency_s, winner.latency_s, SPEED_TIE) == 0:
            reasons.append(f"the runner-up {runner.name}'s median latency ({runner.latency_s * 1e3:.3g} ms) is within "
                           f"{SPEED_TIE:.0%} of {winner.name}'s ({winner.latency_s * 1e3:.3g} ms)")
    else:
        runner = min(others, key=lambda t: t.memory_bytes if t.memory_bytes is not None else float("inf"))
        if memory_order(winner, runner) == 0:
            reasons.append(f"the runner-up {runner.name}'s memory is within {MEMORY_TIE:.0%} of {winner.name}'s")
    return "; ".join(reasons) or None


def _throughput_doubts(winner: Trial, others: Sequence[Trial], passing: Sequence[Trial]) -> list[str]:
    """Why a throughput winner is not clear: its own comparison is inconclusive (the baseline's: the runner-up's
    comparison with it), the runner-up is within the spread, or another has the higher total throughput in the
    table."""
    reasons = []
    verdict = str((winner.vs_baseline or {}).get("verdict") or "")
    runner = max(others, key=speed)
    if verdict.startswith("inconclusive"):  # e.g. its total throughput and median latency disagree with its ratio
        reasons.append(f"its own comparison with the baseline is {verdict}")
    elif verdict == "baseline":  # the baseline's lead is the runner-up's comparison with it, read the other way
        theirs = str((runner.vs_baseline or {}).get("verdict") or "")
        if theirs.startswith("inconclusive"):  # (3 pairs starred fp32 while the same 3 pairs left bf16 unstarred)
            reasons.append(f"the runner-up {runner.name}'s comparison with it is {theirs}")
    if speed_order(winner, runner) == 0:
        reasons.append(f"the runner-up {_shown(runner)} is within the run-to-run spread of {_shown(winner)}")
    top = max(passing, key=lambda t: t.throughput or 0.0)
    if top is not winner and (top.throughput or 0.0) > (winner.throughput or 0.0):
        reasons.append(f"{top.name} has the higher total throughput in the table ({top.throughput:.3g} vs "
                       f"{winner.throughput:.3g} {winner.unit or ''})".replace(" )", ")"))
    return reasons
