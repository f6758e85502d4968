"""tune gates a training recipe on its loss over the first steps, not only on one eval-mode forward before any step.

A recompute whose blocks got no gradient (its forward unchanged) passed the forward gate and could win while its
model did not train: its loss fell 36% as far as fp32's over the same steps, from the same weights on the same
data. Here that broken recompute runs through the bench as tune runs it, and its trial fails the training gate,
while the working recompute passes it."""

import pytest
import torch

from accelkit.bench.runner import BenchConfig, run_benchmark
from accelkit.bench.variants import Variant
from accelkit.bench.workloads import make_workload
from accelkit.core import Recipe
from accelkit.recipes import checkpointing
from accelkit.timing import LoopConfig
from accelkit.tune.search import MIN_TRAIN_PROGRESS, Trial, TuneConfig, _record_measured, training_gate

#: a few warm-up steps: the losses the bench records (first call + warm-up) are what the gate compares
LOOP = LoopConfig(warmup_iterations=3, warmup_time_s=0.0, min_iterations=1, min_time_s=0.0)


def _gated(recipe: Recipe) -> Trial:
    """fp32 and ``recipe`` measured by the bench on a tiny Llama's training step; ``recipe``'s trial as tune records
    it."""
    workload = make_workload("llm-train", {"model": "tiny-llama", "batch_size": 2, "seq_len": 32})
    trials = [Trial("fp32", Recipe()), Trial("candidate", recipe)]
    variants = [Variant(explicit_recipe=t.recipe, label=t.name) for t in trials]
    run = run_benchmark(workload, variants, BenchConfig(device="cpu", loop=LOOP, predict=False, save=False,
                                                        auto_probe=False))
    _record_measured(trials, run.to_json(), TuneConfig(device="cpu"), interrupted=False, logits=True, training=True)
    return trials[1]


def test_a_recompute_whose_blocks_get_no_gradient_fails_the_training_gate(monkeypatch):
    def no_gradient(self, *args, **kwargs):  # the forward is unchanged: the forward gate cannot tell
        with torch.no_grad():
            return self.block(*args, **kwargs)

    monkeypatch.setattr(checkpointing.CheckpointedBlock, "forward", no_gradient)
    broken = _gated(Recipe(recompute="full"))
    assert broken.gate["criterion"] in ("top1", "identical", "cosine")  # the forward gate alone would have passed
    assert broken.status == "measured" and not broken.passed
    training = broken.gate["training"]
    assert training["passed"] is False and training["candidate_value"] < MIN_TRAIN_PROGRESS
    assert broken.reason.startswith("training gate: its loss fell ") and "as far as fp32's" in broken.reason


def test_the_working_recompute_passes_it():
    working = _gated(Recipe(recompute="full"))
    assert working.passed, working.reason
    assert working.gate["training"]["candidate_value"] == pytest.approx(1.0, abs=0.05)


def test_the_gate_on_losses_recorded_on_this_cpu():
    """Losses of the first steps as the bench recorded them here (tiny Llama at lr 1e-4; tiny ResNet at 0.1)."""
    fp32 = [6.25355, 6.24155, 6.22961, 6.21776]
    assert training_gate(fp32, [6.25354, 6.24157, 6.22959, 6.21777])["passed"]  # bf16
    broken = training_gate(fp32, [6.25354, 6.24923, 6.24493, 6.24057])  # the recompute without gradients
    assert not broken["passed"] and broken["candidate_value"] == pytest.approx(0.36, abs=0.01)
    resnet_fp32, resnet_fp16 = [2.39314, 1.87004, 1.78991, 1.5176], [2.39253, 1.8578, 1.79277, 1.57287]
    assert training_gate(resnet_fp32, resnet_fp16)["candidate_value"] > 0.97  # its last loss alone: 94% of fp32's fall
    diverged = training_gate(fp32, [6.25355, float("nan"), 6.2, 6.1])
    assert not diverged["passed"] and diverged["reason"] == "its training loss was not finite at step 2 of 4"
    # what cannot tell: a single step; fp32 not learning (lr 0); a fall within the recipe's own first-loss offset
    for reference, losses in ((fp32[:1], fp32[:1]), ([6.0] * 4, [6.0] * 4), ([6.0, 5.99, 5.98], [6.01, 6.0, 5.99])):
        gate = training_gate(reference, losses)
        assert gate["passed"] is False and gate["inconclusive"] is True and "raise --" in gate["reason"], gate
