"""recipes.apply on one module refuses a Recipe asking for gradient compression (a DDP communication hook that
accelkit.distributed registers), as it refuses kv_cache_dtype and offload, instead of dropping it without a word."""
import pytest
import torch

from accelkit.core import Recipe
from accelkit.recipes import apply, refusal
from accelkit.recipes.base import RecipeRefused


@pytest.mark.parametrize("kind", ["bf16", "fp16", "powersgd"])
def test_apply_refuses_grad_compression_and_leaves_the_model(kind: str) -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 16)).train()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    recipe = Recipe(precision="bf16", grad_compression=kind)
    with pytest.raises(RecipeRefused, match=f"grad_compression='{kind}'.*accelkit.distributed.*'none'"):
        apply(model, recipe, device="cpu")
    assert isinstance(model[0], torch.nn.Linear) and model[0].weight.dtype == torch.float32
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert "grad_compression='" + kind + "'" in str(refusal(recipe, "cpu", training=True))


def test_single_device_recipe_still_applies() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(16, 16)).train()
    notes: list[str] = []
    apply(model, Recipe(precision="bf16"), device="cpu", notes=notes)
    assert notes == ["autocast bf16"]
