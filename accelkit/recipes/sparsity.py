"""2:4 semi-structured sparsity: in every group of 4 weights along the input dim keep the 2 largest,
then store them with ``torch.sparse.to_sparse_semi_structured`` so sparse tensor cores run the GEMM.
CUDA SM80+ only, fp16/bf16 weights, inference only; layers whose shape the kernels reject stay dense."""

from __future__ import annotations

import torch

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, Technique


def prune_2_of_4(weight: torch.Tensor) -> torch.Tensor:
    """Zero the 2 smallest-magnitude values in each group of 4 along the last dim; shape unchanged."""
    out_features, in_features = weight.shape
    groups = weight.reshape(out_features, in_features // 4, 4)
    keep = groups.abs().topk(2, dim=-1).indices
    mask = torch.zeros_like(groups, dtype=torch.bool).scatter_(-1, keep, True)
    return (groups * mask).reshape(out_features, in_features)


class SemiStructuredSparsity(Technique):
    """sparsity = '2:4'."""

    name = "sparsity-2:4"

    def wanted(self, recipe: Recipe) -> bool:
        return recipe.sparsity == "2:4"

    def refusal(self, recipe: Recipe, ctx: ApplyContext) -> str | None:
        if ctx.training:
            # the sparse weights are frozen Parameters (a semi-structured tensor has no dense gradient to step):
            # a training run would update none of the sparsified layers
            return ("sparsity='2:4' is inference-only (the pruned weights are stored frozen, so training would update "
                    "none of those layers); drop it for training, or prune a trained model for inference")
        if not ctx.device.sm_at_least(8, 0):
            return (f"sparsity='2:4' needs sparse tensor cores (NVIDIA SM80+ GPU); {ctx.device.name} has none "
                    "— drop sparsity or run on an A100/H100-class GPU")
        if recipe.precision not in ("bf16", "fp16"):
            return "sparsity='2:4' kernels take fp16/bf16 weights; set precision='bf16' or 'fp16'"
        return None

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        from torch.sparse import to_sparse_semi_structured

        dtype = torch.bfloat16 if recipe.precision == "bf16" else torch.float16
        count = 0
        for module in model.modules():
            if isinstance(module, torch.nn.Linear) and module.in_features % 64 == 0 and module.out_features % 64 == 0:
                dense = prune_2_of_4(module.weight.detach().to(dtype))
                module.weight = torch.nn.Parameter(to_sparse_semi_structured(dense), requires_grad=False)
                if module.bias is not None:
                    module.bias = torch.nn.Parameter(module.bias.detach().to(dtype), requires_grad=False)
                count += 1
        ctx.notes.append(f"2:4 sparsity on {count} linear layers")
        return model
