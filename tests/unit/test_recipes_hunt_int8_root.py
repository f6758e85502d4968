"""torch.ao's quantize_dynamic leaves a model that is itself an nn.Linear unconverted: the variant measured as int8
was the fp32 model under that name (only a note said '0 of 1 Linear layers'). It is refused; wrapped, it converts."""

import pytest
import torch

from accelkit.core import Recipe
from accelkit.recipes.apply import apply
from accelkit.recipes.base import RecipeRefused


def test_int8_dynamic_that_converts_no_linear_is_refused_and_a_wrapped_one_converts():
    recipe = Recipe(quantization="int8-dynamic")
    with pytest.raises(RecipeRefused, match=r"converted none of Linear's 1 Linear layer\(s\).*torch\.nn\.Sequential"):
        apply(torch.nn.Linear(64, 64), recipe, device="cpu", training=False)
    wrapped = apply(torch.nn.Sequential(torch.nn.Linear(64, 64)), recipe, device="cpu", training=False)
    assert type(wrapped[0]).__module__.startswith("torch.ao.nn.quantized")
