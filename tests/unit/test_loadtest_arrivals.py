"""Gamma arrivals: mean rate, CV = 1/sqrt(burstiness), seeding, rate inf."""

import itertools
import math
import statistics

import pytest

from accelkit.loadtest.arrivals import arrival_offsets, describe_arrivals

N = 20_000


def _gaps(offsets):
    return [b - a for a, b in itertools.pairwise(offsets)]


@pytest.mark.parametrize("burstiness", [0.25, 1.0, 4.0])
def test_mean_rate_and_cv(burstiness):
    offsets = arrival_offsets(N, 4.0, burstiness, seed=1)
    gaps = _gaps(offsets)
    assert offsets[0] == 0.0 and all(g >= 0 for g in gaps)
    assert (N - 1) / offsets[-1] == pytest.approx(4.0, rel=0.04)  # mean rate
    cv = statistics.pstdev(gaps) / statistics.fmean(gaps)
    assert cv == pytest.approx(1 / math.sqrt(burstiness), rel=0.05)  # Poisson (1.0): CV 1


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
