"""Gradient compression's rules without processes (issue 17): the Recipe's and torch's constraints, the refusals a
bench gives before launching, the bench matrix, the quality gate both ways, and the quality task's data."""

import itertools
import math

import pytest

from accelkit.bench.variants import Matrix, Variant, device_refusal, single_device
from accelkit.core import Recipe
from accelkit.distributed.quality import SUCCESSORS, markov_tokens, mean_over_ranks, template_images
from accelkit.recipes.grad_compression import compression_refusal, loss_gate


# ---- the recipe ------------------------------------------------------------------------------------------------
def test_recipe_rules():
    assert Recipe().grad_compression == "none" and Recipe().powersgd_rank == 4
    with pytest.raises(ValueError, match="powersgd_rank applies to grad_compression='powersgd'"):
        Recipe(grad_compression="bf16", powersgd_rank=2)
    with pytest.raises(ValueError, match="start_powerSGD_iter|powersgd_start_iter must be >= 2"):
        Recipe(grad_compression="powersgd", powersgd_start_iter=1)
    # torch allows start 1 once neither error feedback nor warm start memorizes per-bucket state
    Recipe(grad_compression="powersgd", powersgd_start_iter=1, powersgd_error_feedback=False, powersgd_warm_start=False)
    with pytest.raises(ValueError, match="DDP communication hook"):
        Recipe(grad_compression="powersgd", zero=2)
    assert Recipe.from_dict(Recipe(grad_compression="powersgd", powersgd_rank=8).to_dict()).powersgd_rank == 8


@pytest.mark.parametrize("kind, world, zero, precision, needle", [
    ("bf16", 1, 0, "fp32", "--nproc-per-node 2 or more"),
    ("powersgd", 2, 3, "fp32", "PowerSGD DDP communication hook"),
    ("fp16", 2, 0, "bf16", "without a loss scale"),
    ("fp16", 2, 0, "fp32", "flush to zero"),
])
def test_refusals(kind, world, zero, precision, needle):
    reason = compression_refusal(Recipe(precision=precision, grad_compression=kind), world_size=world, zero=zero)
    assert reason is not None and needle in reason


def test_what_can_run():
    for kind, precision, zero in [("none", "fp32", 0), ("bf16", "fp32", 0), ("bf16", "bf16", 3), ("fp16", "fp16", 0),
                                  ("powersgd", "fp32", 0)]:
        assert compression_refusal(Recipe(precision=precision, grad_compression=kind), world_size=2, zero=zero) is None


# ---- the bench matrix ---------------------------------------------------------------------------------------
def test_matrix_runs_each_compression_and_names_it():
    m = Matrix(precisions=("fp32", "bf16"), grad_compressions=("none", "bf16", "powersgd"), powersgd_rank=2,
               powersgd_error_feedback=False)
    names = [v.name for v in m.variants()]
    assert names == ["fp32", "fp32+bf16-grads", "fp32+powersgd-r2-no-ef", "bf16", "bf16+bf16-grads",
                     "bf16+powersgd-r2-no-ef"]
    psgd = m.variants()[2]
    assert psgd.recipe(training=True).powersgd_rank == 2 and m.variants()[1].powersgd_rank == 4  # only on powersgd
    assert psgd.without_compression().name == "fp32" and not psgd.is_reference
    assert Variant.from_dict(psgd.to_dict()) == psgd
    assert Matrix().variants() == [Variant()]  # no compression flags: the matrix as before
    with pytest.raises(ValueError, match="powersgd_rank=2 applies"):
        Matrix(powersgd_rank=2)
    # the start iteration before the switches: '-no-warm-start1' read as one flag
    late = Matrix(grad_compressions=("powersgd",), powersgd_start_iter=1, powersgd_error_feedback=False,
                  powersgd_warm_start=False)
    assert [v.name for v in late.variants()] == ["fp32+powersgd-r4-start1-no-ef-no-warm"]


def test_the_single_device_transform_never_sees_compression():
    v = Variant(grad_compression="powersgd")
    assert single_device(v.recipe(training=True)) == Recipe()
    assert "--nproc-per-node 2" in device_refusal(v, "cpu", training=True)
    assert device_refusal(v, "cpu", training=True, world_size=2) is None
    assert "PowerSGD" in device_refusal(v, "cpu", training=True, world_size=2, zero=3)


# ---- the gate ---------------------------------------------------------------------------------------------------
REFERENCE = [6.2, 5.5, 4.9, 4.5, 4.2, 4.0, 3.9, 3.8, 3.75, 3.7]


def test_gate_passes_within_two_percent():
    gate = loss_gate(REFERENCE, [x * 1.01 for x in REFERENCE], reference_eval=3.70, candidate_eval=3.74, name="bf16")
    assert gate.passed and gate.ratio == pytest.approx(3.74 / 3.70) and "passes" in gate.message
    assert gate.progress == pytest.approx((6.2 - 3.74) / (6.2 - 3.70))
    assert "evaluation loss" in gate.criterion


def test_gate_fails_and_says_so():
    gate = loss_gate(REFERENCE, [6.2, 6.1, 6.0, 5.9, 5.9, 5.8, 5.8, 5.7, 5.7, 5.7], reference_eval=3.7,
                     candidate_eval=5.7, name="powersgd-r1")
    assert not gate.passed and "FAILS the quality gate" in gate.message and gate.ratio > 1.5


def test_gate_without_an_evaluation_uses_the_last_steps():
    gate = loss_gate(REFERENCE, [*REFERENCE[:-1], 3.9])
    assert gate.final_loss == 3.9 and gate.ratio == pytest.approx(3.9 / 3.7) and not gate.passed


def test_divergence_fails_outright():
    gate = loss_gate(REFERENCE, [*REFERENCE[:4], math.inf, math.nan, *REFERENCE[6:]], reference_eval=3.7,
                     candidate_eval=math.nan)
    assert not gate.passed and gate.final_loss is None and gate.diverged_at_step == 5 and "diverged" in gate.message
    # a diverged reference judges nothing: inconclusive (it raised on rank 0, and the run lost every measurement)
    gate = loss_gate([1.0, math.inf, math.nan], [1.0] * 3, name="bf16")
    assert not gate.passed and gate.inconclusive and gate.reference_final_loss is None and gate.ratio is None
    assert gate.message.startswith("bf16: the quality gate is inconclusive — the uncompressed run's loss was not "
                                   "finite") and gate.message.endswith("lower --lr")
    assert loss_gate([math.nan] * 3, [1.0] * 3).first_loss is None


def test_gate_is_inconclusive_when_the_reference_did_not_learn_or_blew_up():
    """It passed (or failed) with only a caution: ResNet-50 at lr 0.1 went from 8 to 3.9e7 and bf16 still read
    'FAILS 9.08×'; a reference that barely moved made every compression pass."""
    flat = [6.2, 6.19, 6.18, 6.18]
    gate = loss_gate(flat, flat, reference_eval=6.18, candidate_eval=6.18, name="bf16")
    assert not gate.passed and gate.inconclusive
    assert gate.message.startswith("bf16: the quality gate is inconclusive — the uncompressed run's loss fell "
                                   "only 0.3% (6.2 → 6.18) in 4 quality steps")
    assert "raise --lr or --quality-steps" in gate.message
    rising = [8.0, 9.0, 3.9e7, 3.9e7]
    gate = loss_gate(rising, [8.0, 9.0, 3.0e8, 3.0e8], reference_eval=3.9e7, candidate_eval=3.5e8, name="bf16")
    assert not gate.passed and gate.inconclusive and "rose" in gate.message and "lower --lr" in gate.message
    assert not loss_gate(REFERENCE, REFERENCE, reference_eval=3.7, candidate_eval=3.7).inconclusive


# ---- the quality task --------------------------------------------------------------------------------------------
def test_markov_task_is_deterministic_and_learnable():
    a = markov_tokens(64, 2, 16, seed=0, step=3, rank=1)
    assert (a == markov_tokens(64, 2, 16, seed=0, step=3, rank=1)).all()
    assert not (a == markov_tokens(64, 2, 16, seed=0, step=3, rank=0)).all()  # ranks draw their own batches
    # every token is followed by one of its SUCCESSORS successors (one table for all steps and ranks)
    follows: dict[int, set[int]] = {}
    for step in range(20):
        ids = markov_tokens(64, 4, 16, seed=0, step=step, rank=step % 2)
        for row in ids.tolist():
            for x, y in itertools.pairwise(row):
                follows.setdefault(x, set()).add(y)
    assert max(len(s) for s in follows.values()) <= SUCCESSORS


def test_image_task_and_rank_mean():
    x, y = template_images(10, 8, 3, 16, seed=0, step=0, rank=0)
    assert x.shape == (8, 3, 16, 16) and int(y.min()) >= 0 and int(y.max()) < 10
    assert mean_over_ranks([{"losses": [2.0, 1.0], "eval_loss": 1.0, "lead_in_steps": 3},
                            {"losses": [4.0, 3.0], "eval_loss": 2.0, "lead_in_steps": 3}]) == \
        {"losses": [3.0, 2.0], "eval_loss": 1.5, "lead_in_steps": 3}  # the lead-in every rank trained first
    assert mean_over_ranks([{"losses": [1.0], "eval_loss": 1.0}])["lead_in_steps"] == 0  # none given: none
