"""A model a recipe was applied to saves and loads the state_dict keys of the model as built, and its generate()
runs under the recipe.

The recompute wrapper added ``.block.``, the autocast wrapper ``inner.``, fp8 training's weight cast
``.parametrizations.weight.original``: ``save_pretrained`` after training wrote keys the architecture lacks, and
``from_pretrained`` re-initialised them — the training was lost. And ``generate`` on the autocast wrapper (or on
compile's OptimizedModule) was the inner model's own, calling the eager fp32 forward."""

import io

import pytest
import torch

from accelkit.core import Recipe
from accelkit.models import get_preset
from accelkit.models.build import build_model
from accelkit.recipes import apply

TOKENS = torch.randint(4, 512, (2, 16), generator=torch.Generator().manual_seed(0))

RECIPES = [
    (Recipe(recompute="full"), {}),
    (Recipe(precision="bf16", recompute="selective"), {}),
    (Recipe(precision="bf16"), {}),
    (Recipe(precision="fp8", recompute="full"), {"emulate": True}),
    (Recipe(compile="default"), {}),  # compiled in place: no "_orig_mod." (nothing is compiled until a call)
]


def _llama(seed: int = 0) -> torch.nn.Module:
    return build_model(get_preset("tiny-llama"), seed=seed).train()


def _trained(recipe: Recipe, kwargs: dict) -> tuple[torch.nn.Module, set[str]]:
    """The model with ``recipe`` applied after one SGD step (its weights no longer the initial ones), and the
    state_dict keys of the model as built."""
    model = _llama()
    keys = set(model.state_dict())
    model = apply(model, recipe, **kwargs)
    if recipe.compile is False:  # (a compiled step would compile: slow, and not what is tested here)
        model(input_ids=TOKENS, labels=TOKENS).loss.backward()
        torch.optim.SGD(model.parameters(), lr=0.1).step()
    return model, keys


@pytest.mark.parametrize(("recipe", "kwargs"), RECIPES, ids=["full", "bf16+selective", "bf16", "fp8+full", "compile"])
def test_the_state_dict_keeps_the_keys_of_the_model_as_built(recipe, kwargs):
    model, keys = _trained(recipe, kwargs)
    saved = model.state_dict()
    assert set(saved) == keys
    # strictly into the model as built (no missing, no unexpected key), with the trained values
    fresh = _llama(seed=1)
    fresh.load_state_dict(saved, strict=True)
    for key, value in fresh.state_dict().items():
        assert torch.equal(value, saved[key]), key
    # and strictly back into a model the recipe was applied to, from a checkpoint of the model as built
    again = apply(_llama(seed=2), recipe, **kwargs)
    again.load_state_dict(fresh.state_dict(), strict=True)
    for key, value in again.state_dict().items():
        assert torch.equal(value, saved[key]), key


def test_save_pretrained_after_training_loads_with_from_pretrained(tmp_path):
    model, _ = _trained(Recipe(precision="fp8", recompute="full"), {"emulate": True})
    model.save_pretrained(tmp_path)  # reached through the autocast wrapper
    reloaded, info = type(model.inner).from_pretrained(tmp_path, output_loading_info=True)
    assert not info["missing_keys"] and not info["unexpected_keys"], info
    name = "model.layers.0.mlp.down_proj.weight"
    assert torch.equal(reloaded.state_dict()[name], model.state_dict()[name])
    assert not torch.equal(reloaded.state_dict()[name], _llama().state_dict()[name])  # the trained weight


def test_a_wrapped_model_still_pickles():
    """The key-renaming hooks are objects, not closures: torch.save of the whole module keeps working."""
    model = apply(_llama(), Recipe(precision="bf16", recompute="full"))
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    loaded = torch.load(buffer, weights_only=False)
    assert set(loaded.state_dict()) == set(model.state_dict())


def test_generate_runs_under_the_recipes_autocast():
    model = _llama().eval()
    seen: list[torch.dtype] = []
    model.lm_head.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    wrapped = apply(model, Recipe(precision="bf16"))
    wrapped.generate(TOKENS[:1, :8], max_new_tokens=3, do_sample=False)
    assert len(seen) == 3 and set(seen) == {torch.bfloat16}, seen


def test_compile_is_in_place_so_generate_calls_the_compiled_model():
    """torch.compile(model) returned an OptimizedModule whose generate was the eager model's bound method: each of
    its calls of model(...) skipped the compiled graph. Compiled in place, model(...) is the compiled call."""
    model = _llama().eval()
    for recipe in (Recipe(compile="default"), Recipe(precision="bf16", compile="default")):
        applied = apply(model, recipe)
        inner = applied.inner if recipe.precision == "bf16" else applied
        assert inner is model and model._compiled_call_impl is not None  # generate's self(...) goes through it
