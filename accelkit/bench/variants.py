"""The precision and optimization matrix of `accelkit bench`, and a thin adapter to the recipes.

A :class:`Variant` is one cell of the matrix (a precision plus optional compile / recompute /
channels-last). :func:`apply` turns a finished model into that variant through
``accelkit.recipes.apply`` when the recipes package is installed, and otherwise through the few
transforms below (this fallback exists only until ``accelkit.recipes`` lands; delete it then).
:func:`refusal` says in one line why a variant cannot run here — it is never run as something else.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import shutil
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from accelkit.core import Recipe
from accelkit.core.spec import Spec, spec_field

if TYPE_CHECKING:
    import torch

BenchPrecision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant(Spec):
    """One cell of the matrix."""

    precision: BenchPrecision = spec_field("fp32", doc="Numerics: autocast dtype, tf32 math mode, fp8 or int8.")
    compile: bool = spec_field(False, doc="torch.compile (default mode).")
    recompute: bool = spec_field(False, doc="Full activation checkpointing (training only).")
    channels_last: bool = spec_field(False, doc="NHWC memory format (CNNs only).")
    label: str | None = spec_field(None, doc="Name override (e.g. a data-loader setting); None = derived.")
    settings: dict[str, Any] = spec_field(default_factory=dict, doc="Workload-specific settings of this variant.")

    @property
    def name(self) -> str:
        if self.label is not None:
            return self.label
        parts = [self.precision]
        parts += [opt for opt, on in self.options.items() if on]
        return "+".join(parts)

    @property
    def options(self) -> dict[str, bool]:
        return {"compile": self.compile, "recompute": self.recompute, "channels_last": self.channels_last}

    @property
    def is_plain(self) -> bool:
        return not any(self.options.values())

    def recipe(self, *, training: bool = False) -> Recipe:
        """The Recipe this variant means. int8 is dynamic int8 quantization with fp32 compute; fp8 is
        FP8 training (torchao.float8) for a training step and dynamic fp8 quantization under bf16
        autocast for inference — the recipes package draws the same line."""
        quantization = {"int8": "int8-dynamic", "fp8": None if training else "fp8-dynamic"}.get(self.precision)
        precision = {"int8": "fp32", "fp8": "fp8" if training else "bf16"}.get(self.precision, self.precision)
        return Recipe(
            precision=precision,  # type: ignore[arg-type]
            quantization=quantization,  # type: ignore[arg-type]
            compile="default" if self.compile else False,
            recompute="full" if self.recompute else "none",
            channels_last=self.channels_last,
        )

    @property
    def matmul_dtype(self) -> str:
        """The dtype whose dense peak MFU divides by."""
        return self.precision


def matrix(
    precisions: Sequence[str], *, compile: bool = False, recompute: bool = False, channels_last: bool = False
) -> list[Variant]:
    """Each precision plain, and — when options are given — each precision with them too, so the table
    shows what the options buy. The first variant is the baseline of the comparison."""
    opts = {"compile": compile, "recompute": recompute, "channels_last": channels_last}
    out: list[Variant] = []
    for p in dict.fromkeys(precisions):  # keep order, drop repeats
        out.append(Variant(precision=p))  # type: ignore[arg-type]
        if any(opts.values()):
            out.append(Variant(precision=p, **opts))  # type: ignore[arg-type]
    return out


def _recipes() -> Any | None:
    try:
        return importlib.import_module("accelkit.recipes")
    except ImportError:
        return None


def _call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn`` with the keyword arguments its signature accepts (the recipes API is young)."""
    params = inspect.signature(fn).parameters
    return fn(*args, **{k: v for k, v in kwargs.items() if k in params})


def device_refusal(variant: Variant, device: str, *, training: bool = False) -> str | None:
    """Why this device cannot run ``variant`` (None if it can)."""
    from accelkit.hardware.probe import supported_dtypes

    if variant.precision in ("tf32", "fp8") and supported_dtypes(device).get(variant.precision):
        return supported_dtypes(device)[variant.precision]
    recipes = _recipes()
    if recipes is not None and hasattr(recipes, "refusal"):
        reason = _call(recipes.refusal, variant.recipe(training=training), device, training=training)
        return str(reason) if reason else None
    # fallback checks, until accelkit.recipes is importable everywhere
    if variant.precision != "int8" and supported_dtypes(device).get(variant.precision):
        return supported_dtypes(device)[variant.precision]
    if variant.precision in ("fp8", "int8") and importlib.util.find_spec("torchao") is None:
        return f"{variant.precision} needs torchao (pip install torchao)"
    if variant.compile and device == "cpu" and not (shutil.which("c++") or shutil.which("g++")):
        return "torch.compile on a CPU needs a C++ compiler (install g++), or drop --compile"
    return None


# ---- applying a variant (fallback adapter) ------------------------------------------------------------
def apply(
    model: torch.nn.Module, variant: Variant, *, example_inputs: Any = None, device: str = "cpu", train: bool = False
) -> torch.nn.Module:
    """``model`` transformed into ``variant``. bf16/fp16 keep fp32 weights and run under :func:`numerics`
    (autocast); int8 and fp8 go through torchao (fp8 inference casts the model to bf16 first)."""
    recipes = _recipes()
    if recipes is not None and hasattr(recipes, "apply"):
        recipe = variant.recipe(training=train)
        return _call(recipes.apply, model, recipe, example_inputs=example_inputs, device=device, training=train)
    import torch

    if variant.precision == "int8":
        from torchao.quantization import Int8DynamicActivationInt8WeightConfig, quantize_

        quantize_(model, Int8DynamicActivationInt8WeightConfig())
    elif variant.precision == "fp8":
        if train:
            from torchao.float8 import convert_to_float8_training

            convert_to_float8_training(model, module_filter_fn=_fp8_filter)
        else:
            from torchao.quantization import Float8DynamicActivationFloat8WeightConfig, PerRow, quantize_

            model.to(torch.bfloat16)
            quantize_(model, Float8DynamicActivationFloat8WeightConfig(granularity=PerRow()), filter_fn=_fp8_filter)
    if variant.channels_last:
        model = model.to(memory_format=torch.channels_last)
    if variant.recompute:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})  # type: ignore[operator]
    if variant.compile:
        model = torch.compile(model)  # type: ignore[assignment]
    return model


def _fp8_filter(module: Any, fqn: str) -> bool:
    """fp8 kernels need both linear dims divisible by 16; skip the LM head (accuracy) and odd shapes."""
    import torch

    if not isinstance(module, torch.nn.Linear):
        return False
    return module.in_features % 16 == 0 and module.out_features % 16 == 0 and "lm_head" not in fqn


@contextlib.contextmanager
def numerics(variant: Variant, device: str) -> Iterator[None]:
    """The math mode a variant's step runs under: autocast for bf16/fp16/fp8, TF32 on only for tf32
    (and explicitly off for fp32, so that fp32 means fp32)."""
    import torch

    dev_type = "cuda" if device.startswith("cuda") else "cpu"
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}.get(variant.precision)
    with contextlib.ExitStack() as stack:
        if dev_type == "cuda":
            before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
            on = variant.precision == "tf32"
            torch.backends.cuda.matmul.allow_tf32 = on
            torch.backends.cudnn.allow_tf32 = on
            stack.callback(_restore_tf32, before)
        if autocast_dtype is not None:
            stack.enter_context(torch.autocast(dev_type, dtype=autocast_dtype))
        yield


def _restore_tf32(before: tuple[bool, bool]) -> None:
    import torch

    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


def needs_context(variant: Variant, device: str) -> bool:
    """False when :func:`numerics` would change nothing (plain fp32/int8 on a CPU): the step then runs bare."""
    return device.startswith("cuda") or variant.precision in ("bf16", "fp16", "fp8")
