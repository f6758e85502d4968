"""CNN inference transforms: Conv-BN folding (the BatchNorm's affine map merged into the conv weights)
and channels_last (NHWC) memory format, which oneDNN and cuDNN convolutions run faster in."""

from __future__ import annotations

import inspect
from collections import Counter

import torch
import torch.fx

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, Technique


def fold_conv_bn(conv: torch.nn.Conv2d, bn: torch.nn.BatchNorm2d) -> torch.nn.Conv2d:
    """A conv equal to bn(conv(x)) in eval mode: w' = w·γ/σ, b' = (b − μ)·γ/σ + β, σ = sqrt(var + eps); a BatchNorm
    without affine parameters (``affine=False``) has γ = 1, β = 0."""
    # torch types a conv's kernel_size/stride/padding/dilation as tuple[int, ...] but takes tuple[int, int]
    fused = torch.nn.Conv2d(
        conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,  # type: ignore[arg-type]
        conv.dilation, conv.groups, bias=True, padding_mode=conv.padding_mode,  # type: ignore[arg-type]
    ).to(device=conv.weight.device, dtype=conv.weight.dtype)
    mean, var = bn.running_mean, bn.running_var
    assert mean is not None and var is not None, "fold_all only folds BatchNorms that track running stats"
    gamma = bn.weight if bn.weight is not None else torch.ones_like(var)
    beta = bn.bias if bn.bias is not None else torch.zeros_like(mean)
    scale = gamma / torch.sqrt(var + bn.eps)  # (C_out,)
    with torch.no_grad():
        fused.weight.copy_(conv.weight * scale.reshape(-1, 1, 1, 1))
        bias = conv.bias if conv.bias is not None else torch.zeros_like(mean)
        assert fused.bias is not None
        fused.bias.copy_((bias - mean) * scale + beta)
    return fused


class _ChildCalls(torch.fx.Tracer):
    """Traces one module's own forward with every submodule an opaque call: the data flow between its children."""

    def is_leaf_module(self, m: torch.nn.Module, module_qualified_name: str) -> bool:
        return True


def _foldable(conv: object, bn: object) -> bool:
    # exact types: a subclass (a LoRA conv, a frozen or synced norm) may compute something else
    return (type(conv) is torch.nn.Conv2d and type(bn) is torch.nn.BatchNorm2d and bn.track_running_stats
            and bn.running_mean is not None)


def _traced_pairs(parent: torch.nn.Module) -> list[tuple[str, str]]:
    """(conv, bn) child names of ``parent`` where its forward feeds the conv's output to the BatchNorm and to nothing
    else, each called once; none when its forward cannot be traced (control flow on values: not proven, not
    folded). Arguments with a default are traced at it, as a call that omits them runs."""
    concrete = {name: p.default for name, p in inspect.signature(parent.forward).parameters.items()
                if p.default is not inspect.Parameter.empty}
    try:
        graph = _ChildCalls().trace(parent, concrete_args=concrete or None)
    except Exception:  # fx raises many kinds (TraceError, TypeError, NotImplementedError …)
        return []
    calls = Counter(node.target for node in graph.nodes if node.op == "call_module")
    pairs = []
    for node in graph.nodes:
        source = node.args[0] if node.op == "call_module" and len(node.args) == 1 and not node.kwargs else None
        if not (isinstance(source, torch.fx.Node) and source.op == "call_module" and len(source.users) == 1):
            continue
        conv, bn = str(source.target), str(node.target)
        if calls[conv] == calls[bn] == 1 and _foldable(parent._modules.get(conv), parent._modules.get(bn)):
            pairs.append((conv, bn))
    return pairs


def conv_bn_pairs(model: torch.nn.Module) -> list[tuple[torch.nn.Module, str, str]]:
    """(parent, conv name, bn name) of every Conv2d whose output goes to a BatchNorm2d (tracking running stats) of
    the same parent and nowhere else — read from the parent's forward traced with torch.fx, as torch's own Conv-BN
    fuser does. Consecutive children in registration order were taken before: a BatchNorm applied to conv(x) + x
    was folded into the conv (found in review), changing the output."""
    pairs = []
    for parent in model.modules():
        children = list(parent._modules.values())
        if any(type(m) is torch.nn.Conv2d for m in children) and any(type(m) is torch.nn.BatchNorm2d for m in children):
            pairs += [(parent, conv, bn) for conv, bn in _traced_pairs(parent)]
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
            return (f"fold_bn=True found no Conv2d whose output goes only to a BatchNorm2d in {type(model).__name__} "
                    "(a BatchNorm of anything else, such as conv(x) + x, cannot be folded) — drop it")
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
