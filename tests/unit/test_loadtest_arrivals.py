"""Gamma arrivals: mean rate, CV = 1/sqrt(burstiness), seeding, rate inf, vLLM's rescaled schedule."""

import itertools
import math
import random
import statistics

import pytest

from accelkit.loadtest.arrivals import arrival_offsets, describe_arrivals

N = 20_000


def _gaps(offsets):
    return [b - a for a, b in itertools.pairwise(offsets)]


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_mean_rate_and_cv(burstiness):
    offsets = arrival_offsets(N, 4.0, burstiness, seed=1)
    gaps = _gaps([0.0, *offsets])
    assert all(g >= 0 for g in gaps)
    assert N / offsets[-1] == pytest.approx(4.0, rel=1e-9)  # mean rate: exact, as vLLM rescales
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)  # Poisson (1.0): CV 1


def test_schedule_is_vllms():
    """vLLM's get_request draws a gap before every request, the first included, and rescales the cumulative
    delays so that the last request arrives at n / rate; ours started at 0 and ended wherever the gaps summed."""
    n, rate, burstiness = 7, 2.0, 0.5
    rng = random.Random(3)
    cumulative = list(itertools.accumulate(rng.gammavariate(burstiness, 1 / (rate * burstiness)) for _ in range(n)))
    expected = [t * (n / rate) / cumulative[-1] for t in cumulative]
    offsets = arrival_offsets(n, rate, burstiness, seed=3)
    assert offsets == pytest.approx(expected, rel=1e-12) and offsets[0] > 0
    assert offsets[-1] == pytest.approx(n / rate, rel=1e-12)
    assert arrival_offsets(0, rate) == []


def test_seeded_and_inf():
    assert arrival_offsets(50, 2.0, seed=7) == arrival_offsets(50, 2.0, seed=7)
    assert arrival_offsets(50, 2.0, seed=7) != arrival_offsets(50, 2.0, seed=8)
    assert arrival_offsets(5, math.inf) == [0.0] * 5
    assert describe_arrivals(math.inf, 1.0) == "all at once (rate inf)"
    assert describe_arrivals(4, 1.0) == "Poisson, 4 req/s"


@pytest.mark.parametrize(("args", "needle"), [((3, 0.0, 1.0), "request_rate"), ((3, 1.0, 0.0), "burstiness"),
                                              ((-1, 1.0, 1.0), "num_requests")])
def test_bad_arguments(args, needle):
    with pytest.raises(ValueError, match=needle):
        arrival_offsets(*args)


def test_the_arrivals_line_stays_short_at_any_burstiness() -> None:
    """CV printed with .2f: burstiness 1e-300 put a 150-digit CV in the report's title."""
    assert describe_arrivals(4, 1e-300) == "gamma (burstiness 1e-300, CV 1e+150), 4 req/s"
    assert describe_arrivals(4, 0.5) == "gamma (burstiness 0.5, CV 1.41), 4 req/s"
