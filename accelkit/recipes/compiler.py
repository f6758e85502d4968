"""torch.compile with its modes, in place (``nn.Module.compile``: the model's own calls, ``generate`` included, run
compiled, and its state_dict keys do not change); ``reduce-overhead`` (CUDA graphs) only on CUDA. Under
recompute='budget' the compiled forward runs with functorch's ``activation_memory_budget`` patched for the
call (compilation happens inside it), so no global config is left changed."""

from __future__ import annotations

from typing import Any

import torch

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, Technique, keep_state_dict_keys
from accelkit.recipes.checkpointing import DEFAULT_BUDGET
from accelkit.recipes.precision import AutocastModule


class _BudgetedModule(torch.nn.Module):
    """Runs the compiled ``inner`` with functorch's ``activation_memory_budget`` patched for the call."""

    def __init__(self, inner: torch.nn.Module, budget: float):
        super().__init__()
        self.inner, self.budget = inner, budget
        self.training = inner.training  # the model's mode, as AutocastModule keeps it
        keep_state_dict_keys(self, "inner.")

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        import torch._functorch.config as functorch_config

        with functorch_config.patch(activation_memory_budget=self.budget):
            return self.inner(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:  # reach through to the model's attributes (config, generate …), as the other wrappers
            return getattr(super().__getattr__("inner"), name)


class Compile(Technique):
    """compile = default | reduce-overhead | max-autotune | max-autotune-no-cudagraphs."""

    name = "compile"

    def wanted(self, recipe: Recipe) -> bool:
        return recipe.compile is not False

    def refusal(self, recipe: Recipe, ctx: ApplyContext) -> str | None:
        if recipe.compile == "reduce-overhead" and not ctx.device.is_cuda:
            return ("compile='reduce-overhead' uses CUDA graphs and needs a CUDA device; "
                    "use compile='default' or 'max-autotune-no-cudagraphs' on a CPU")
        return None

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        assert recipe.compile is not False  # wanted() said so
        # in place (nn.Module.compile), on the model inside the autocast wrapper: every call of the model — its own
        # generate() included — runs compiled, and its state_dict keys stay its own. torch.compile(model) returned
        # an OptimizedModule whose generate was the eager model's (found in review), and keys under "_orig_mod."
        inner = model.inner if isinstance(model, AutocastModule) else model
        inner.compile(mode=recipe.compile)
        ctx.notes.append(f"torch.compile mode={recipe.compile}")
        if recipe.recompute == "budget":
            return _BudgetedModule(model, DEFAULT_BUDGET)
        return model
