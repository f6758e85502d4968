"""torch.compile with its modes; ``reduce-overhead`` (CUDA graphs) only on CUDA. Under
recompute='budget' the compiled forward runs with functorch's ``activation_memory_budget`` patched for the
call (compilation happens inside it), so no global config is left changed."""

from __future__ import annotations

from typing import Any

import torch

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, Technique
from accelkit.recipes.checkpointing import DEFAULT_BUDGET


class _BudgetedModule(torch.nn.Module):
    """Runs the compiled ``inner`` with functorch's ``activation_memory_budget`` patched for the call."""

    def __init__(self, inner: torch.nn.Module, budget: float):
        super().__init__()
        self.inner, self.budget = inner, budget

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
        compiled: torch.nn.Module = torch.compile(model, mode=recipe.compile)  # type: ignore[assignment]  # a module in, an OptimizedModule out
        ctx.notes.append(f"torch.compile mode={recipe.compile}")
        if recipe.recompute == "budget":
            return _BudgetedModule(compiled, DEFAULT_BUDGET)
        return compiled
