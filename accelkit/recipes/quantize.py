"""Post-training quantization of nn.Linear weights (and activations, for the dynamic schemes).

Backends, chosen per device because the fastest path differs (measured in benchmarks/recipes_cpu.py):
- ``int8-dynamic``: on a CPU, eager → ``torch.ao.quantization.quantize_dynamic`` (fbgemm/oneDNN int8
  GEMMs); on GPUs or compiled models → torchao ``Int8DynamicActivationInt8WeightConfig``.
- ``int8-weight``: torchao ``Int8WeightOnlyConfig``.
- ``int4-weight``: CPU → torchao ``IntxWeightOnlyConfig(int4, PerGroup(32))``; CUDA SM80+ →
  ``Int4WeightOnlyConfig(group_size=128)`` in tinygemm's ``tile_packed_to_4d`` layout (torch's own int4 kernels;
  torchao's default ``plain`` layout needs the separate ``mslk`` package) on a model cast to bf16 first, each
  converted Linear fed bf16 inputs as fp8's are (below): the int4 GEMM casts its output back to its input's dtype.
- ``fp8-weight`` / ``fp8-dynamic``: torchao ``Float8WeightOnlyConfig`` /
  ``Float8DynamicActivationFloat8WeightConfig`` on SM89+ or MI300-class GPUs. The model is cast to the recipe's
  16-bit precision (bf16 or fp16) *first*: torchao's fp8 GEMMs take bf16/fp16 activations and biases
  (``_scaled_mm`` refuses an fp32 checkpoint's fp32 bias: "Bias must be BFloat16 or Half"), and its rowwise
  weights must be bf16. ``emulate=True`` runs torch's own ``_scaled_mm`` (``KernelPreference.TORCH``, which has a
  CPU implementation) with torchao's hardware assertion lifted — the same fp8 numerics on any device, for tests.
  Each converted Linear casts its input to that dtype (a forward pre-hook, :class:`CastInput`): CUDA autocast runs
  layer_norm in fp32, and torchao's ``Float8Tensor`` takes ``F.linear`` in ``__torch_function__``, before autocast
  could cast the input — so the fp8 GEMM after a LayerNorm quantized an fp32 activation and wrote an fp32 output.
Casting a model to 16 bits (fp8; int4 on CUDA) casts its parameters and its saved buffers (BatchNorm statistics)
but not its computed ones — non-persistent floating buffers such as RoPE's ``inv_freq`` keep their dtype, as
``from_pretrained(dtype=torch.bfloat16)`` leaves them (:func:`cast_to`).
torchao configs are built with ``set_inductor_config=False`` wherever they accept it, so quantizing
never flips global Inductor flags. Only ``nn.Linear`` weights are quantized; the note gives the share of the matmul
weights that is and what holds the rest (:mod:`accelkit.recipes.coverage`: a Mixtral's 3-D experts, GPT-2's Conv1D).
"""

from __future__ import annotations

import contextlib
import inspect
import warnings
from collections.abc import Callable, Iterator
from typing import Any, Literal, NamedTuple

import torch

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, RecipeRefused, Technique
from accelkit.recipes.coverage import READ_BY_PARENT, coverage, matmul_weights, weight_read_by_parent
from accelkit.recipes.precision import AutocastModule

Backend = Literal["auto", "torchao", "torch.ao"]
INT4_GROUP_CPU, INT4_GROUP_GPU = 32, 128
#: int4 weights on CUDA: tinygemm's layout, which packs bf16 weights only
INT4_GPU_PACKING, INT4_GPU_DTYPE = "tile_packed_to_4d", torch.bfloat16
FP8 = ("fp8-weight", "fp8-dynamic")
#: fp8 inference runs its GEMMs on these activations: the model is cast to the dtype first
FP8_COMPUTE = {"bf16": torch.bfloat16, "fp16": torch.float16}
_SHORT = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def _config(cls: Any, **kwargs: Any) -> Any:
    if "set_inductor_config" in inspect.signature(cls).parameters:
        kwargs["set_inductor_config"] = False
    return cls(**kwargs)


class KernelShape(NamedTuple):
    """What a Linear's shape must be for torchao's kernels of one scheme here."""

    multiple: int  # in_features (and out_features, when ``both``) must divide by it
    both: bool  # out_features too: fp8-dynamic's ``_scaled_mm`` takes both dims in tiles of 16
    why: str  # ", the int4 group size"

    def takes(self, linear: torch.nn.Linear) -> bool:
        return linear.in_features % self.multiple == 0 and (not self.both or linear.out_features % self.multiple == 0)

    def rule(self) -> str:
        """'in_features must be a multiple of 32, the int4 group size'"""
        what = "in_features and out_features must both be multiples" if self.both else "in_features must be a multiple"
        return f"{what} of {self.multiple}{self.why}"

    def kept(self) -> str:
        """Why a Linear was not converted: 'in_features not a multiple of 32, the int4 group size'."""
        what = "in_features or out_features" if self.both else "in_features"
        return f"{what} not a multiple of {self.multiple}{self.why}"

    def shapes(self, linears: list[torch.nn.Linear]) -> str:
        """The shapes the rule is about: 'widths here: 20, 48' or 'shapes here: 32→8, 8→10'."""
        if self.both:
            return "shapes here: " + ", ".join(sorted({f"{m.in_features}→{m.out_features}" for m in linears}))
        return "widths here: " + ", ".join(sorted({str(m.in_features) for m in linears}))


def _linear_filter(shape: KernelShape, skip: set[str]) -> Callable[[torch.nn.Module, str], bool]:
    def keep(module: torch.nn.Module, fqn: str) -> bool:
        return isinstance(module, torch.nn.Linear) and shape.takes(module) and fqn not in skip
    return keep


def _kernel_shape(q: str, ctx: ApplyContext) -> KernelShape:
    """What a Linear's shape must be for torchao's kernels of ``q`` here. fp8-dynamic's GEMM (``_scaled_mm``) needs
    both dims multiples of 16: torchao leaves any other Linear as it was without a word (its ``_fp8_mm_compat``),
    so a model whose Linears all had an out_features of 8 or 10 was "converted" to nothing and measured as fp8
    (found in review). fp8-weight dequantizes and multiplies in bf16/fp16: only in_features matters to it."""
    if q == "int4-weight":
        return KernelShape(INT4_GROUP_GPU if ctx.device.is_cuda else INT4_GROUP_CPU, False, ", the int4 group size")
    if q == "fp8-dynamic":
        return KernelShape(16, True, ", the fp8 GEMM's tile")
    if q == "fp8-weight":
        return KernelShape(16, False, ", the fp8 GEMM's tile")
    return KernelShape(1, False, "")


def _none_converted(named: list[tuple[str, torch.nn.Linear]], q: str, shape: KernelShape, skip: set[str]) -> str:
    by_parent = sum(fqn in skip for fqn, _ in named)
    others = [m for fqn, m in named if fqn not in skip]
    why = [f"{shape.rule()} ({shape.shapes(others)})"] if others else []
    why += [f"{by_parent} {'is' if by_parent == 1 else 'are'} {READ_BY_PARENT}"] if by_parent else []
    fix = "use quantization='int8-weight' or 'int8-dynamic'" if others else "quantize the model's other layers yourself"
    return f"quantization={q!r} converted none of the {len(named)} Linear layers: {'; '.join(why)}; {fix}"


def _linears_refusal(model: torch.nn.Module, q: str, shape: KernelShape) -> str | None:
    """Why ``model`` has no Linear that ``q`` would convert (None if it has one): checked before anything is cast
    or quantized, so the refusal leaves the model as it was."""
    named = [(fqn, m) for fqn, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    if not named:
        return f"quantization={q!r} converts nn.Linear layers and {type(model).__name__} has none"
    skip = weight_read_by_parent(model)
    if not any(_linear_filter(shape, skip)(m, fqn) for fqn, m in named):
        return _none_converted(named, q, shape, skip)
    return None


def _kept(named: list[tuple[str, torch.nn.Linear]], converted: set[str], shape: KernelShape, skip: set[str]) -> str:
    """'; 3 kept in full precision (2 with in_features not a multiple of 32 …, 1 nn.MultiheadAttention's out_proj …)'"""
    left = [fqn for fqn, _ in named if fqn not in converted]
    if not left:
        return ""
    by_parent = sum(fqn in skip for fqn in left)
    by_shape = len(left) - by_parent
    why = ([f"{by_shape} with {shape.kept()}" if by_parent else shape.kept()] if by_shape else [])
    why += [f"{by_parent} {READ_BY_PARENT}" if by_shape else READ_BY_PARENT] if by_parent else []
    return f"; {len(left)} kept in full precision ({', '.join(why)})"


def _weights_dtype(model: torch.nn.Module) -> str:
    """The dtype unconverted weights keep, for the note ("fp32"; "their dtypes" when the model mixes them)."""
    dtypes = {p.dtype for p in model.parameters() if p.is_floating_point()}
    return f"{_SHORT.get(next(iter(dtypes)), str(next(iter(dtypes))))}" if len(dtypes) == 1 else "in their dtypes"


class Converted(NamedTuple):
    """What :func:`_quantize_linears` converted."""

    fqns: set[str]  # the converted Linears' names
    counted: str  # "k of n Linear layers; m kept in full precision (why)"
    covered: str  # the share of the matmul weights converted, and what holds the rest (coverage.coverage)


def _quantize_linears(model: torch.nn.Module, config: Any, q: str, ctx: ApplyContext) -> Converted:
    """torchao ``quantize_`` on the Linears whose shape its kernels take (:func:`_kernel_shape`); says how many were converted and why the others were not, and the share of the
    matmul weights that is (experts stored as 3-D parameters are no Linear, and stay as they were). A model where none
    qualifies was refused before (``Quantization.model_refusal``): a recipe that changed nothing must not be
    measured as if it had (int4 on a CPU once skipped every Linear of width 20 and still said "int4-weight
    quantization"). Should torchao still convert none, that is refused too — after the fact, the model already
    changed."""
    from torchao import quantization as tq

    shape = _kernel_shape(q, ctx)
    named = [(fqn, m) for fqn, m in model.named_modules() if isinstance(m, torch.nn.Linear)]
    linears = [m for _, m in named]
    weights = {id(m): m.weight for m in linears}
    survey, rest = matmul_weights(model), _weights_dtype(model)
    skip = weight_read_by_parent(model)
    tq.quantize_(model, config, filter_fn=_linear_filter(shape, skip))
    # a converted Linear holds a quantized tensor subclass; a new Parameter of the same class is not one — torchao's
    # fp8 config wraps a weight it skips (its own shape check) in a fresh Parameter, which an identity test counted
    converted = {fqn for fqn, m in named if type(m.weight) is not type(weights[id(m)])}
    if not converted:
        raise RecipeRefused(_none_converted(named, q, shape, skip))
    return Converted(converted, f"{len(converted)} of {len(linears)} Linear layers" + _kept(named, converted, shape, skip),
        coverage(survey, converted, what=q, rest=rest))


def quantized_layers(model: torch.nn.Module) -> list[tuple[str, str]]:
    """(name, what) of each layer a quantization already converted: a torch.ao quantized module, or a Linear whose
    weight is a tensor subclass (torchao's ``Int8Tensor``, ``Float8Tensor`` …)."""
    found = []
    for fqn, m in model.named_modules():
        if type(m).__module__.startswith("torch.ao.nn.quantized") and not type(m).__name__.endswith("PackedParams"):
            found.append((fqn, f"torch.ao {type(m).__name__}"))
        elif isinstance(m, torch.nn.Linear) and type(m.weight) not in (torch.nn.Parameter, torch.Tensor):
            found.append((fqn, f"{type(m.weight).__name__} weight"))
    return found


class Quantization(Technique):
    """quantization = int8-dynamic | int8-weight | int4-weight | fp8-weight | fp8-dynamic."""

    name = "quantization"

    def __init__(self, backend: Backend = "auto"):
        if backend not in ("auto", "torchao", "torch.ao"):
            raise ValueError(f"backend={backend!r} is not valid; expected 'auto', 'torchao' or 'torch.ao'")
        self.backend = backend

    def wanted(self, recipe: Recipe) -> bool:
        return recipe.quantization is not None

    def refusal(self, recipe: Recipe, ctx: ApplyContext) -> str | None:
        q, dev = recipe.quantization, ctx.device
        if ctx.training:
            return (f"quantization={q!r} is post-training (inference) quantization; for low-precision training "
                    "use precision='fp8' or 'bf16'")
        if q in FP8 and not (dev.sm_at_least(8, 9) or dev.is_mi300_class or ctx.emulate_fp8):
            return (f"quantization={q!r} needs FP8 tensor cores (NVIDIA SM89+ or MI300-class); {dev.name} has none "
                    "— use quantization='int8-dynamic' or 'int8-weight'")
        if q in FP8 and recipe.precision not in FP8_COMPUTE:
            return (f"quantization={q!r} computes on 16-bit activations (the model is cast before its weights become "
                    f"fp8); set precision='bf16' (or 'fp16') instead of {recipe.precision!r}")
        if q == "int4-weight" and dev.is_cuda and not dev.sm_at_least(8, 0):
            return f"quantization='int4-weight' on CUDA needs SM80+ (tinygemm kernels); {dev.name} is older"
        if q == "int4-weight" and dev.is_cuda and recipe.precision != "bf16":
            return (f"quantization='int4-weight' on CUDA runs tinygemm's bf16 kernels (the model is cast to bf16 before "
                    f"its weights are packed); set precision='bf16' instead of {recipe.precision!r}")
        if q == "int8-dynamic" and self._backend(recipe, ctx) == "torch.ao" and recipe.precision in ("bf16", "fp16"):
            return ("quantization='int8-dynamic' on a CPU runs torch.ao's fp32-activation int8 kernels; combine it with "
                    "precision='fp32', or use precision='bf16' without quantization")
        if recipe.sparsity is not None:
            return "quantization and sparsity='2:4' are separate weight formats; choose one of them"
        if self.backend == "torch.ao" and q != "int8-dynamic":
            return f"backend 'torch.ao' only does int8-dynamic, not {q!r}; use backend='torchao'"
        return None

    def model_refusal(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> str | None:
        q = str(recipe.quantization)
        done = quantized_layers(model)
        if done:  # torchao fails deep in its dispatch on its own tensors, torch.ao said "has no Linear"
            fqn, kind = done[0]
            return (f"quantization={q!r}: {type(model).__name__} is already quantized ({len(done)} layers, e.g. "
                    f"{fqn or 'the model'}: {kind}, from an earlier apply); apply one quantization to the model as "
                    "built")
        backend = self._backend(recipe, ctx, model)
        wrapped = next((m for m in model.modules() if isinstance(m, AutocastModule)), None)
        if backend == "torch.ao" and wrapped is not None and wrapped.dtype in (torch.bfloat16, torch.float16):
            # what refusal() says of Recipe(precision='bf16', quantization='int8-dynamic'), for the two applied
            # one after the other: the forward died with "expected scalar type Float but found BFloat16"
            return (f"quantization='int8-dynamic' on a CPU runs torch.ao's fp32-activation int8 kernels, and "
                    f"{type(wrapped.inner).__name__} already runs under {_SHORT[wrapped.dtype]} autocast (an earlier apply); "
                    "apply Recipe(quantization='int8-dynamic') to the model as built, in fp32")
        if backend == "torch.ao" and _has_encoder_fast_path(model):
            return (f"quantization='int8-dynamic' through torch.ao breaks {type(model).__name__}'s "
                    "nn.TransformerEncoderLayer, whose inference fast path reads linear1.weight itself "
                    "(\"'function' object has no attribute 'device'\"); use quant_backend='torchao' or 'auto'")
        shape = KernelShape(1, False, "") if backend == "torch.ao" else _kernel_shape(q, ctx)
        return _linears_refusal(model, q, shape)

    def _backend(self, recipe: Recipe, ctx: ApplyContext, model: torch.nn.Module | None = None) -> str:
        if self.backend != "auto":
            return self.backend
        if model is not None and _has_encoder_fast_path(model):
            return "torchao"
        return "torch.ao" if recipe.quantization == "int8-dynamic" and not ctx.device.is_cuda and recipe.compile is False else "torchao"

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        q = recipe.quantization
        backend = self._backend(recipe, ctx, model)
        if backend != self._backend(recipe, ctx):
            ctx.notes.append("torchao, not torch.ao: torch.ao's quantized Linears break nn.TransformerEncoderLayer's "
                             "inference fast path")
        if backend == "torch.ao":
            linear_fqns = {fqn for fqn, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
            survey, rest = matmul_weights(model), _weights_dtype(model)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # its deprecation notice; the kernels are what we measured
                model = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]  # torch.ao is untyped
                    model, {torch.nn.Linear}, dtype=torch.qint8)
            # quantize_dynamic swaps each Linear for its own dynamic-quantized module, at the same name
            # (its own modules: a subclass it leaves alone, such as MultiheadAttention's out_proj, is not converted)
            converted = {fqn for fqn, m in model.named_modules()
                         if fqn in linear_fqns and type(m).__module__.startswith("torch.ao.nn.quantized")}
            if linear_fqns and not converted:  # (measured as int8, it was the fp32 model under that name)
                raise RecipeRefused(
                    f"quantization={q!r} through torch.ao's quantize_dynamic converted none of {type(model).__name__}'s "
                    f"{len(linear_fqns)} Linear layer(s): it leaves a model that is itself an nn.Linear as it is, and "
                    "subclasses of nn.Linear; wrap such a model (torch.nn.Sequential(model)) or use "
                    "quant_backend='torchao'")
            ctx.notes.append(f"int8 dynamic quantization (torch.ao quantize_dynamic) of {len(converted)} of "
                             f"{len(linear_fqns)} Linear layers; {coverage(survey, converted, what=str(q), rest=rest)}")
            return model

        from torchao import quantization as tq

        if q == "int8-dynamic":
            config = _config(tq.Int8DynamicActivationInt8WeightConfig)
        elif q == "int8-weight":
            config = _config(tq.Int8WeightOnlyConfig)
        elif q == "int4-weight":
            if ctx.device.is_cuda:
                return _quantize_16_bit(model, int4_gpu_config(), q, ctx, INT4_GPU_DTYPE)
            from torchao.quantization.granularity import PerGroup

            config = _config(tq.IntxWeightOnlyConfig, weight_dtype=torch.int4,  # type: ignore[attr-defined]  # torch ≥ 2.6 has it; its stubs lag
                              granularity=PerGroup(INT4_GROUP_CPU))
        else:
            return _fp8(model, recipe, ctx)
        done = _quantize_linears(model, config, q, ctx)
        ctx.notes.append(f"{q} quantization (torchao {type(config).__name__}) of {done.counted}; {done.covered}")
        return model


def _has_encoder_fast_path(model: torch.nn.Module) -> bool:
    """``nn.TransformerEncoderLayer``'s inference fast path hands ``linear1.weight`` and the rest to a fused kernel
    itself; a torch.ao dynamic-quantized Linear's ``weight`` is a method there, and the forward raised."""
    return any(isinstance(m, torch.nn.TransformerEncoderLayer) for m in model.modules())


def int4_gpu_config() -> Any:
    """torchao's int4 weight-only config for CUDA: groups of 128 in tinygemm's layout (no mslk needed)."""
    from torchao import quantization as tq

    kwargs: dict[str, Any] = {"group_size": INT4_GROUP_GPU}
    if "int4_packing_format" in inspect.signature(tq.Int4WeightOnlyConfig).parameters:
        kwargs["int4_packing_format"] = INT4_GPU_PACKING  # a str enum: the string is the value
    return _config(tq.Int4WeightOnlyConfig, **kwargs)


def cast_to(model: torch.nn.Module, dtype: torch.dtype) -> tuple[torch.nn.Module, list[str]]:
    """``model.to(dtype)`` except for its non-persistent floating buffers, which keep their dtype; returns the model
    and those buffers' names.

    Non-persistent buffers are values the model computes in ``__init__`` and never saves — RoPE's ``inv_freq`` and
    ``original_inv_freq`` — not weights: a bf16 ``inv_freq`` is off by up to 2^-9 relatively, an angle error that
    grows with the position (0.4 rad at position 1000 in tiny-llama's second pair), which an fp8 bench would count as
    fp8 drift. transformers' ``from_pretrained(dtype=torch.bfloat16)`` leaves them fp32 too (its rotary forward
    upcasts ``inv_freq`` to fp32 anyway); only ``Module.to`` casts them. Persistent buffers are cast with the
    weights: BatchNorm's running statistics are checkpointed like its weight, and torch's batch_norm takes them only
    in the weight's dtype ("expected scalar type BFloat16 but found Float" on a CPU)."""
    kept = [(module, name, buf) for module in model.modules() for name, buf in module._buffers.items()
            if name in module._non_persistent_buffers_set and buf is not None and buf.is_floating_point()]
    model = model.to(dtype)
    for module, name, buf in kept:
        setattr(module, name, buf)
    names = {id(module): fqn for fqn, module in model.named_modules()}
    return model, [f"{names[id(module)]}.{name}".lstrip(".") for module, name, buf in kept if buf.dtype != dtype]


class CastInput:
    """A forward pre-hook that casts a Linear's floating input to ``dtype``. An fp8 (or CUDA int4) Linear needs it whatever
    autocast does: torchao's ``Float8Tensor`` handles ``F.linear`` in ``__torch_function__``, before autocast's
    dispatch could cast the input, and CUDA autocast runs layer_norm in fp32 — so without it the GEMM after every LayerNorm (4 of 6 in a BERT layer) quantized an fp32
    activation, wrote an fp32 output and added the bias in a separate kernel."""

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype

    def __repr__(self) -> str:
        return f"CastInput({self.dtype})"

    def __call__(self, module: torch.nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...] | None:
        if args and isinstance(args[0], torch.Tensor) and args[0].is_floating_point() and args[0].dtype != self.dtype:
            return (args[0].to(self.dtype), *args[1:])
        return None


def _fp8(model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
    """fp8 weights (and, for fp8-dynamic, activations) on a model cast to the recipe's 16-bit dtype first."""
    from torchao import quantization as tq

    kwargs: dict[str, Any] = {}
    if ctx.emulate_fp8:
        from torchao.quantization.quantize_.common.kernel_preference import KernelPreference

        kwargs["kernel_preference"] = KernelPreference.TORCH
    cls = tq.Float8WeightOnlyConfig if recipe.quantization == "fp8-weight" else tq.Float8DynamicActivationFloat8WeightConfig
    if "kernel_preference" not in inspect.signature(cls).parameters:
        kwargs.pop("kernel_preference", None)  # weight-only: dequantize + matmul, no fp8 kernel to emulate
    with _emulated_hardware(ctx.emulate_fp8 and not (ctx.device.sm_at_least(8, 9) or ctx.device.is_mi300_class)):
        return _quantize_16_bit(model, _config(cls, **kwargs), str(recipe.quantization), ctx,
                                FP8_COMPUTE[recipe.precision], emulated=ctx.emulate_fp8)


def _quantize_16_bit(model: torch.nn.Module, config: Any, q: str, ctx: ApplyContext, dtype: torch.dtype, *,
                     emulated: bool = False) -> torch.nn.Module:
    """``q`` on a model cast to ``dtype`` first (fp8; int4 on CUDA, whose tinygemm kernels pack bf16 only), each
    converted Linear fed its input in ``dtype`` (:class:`CastInput`).

    The input cast is what keeps the GEMM's output in ``dtype``: torchao's quantized weights take ``F.linear`` in
    ``__torch_function__``, before autocast could cast the input, and CUDA autocast runs layer_norm in fp32 — so
    after a LayerNorm the fp8 GEMM quantized an fp32 activation, and the int4 one (which casts its input to bf16
    itself, then its output back to the input's dtype) wrote fp32 outputs, every layer after it in fp32 too."""
    # biases and norms too: the fp8 GEMM adds a bf16/fp16 bias to a bf16/fp16 output; computed buffers keep theirs
    model, kept = cast_to(model, dtype)
    done = _quantize_linears(model, config, q, ctx)
    modules = dict(model.named_modules())
    for fqn in done.fqns:
        modules[fqn].register_forward_pre_hook(CastInput(dtype))
    name = _SHORT[dtype]
    ctx.notes.append(f"cast to {name}, then {q} quantization (torchao {type(config).__name__}"
                     f"{', emulated' if emulated else ''}) of {done.counted}; their inputs cast to {name}"
                     + (f"; {len(kept)} computed buffer{'s' * (len(kept) != 1)} kept in their dtype ({', '.join(kept[:2])}"
                        f"{', …' if len(kept) > 2 else ''})"
                        if kept else "") + f"; {done.covered}")
    return model


@contextlib.contextmanager
def _emulated_hardware(active: bool) -> Iterator[None]:
    """torchao asserts FP8 hardware while quantizing although torch's ``_scaled_mm`` also runs elsewhere (a CPU);
    lift that one check for the call (emulate=True only — same numerics, nothing is claimed about speed)."""
    if not active:
        yield
        return
    from torchao.quantization import quant_api

    check = getattr(quant_api, "_check_hardware_support", None)
    if check is None:
        yield
        return
    quant_api._check_hardware_support = lambda *args, **kwargs: None
    try:
        yield
    finally:
        quant_api._check_hardware_support = check
