import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.core import summarize
from accelkit.core.stats import MIN_SAMPLES_FOR, min_samples_for, percentile


@given(st.lists(st.floats(0.0, 1e6, allow_nan=False), min_size=1, max_size=200))
def test_percentiles_match_numpy(xs):
    s = summarize(xs)
    for q, value in ((50, s.p50), (90, s.p90), (95, s.p95), (99, s.p99)):
        assert value == pytest.approx(float(np.percentile(xs, q)), rel=1e-9, abs=1e-9)
    assert s.mean == pytest.approx(float(np.mean(xs)), rel=1e-9, abs=1e-9)
    if len(xs) > 1:
        assert s.stdev == pytest.approx(float(np.std(xs, ddof=1)), rel=1e-6, abs=1e-9)


def test_unbacked_percentiles_follow_loadgen_rule():
    assert summarize([1.0] * 43).unbacked == ("p90", "p95", "p99")
    assert summarize([1.0] * 44).unbacked == ("p95", "p99")
    assert summarize([1.0] * 459).unbacked == ()


def test_min_samples_for_any_percentile():
    """The rule behind MIN_SAMPLES_FOR, for any percentile: the smallest n with 1 − (q/100)^n ≥ 0.99."""
    assert {key: min_samples_for(float(key[1:])) for key in MIN_SAMPLES_FOR} == MIN_SAMPLES_FOR
    assert min_samples_for(99.9) == 4603 and min_samples_for(75) == 17 and min_samples_for(25) == 1
    assert min_samples_for(100) is None  # the maximum: no sample count backs it


def test_noise_verdict():
    assert summarize([1.0, 1.0, 1.0, 1.0]).noise == "ok"
    assert summarize([1.0, 1.0, 1.3, 1.3]).noise == "unstable"
    assert summarize([1.0, 1.0, 1.15, 1.15, 1.0, 1.15]).noise == "noisy"


def test_empty_is_an_error():
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        percentile([], 50)
