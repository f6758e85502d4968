"""Accuracy gates on outputs a real model gives: two identical all-zero outputs pass, and a task metric that is
inf/NaN for the candidate fails the gate instead of raising (or passing)."""

import math

import pytest
import torch

from accelkit.recipes.gates import check, drift


def test_identical_all_zero_outputs_pass_the_cosine_gate():
    relu = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU())
    with torch.no_grad():
        relu[0].bias.fill_(-100.0)  # every output clipped to 0
        ref = relu(torch.randn(3, 8))
    assert not ref.any()
    result = check(ref, ref.clone(), logits=False)
    assert result.drift.identical and result.drift.cosine == 1.0 and result.passed  # cosine 0 failed it
    assert drift(ref, torch.ones_like(ref), logits=False).cosine == 0.0  # zero against non-zero: still nothing alike


@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_a_non_finite_task_metric_for_the_candidate_fails_the_gate(bad):
    ref = torch.randn(4, 8)
    scores = iter([0.9, bad])
    result = check(ref, ref * 1.001, logits=True, metric=lambda out: next(scores))
    assert not result.passed and result.candidate_value is None  # NaN raised from the Spec, inf passed


def test_a_non_finite_task_metric_for_the_reference_is_named():
    ref = torch.randn(4, 8)
    with pytest.raises(ValueError, match=r"the task metric gave nan for the reference output"):
        check(ref, ref, logits=True, metric=lambda out: math.nan)
