"""Sample statistics as the methodology asks: percentiles with the samples that back them, spread,
and a noise verdict. Pure Python so that the store, the load tester and the CLI need no numpy."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from accelkit.core.spec import Spec, spec_field

#: samples needed for a 99%-confidence estimate of each percentile (MLPerf LoadGen's binomial rule);
#: :func:`min_samples_for` gives the same numbers for any percentile
MIN_SAMPLES_FOR = {"p50": 1, "p90": 44, "p95": 90, "p99": 459}
#: the confidence of that rule
SAMPLE_CONFIDENCE = 0.99
#: IQR/median above this is noisy (torch.utils.benchmark's threshold); above UNSTABLE it is unstable
NOISY, UNSTABLE = 0.10, 0.25


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile (numpy's default method) of already sorted values, q in [0, 100]."""
    if not sorted_values:
        raise ValueError("percentile of no samples")
    pos = (len(sorted_values) - 1) * q / 100.0
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def min_samples_for(q: float) -> int | None:
    """Samples needed before the q-th percentile is backed, for any q in (0, 100]: the smallest n with
    1 − (q/100)^n ≥ 0.99, i.e. with 99% confidence at least one sample lies at or above the true percentile
    (the rule behind :data:`MIN_SAMPLES_FOR`: 44 for p90, 459 for p99, 4603 for p99.9). The median and
    lower percentiles need 1, as MIN_SAMPLES_FOR's p50; p100, the sample maximum, is never backed: None."""
    if not 0 < q <= 100:
        raise ValueError(f"q={q!r} is out of range; expected 0 < q <= 100")
    if q >= 100:
        return None
    if q <= 50:
        return 1
    return math.ceil(math.log(1 - SAMPLE_CONFIDENCE) / math.log(q / 100))


@dataclass(frozen=True, slots=True, kw_only=True)
class Stats(Spec):
    """Summary of per-iteration samples (seconds, or whatever unit the samples are in)."""

    n: int = spec_field(min=1, doc="Number of samples.")
    mean: float = spec_field(doc="Arithmetic mean.")
    median: float = spec_field(doc="Median (= p50).")
    p50: float = spec_field(doc="50th percentile.")
    p90: float = spec_field(doc="90th percentile.")
    p95: float = spec_field(doc="95th percentile.")
    p99: float = spec_field(doc="99th percentile.")
    min: float = spec_field(doc="Smallest sample.")
    max: float = spec_field(doc="Largest sample.")
    stdev: float = spec_field(min=0.0, doc="Sample standard deviation (n−1); 0 for one sample.")
    cv: float = spec_field(min=0.0, doc="Coefficient of variation, stdev / mean.")
    iqr_over_median: float = spec_field(min=0.0, doc="(p75 − p25) / median: the noise measure.")
    unbacked: tuple[str, ...] = spec_field((), doc="Percentiles that too few samples back (LoadGen rule).")

    @property
    def noise(self) -> str:
        """'ok', 'noisy' (IQR/median > 10%) or 'unstable' (> 25%)."""
        if self.iqr_over_median > UNSTABLE:
            return "unstable"
        return "noisy" if self.iqr_over_median > NOISY else "ok"


def summarize(samples: Sequence[float]) -> Stats:
    """Stats of raw samples; raises ValueError on an empty list."""
    if not samples:
        raise ValueError("no samples to summarize")
    xs = sorted(float(x) for x in samples)
    n = len(xs)
    mean = math.fsum(xs) / n
    stdev = math.sqrt(math.fsum((x - mean) ** 2 for x in xs) / (n - 1)) if n > 1 else 0.0
    median = percentile(xs, 50)
    iqr = percentile(xs, 75) - percentile(xs, 25)
    return Stats(
        n=n,
        mean=mean,
        median=median,
        p50=median,
        p90=percentile(xs, 90),
        p95=percentile(xs, 95),
        p99=percentile(xs, 99),
        min=xs[0],
        max=xs[-1],
        stdev=stdev,
        cv=stdev / mean if mean > 0 else 0.0,
        iqr_over_median=iqr / median if median > 0 else 0.0,
        unbacked=tuple(p for p, need in MIN_SAMPLES_FOR.items() if n < need),
    )
