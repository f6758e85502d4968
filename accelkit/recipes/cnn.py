"""CNN inference transforms: Conv-BN folding (the BatchNorm's affine map merged into the conv weights)
and channels_last (NHWC) memory format, which oneDNN and cuDNN convolutions run faster in."""

from __future__ import annotations

import itertools

import torch

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, Technique


def fold_conv_bn(conv: torch.nn.Conv2d, bn: torch.nn.BatchNorm2d) -> torch.nn.Conv2d:
    """A conv equal to bn(conv(x)) in eval mode: w' = w·γ/σ, b' = (b − μ)·γ/σ + β, σ = sqrt(var + eps)."""
    # torch types a conv's kernel_size/stride/padding/dilation as tuple[int, ...] but takes tuple[int, int]
    fused = torch.nn.Conv2d(
        conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,  # type: ignore[arg-type]
        conv.dilation, conv.groups, bias=True, padding_mode=conv.padding_mode,  # type: ignore[arg-type]
    ).to(device=conv.weight.device, dtype=conv.weight.dtype)
    mean, var = bn.running_mean, bn.running_var
    assert mean is not None and var is not None, "fold_all only folds BatchNorms that track running stats"
    scale = bn.weight / torch.sqrt(var + bn.eps)  # (C_out,)
    with torch.no_grad():
        fused.weight.copy_(conv.weight * scale.reshape(-1, 1, 1, 1))
        bias = conv.bias if conv.bias is not None else torch.zeros_like(mean)
        assert fused.bias is not None
        fused.bias.copy_((bias - mean) * scale + bn.bias)
    return fused


def conv_bn_pairs(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, str]]:
    """(parent, conv name, bn name) of every Conv2d directly followed by a BatchNorm2d that tracks running stats.

    "Followed" means consecutive children in registration order, which is how Sequential blocks and
    transformers' ResNet conv layers (convolution, normalization, activation) are written.
    """
    pairs = []
    for parent in model.modules():
        for first, second in itertools.pairwise(list(parent._modules)):
            conv, bn = parent._modules[first], parent._modules[second]
            if isinstance(conv, torch.nn.Conv2d) and isinstance(bn, torch.nn.BatchNorm2d) and bn.track_running_stats:
                pairs.append((parent, first, second))
    return pairs


def fold_all(model: torch.nn.Module) -> int:
    """Fold every pair :func:`conv_bn_pairs` finds; returns the count."""
    pairs = conv_bn_pairs(model)
    for parent, first, second in pairs:
        conv, bn = parent._modules[first], parent._modules[second]
        parent._modules[first] = fold_conv_bn(conv, bn)  # type: ignore[arg-type]  # conv_bn_pairs checked the types
        parent._modules[second] = torch.nn.Identity()
    return len(pairs)


class FoldBatchNorm(Technique):
    """fold_bn = True (inference only)."""

    name = "fold-bn"

    def wanted(self, recipe: Recipe) -> bool:
        return recipe.fold_bn

    def refusal(self, recipe: Recipe, ctx: ApplyContext) -> str | None:
        if ctx.training:
            return "fold_bn=True is for inference: folded BatchNorm no longer normalises batches; drop it for training"
        return None

    def model_refusal(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> str | None:
        if not conv_bn_pairs(model):
            return f"fold_bn=True found no Conv2d followed by BatchNorm2d in {type(model).__name__} — drop it"
        return None

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        count = fold_all(model.eval())
        ctx.notes.append(f"folded {count} Conv-BN pairs")
        return model


class ChannelsLast(Technique):
    """channels_last = True: NHWC weights; the workload converts its inputs."""

    name = "channels-last"

    def wanted(self, recipe: Recipe) -> bool:
        return recipe.channels_last

    def model_refusal(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> str | None:
        if not any(isinstance(m, torch.nn.Conv2d) for m in model.modules()):
            return f"channels_last=True helps convolutions; {type(model).__name__} has none — drop it"
        return None

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        ctx.notes.append("channels_last memory format")
        return model.to(memory_format=torch.channels_last)  # type: ignore[call-overload,no-any-return]  # Module.to takes it
