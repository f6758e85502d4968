"""``apply(model, recipe)``: the techniques a Recipe asks for, checked up front and applied in one order.

Order (each step sees the model the previous one produced):

1. fold_bn          — merge BatchNorm into convolutions (inference)
2. channels_last    — NHWC weights for convolutions
3. quantization     — int8/int4/fp8 weights (before autocast and compile, so compile sees the new ops); for fp8
                      the model is cast to bf16/fp16 first (fp8 GEMMs take 16-bit activations and biases)
4. sparsity         — 2:4 semi-structured weights
5. fp8 training     — Float8Linear swap (torchao.float8), fed bf16 copies of the fp32 master weights
6. checkpointing    — per-block full/selective recompute
7. mixed precision  — autocast wrapper (outermost numerics; bf16 around the fp8 linears for precision='fp8')
8. compile          — torch.compile of the model inside the autocast wrapper, in place
9. warm allocator   — one step to size the CUDA caching allocator, on the final model

Every wanted technique is checked before any is applied — against the recipe and device (``refusal``), then
against the model as given (``model_refusal``: no Conv-BN pair, no Linear the kernels take, no repeated blocks)
— so a refusal leaves the model untouched. No step changes what a later step looks for (folding keeps the
Linears; the fp8 swap keeps the block lists). The
parallel layout (dp/tp/pp, ZeRO) is not a single-device transform: ``accelkit.distributed`` applies it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, get_args

from accelkit.core import Recipe
from accelkit.core.recipe import Precision
from accelkit.core.recipe import Quantization as QuantizationName
from accelkit.recipes.allocator import WarmAllocator
from accelkit.recipes.base import ApplyContext, RecipeRefused, Technique, device_info
from accelkit.recipes.checkpointing import ActivationCheckpointing
from accelkit.recipes.cnn import ChannelsLast, FoldBatchNorm
from accelkit.recipes.compiler import Compile
from accelkit.recipes.fp8 import Float8Training
from accelkit.recipes.precision import MixedPrecision
from accelkit.recipes.quantize import Backend, Quantization
from accelkit.recipes.sparsity import SemiStructuredSparsity

if TYPE_CHECKING:
    import torch


def techniques(*, quant_backend: Backend = "auto", fp8_scaling: str = "tensorwise") -> list[Technique]:
    """The techniques in application order."""
    return [
        FoldBatchNorm(), ChannelsLast(), Quantization(quant_backend), SemiStructuredSparsity(),
        Float8Training(fp8_scaling), ActivationCheckpointing(), MixedPrecision(), Compile(), WarmAllocator(),
    ]


def _layout_refusal(recipe: Recipe) -> str | None:
    if recipe.num_devices > 1 or recipe.zero > 0 or recipe.ep > 1:
        return ("the parallel layout (dp/tp/pp/ep, zero) is applied by accelkit.distributed across processes, not by "
                "recipes.apply on one module; pass a single-device Recipe here")
    if recipe.grad_compression != "none":  # a DDP communication hook: dropped without a word here before
        return (f"grad_compression={recipe.grad_compression!r} compresses the data-parallel gradient reduction: a DDP "
                "communication hook, registered on the DistributedDataParallel model with "
                "accelkit.distributed.grad_comm.register_ddp_hook(ddp_model, recipe), not something recipes.apply "
                "does to one module; leave it at 'none' here")
    return None


def _serving_refusal(recipe: Recipe) -> str | None:
    # the KV cache is the serving engine's, not a tensor of the module: refused rather than dropped without a word
    if recipe.kv_cache_dtype != "auto":
        return (f"kv_cache_dtype={recipe.kv_cache_dtype!r} is a serving setting: the KV cache belongs to the engine "
                f"(accelkit.serve EngineConfig(kv_cache_dtype={recipe.kv_cache_dtype!r}), `accelkit serve "
                "--kv-cache-dtype`), not to the module recipes.apply transforms; leave it at 'auto' here")
    if recipe.offload:  # the planner counts ZeRO-Offload's memory; nothing here moves optimizer states to the host
        return ("offload=True (optimizer states in host memory) is a planning input (accelkit plan --offload), not "
                "something recipes.apply does to a module; leave offload off here")
    return None


def _check_recipe(recipe: object) -> Recipe:
    """``recipe`` if it is a Recipe; a name such as 'bf16' is a bench variant, not a Recipe, so say how to write it."""
    if isinstance(recipe, Recipe):
        return recipe
    hint = ""
    if isinstance(recipe, str):
        field = ("precision" if recipe in get_args(Precision) else
                 "quantization" if recipe in get_args(QuantizationName) else None)
        hint = f"; write Recipe({field}={recipe!r})" if field else "; build one, e.g. Recipe(precision='bf16')"
    raise TypeError(f"recipe must be an accelkit.core.Recipe, not {type(recipe).__name__} {recipe!r}{hint}")


def _mode_refusal(recipe: Recipe, training: bool) -> str | None:
    if recipe.precision == "fp8" and not training:
        return ("precision='fp8' means FP8 training (torchao.float8); for FP8 inference use "
                "quantization='fp8-dynamic' or 'fp8-weight'")
    if recipe.recompute != "none" and not training:
        return f"recompute={recipe.recompute!r} trades compute for training memory; inference saves no activations"
    return None


def refusal(
    recipe: Recipe,
    device: str | None = None,
    *,
    training: bool = False,
    emulate: bool = False,
    example_inputs: tuple[Any, ...] | None = None,
    steps: Sequence[Technique] | None = None,
) -> str | None:
    """Why ``recipe`` cannot run on ``device`` (None if it can) — the same checks ``apply`` makes. ``device`` is
    auto (the default), cpu, cuda, cuda:N or meta; any other is a UserError."""
    recipe = _check_recipe(recipe)
    ctx = ApplyContext(device=device_info(device), example_inputs=example_inputs, training=training, emulate_fp8=emulate)
    return _first_refusal(recipe, ctx, steps or techniques())


def _first_refusal(recipe: Recipe, ctx: ApplyContext, steps: Sequence[Technique]) -> str | None:
    reason = _layout_refusal(recipe) or _serving_refusal(recipe) or _mode_refusal(recipe, ctx.training)
    if reason:
        return reason
    for step in steps:
        if step.wanted(recipe):
            reason = step.refusal(recipe, ctx)
            if reason:
                return reason
    return None


def _first_model_refusal(model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext,
                         steps: Sequence[Technique]) -> str | None:
    for step in steps:
        if step.wanted(recipe):
            reason = step.model_refusal(model, recipe, ctx)
            if reason:
                return reason
    return None


def apply(
    model: torch.nn.Module,
    recipe: Recipe,
    *,
    example_inputs: tuple[Any, ...] | None = None,
    device: str | None = None,
    training: bool | None = None,
    emulate: bool = False,
    quant_backend: Backend = "auto",
    fp8_scaling: str = "tensorwise",
    notes: list[str] | None = None,
    without: Sequence[str] = (),
) -> torch.nn.Module:
    """Apply ``recipe`` to ``model`` and return the model to run.

    ``device`` (auto, cpu, cuda, cuda:N, or meta for a model without storage) defaults to where the model's
    parameters are; ``training`` to ``model.training``.
    ``emulate=True`` lets fp8 training and fp8 inference run without FP8 hardware (numerics only, for tests).
    ``fp8_scaling`` picks torchao's fp8 training recipe: ``tensorwise`` (SM89+) or ``rowwise`` (SM90+).
    ``notes``, if given, receives one line per technique applied. ``without`` names techniques to leave out
    (``Technique.name``): a model already cast to the recipe's precision, as a diffusers pipeline runs, takes no
    autocast wrapper (``without=("mixed-precision",)``). Raises ``RecipeRefused`` (a ``UserError``) naming what is
    missing and what to change; the model is then left as it was.
    """
    recipe = _check_recipe(recipe)
    if device is None:
        param = next(model.parameters(), None)
        device = str(param.device) if param is not None else "cpu"
    ctx = ApplyContext(
        device=device_info(device), example_inputs=example_inputs,
        training=model.training if training is None else training, emulate_fp8=emulate,
    )
    every = techniques(quant_backend=quant_backend, fp8_scaling=fp8_scaling)
    names = {s.name for s in every}
    if isinstance(without, str):  # a str is a sequence of letters: "compile" in "compile" held by accident
        raise ValueError(f"without={without!r} is a str; pass a tuple of technique names: without=({without!r},)")
    unknown = [name for name in without if name not in names]
    if unknown:  # a misspelt name left the technique in without a word
        raise ValueError(f"without names {', '.join(map(repr, unknown))}, not a technique; expected names among "
                         f"{', '.join(s.name for s in every)}, e.g. without=('mixed-precision',)")
    steps = [s for s in every if s.name not in without]
    reason = _first_refusal(recipe, ctx, steps) or _first_model_refusal(model, recipe, ctx, steps)
    if reason:
        raise RecipeRefused(reason)
    for step in steps:
        if step.wanted(recipe):
            model = step.apply(model, recipe, ctx)
    if notes is not None:
        notes.extend(ctx.notes)
    return model
