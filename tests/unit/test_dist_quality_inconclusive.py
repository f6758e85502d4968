"""The distributed quality check is inconclusive when its uncompressed reference cannot judge: a loss that barely
fell, rose (blew up) or was not finite — pure Python, no launch."""

import math

from accelkit.recipes.grad_compression import MIN_PROGRESS_ALLOWANCES, inconclusive_reason


def test_a_reference_that_barely_learned_is_inconclusive_and_names_the_flags():
    # tiny-llama at lr 1e-4, 50 steps: 6.251 → 6.168 (1.3%), allowance 1% → needs ≥ 5 × 1% of the final loss
    why = inconclusive_reason({"losses": [6.251] + [6.2] * 49, "eval_loss": 6.168}, 0.01,
                              allowance_flag="--max-accuracy-drop")
    assert why is not None and "fell only 1.3%" in why and "50 quality steps" in why
    assert "raise --lr or --quality-steps" in why and "--max-accuracy-drop 0.01" in why


def test_a_reference_whose_loss_rose_or_diverged_is_inconclusive():
    # ResNet-50 at lr 0.1, batch 2: the loss went from 8 to 3.9e7
    rose = inconclusive_reason({"losses": [8.0, 50.0, 1e6], "eval_loss": 3.9e7}, 0.02)
    assert rose is not None and "rose" in rose and "lower --lr" in rose
    diverged = inconclusive_reason({"losses": [8.0, math.nan], "eval_loss": math.nan}, 0.02)
    assert diverged is not None and "not finite" in diverged and "lower --lr" in diverged


def test_a_reference_that_learned_enough_can_judge():
    # lr 3e-3: 6.19 → 3.87 (37%); and just above the bar
    assert inconclusive_reason({"losses": [6.19, 5.0], "eval_loss": 3.87}, 0.02) is None
    final = 4.0
    first = final + MIN_PROGRESS_ALLOWANCES * 0.02 * final * 1.01
    assert inconclusive_reason({"losses": [first], "eval_loss": final}, 0.02) is None
    assert inconclusive_reason({"losses": [final + MIN_PROGRESS_ALLOWANCES * 0.02 * final * 0.99],
                                "eval_loss": final}, 0.02) is not None
