"""CUDA caching-allocator warm-up: run one step, read the peak, reserve that much once and free it, so
the first measured steps do not pay for cudaMalloc and the pool is not fragmented by growth."""

from __future__ import annotations

import torch

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, Technique


class WarmAllocator(Technique):
    """warm_allocator = True."""

    name = "warm-allocator"

    def wanted(self, recipe: Recipe) -> bool:
        return recipe.warm_allocator

    def refusal(self, recipe: Recipe, ctx: ApplyContext) -> str | None:
        if not ctx.device.is_cuda:
            return "warm_allocator=True warms the CUDA caching allocator; this is a CPU run — drop it"
        if ctx.example_inputs is None:
            return "warm_allocator=True needs example_inputs to run one step and measure the peak"
        return None

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        # the model's GPU, not the current one: with --device cuda:1 the current device is still cuda:0
        device = next((p.device for p in model.parameters() if p.device.type == "cuda"), torch.device("cuda"))
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        with torch.set_grad_enabled(ctx.training):
            out = model(*ctx.example_inputs)  # type: ignore[misc]
            if ctx.training:
                loss = (out if isinstance(out, torch.Tensor) else out[0]).float().sum()
                loss.backward()
                model.zero_grad(set_to_none=True)
        del out
        torch.cuda.synchronize(device)
        peak = torch.cuda.max_memory_allocated(device) - before
        block = torch.empty(max(peak, 1), dtype=torch.uint8, device=device)
        del block  # freed to the cache, which keeps the segment reserved
        ctx.notes.append(f"reserved {peak / 2**20:.0f} MiB in the caching allocator of {device}")
        return model
