"""A recipe applied to a model an earlier apply already changed: refused in one line, never a silent override
(a second precision losing to the first autocast) nor an error deep in torch/torchao; a misspelt ``without``."""

import copy

import pytest
import torch

from accelkit.core import Recipe
from accelkit.models import get_preset
from accelkit.models.build import build_model
from accelkit.recipes import RecipeRefused, apply
from accelkit.recipes.checkpointing import CheckpointedBlock


class Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(3))

    def forward(self, x):
        for block in self.blocks:
            x = torch.relu(block(x))
        return x


def _mlp(training=False):
    torch.manual_seed(0)
    return Mlp().train(training)


def test_a_second_precision_is_refused_not_overridden_by_the_first():
    model = apply(_mlp(), Recipe(precision="bf16"))
    assert model.training is False  # the wrapper keeps the model's mode: apply reads it for the next recipe
    with pytest.raises(RecipeRefused, match=r"precision='fp16': Mlp already runs under bf16 autocast"):
        apply(model, Recipe(precision="fp16"))  # it ran bf16 without a word


def test_int8_dynamic_and_bf16_in_two_applies_are_refused_as_in_one():
    with pytest.raises(RecipeRefused, match=r"already runs under bf16 autocast"):
        apply(apply(_mlp(), Recipe(precision="bf16")), Recipe(quantization="int8-dynamic"))
    quantized = apply(_mlp(), Recipe(quantization="int8-dynamic"))
    with pytest.raises(RecipeRefused, match=r"precision='bf16': Mlp holds torch.ao int8 dynamic-quantized Linears"):
        apply(quantized, Recipe(precision="bf16"))  # the forward raised "expected scalar type Float"
    quantized(torch.randn(2, 32))  # and the model still runs as it was


@pytest.mark.parametrize("quantization", ["int8-dynamic", "int8-weight"])
def test_quantizing_twice_is_refused(quantization):
    model = apply(_mlp(), Recipe(quantization=quantization))
    with pytest.raises(RecipeRefused, match=rf"quantization='{quantization}': Mlp is already quantized \(3 layers, "
                                            r"e\.g\. blocks\.0: "):
        apply(model, Recipe(quantization=quantization))


def test_checkpointing_twice_or_over_transformers_own_is_refused():
    model = apply(_mlp(training=True), Recipe(recompute="full"))
    with pytest.raises(RecipeRefused, match=r"recompute='selective': Mlp already has 3 checkpointed blocks"):
        apply(model, Recipe(recompute="selective"))
    assert all(type(b.block) is torch.nn.Linear for b in model.blocks)  # one wrapper each, not two
    llama = build_model(get_preset("tiny-llama"), seed=0).train()
    llama.gradient_checkpointing_enable()
    with pytest.raises(RecipeRefused, match=r"already checkpoints its layers itself .*gradient_checkpointing_disable"):
        apply(llama, Recipe(recompute="selective"))
    assert not any(isinstance(m, CheckpointedBlock) for m in llama.modules())


def test_fp8_training_twice_is_refused():
    model = apply(_mlp(training=True), Recipe(precision="fp8"), emulate=True)
    with pytest.raises(RecipeRefused, match=r"precision='fp8': Mlp already has 3 Float8Linear layers"):
        apply(model.inner, Recipe(precision="fp8"), emulate=True)  # a TypeError deep in the swap


def test_without_names_a_technique():
    model = _mlp()
    with pytest.raises(ValueError, match=r"without names 'mixed_precision', not a technique; .*mixed-precision"):
        apply(copy.deepcopy(model), Recipe(precision="bf16"), without=("mixed_precision",))  # autocast stayed
    with pytest.raises(ValueError, match=r"is a str; pass a tuple"):
        apply(copy.deepcopy(model), Recipe(precision="bf16"), without="mixed-precision")
    assert apply(model, Recipe(precision="bf16"), without=("mixed-precision",)) is model
