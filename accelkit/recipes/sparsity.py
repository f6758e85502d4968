"""2:4 semi-structured sparsity: in every group of 4 weights along the input dim keep the 2 largest,
then store them with ``torch.sparse.to_sparse_semi_structured`` so sparse tensor cores run the GEMM.
CUDA SM80+ only, fp16/bf16 weights, inference only; layers whose shape the kernels reject stay dense."""

from __future__ import annotations

import torch

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, Technique

#: both dims of a Linear must divide by this for the semi-structured kernels; other layers stay dense
SPARSE_MULTIPLE = 64


def _sparse_shape(linear: torch.nn.Linear) -> bool:
    return linear.in_features % SPARSE_MULTIPLE == 0 and linear.out_features % SPARSE_MULTIPLE == 0


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

    def model_refusal(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> str | None:
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        if not any(_sparse_shape(m) for m in linears):
            return (f"sparsity='2:4' found no Linear with both dims multiples of {SPARSE_MULTIPLE} (the sparse kernels' "
                    f"tile) among the {len(linears)} of {type(model).__name__}; drop sparsity")
        return None

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        from torch.sparse import to_sparse_semi_structured

        dtype = torch.bfloat16 if recipe.precision == "bf16" else torch.float16
        linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
        count = 0
        for module in linears:
            if _sparse_shape(module):
                dense = prune_2_of_4(module.weight.detach().to(dtype))
                module.weight = torch.nn.Parameter(to_sparse_semi_structured(dense), requires_grad=False)
                if module.bias is not None:
                    module.bias = torch.nn.Parameter(module.bias.detach().to(dtype), requires_grad=False)
                count += 1
        skipped = len(linears) - count
        ctx.notes.append(f"2:4 sparsity on {count} of {len(linears)} linear layers" + (
            f"; {skipped} kept dense (dims not multiples of {SPARSE_MULTIPLE})" if skipped else ""))
        return model
