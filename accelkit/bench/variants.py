"""The precision and optimization matrix of `accelkit bench`, and a thin adapter to the recipes.

A :class:`Variant` is one cell of the matrix (a precision plus optional compile / recompute /
channels-last / gradient compression), or an explicit :class:`Recipe` (what `accelkit tune` measures).
:func:`apply` turns a finished model into that variant through ``accelkit.recipes.apply`` (gradient
compression is not a single-module transform: ``accelkit.distributed`` applies it when it wraps the model);
:func:`device_refusal` says in one line why a variant cannot run here — it is never run as something else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

from accelkit.core import Recipe
from accelkit.core.recipe import POWERSGD_FIELDS, GradCompression
from accelkit.core.spec import Spec, spec_field
from accelkit.hardware.probe import supported_dtypes

if TYPE_CHECKING:
    import torch

BenchPrecision = Literal["fp32", "tf32", "bf16", "fp16", "fp8", "int8"]
PRECISIONS: tuple[str, ...] = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")
Fp8Scaling = Literal["tensorwise", "rowwise"]
FP8_SCALINGS: tuple[str, ...] = ("tensorwise", "rowwise")
GRAD_COMPRESSIONS: tuple[str, ...] = ("none", "bf16", "fp16", "powersgd")
_RECIPE_FIELDS = Recipe.__dataclass_fields__


#: the Recipe's gradient-communication fields at their defaults: no compression (what one device runs)
_NO_COMPRESSION: dict[str, Any] = {f: _RECIPE_FIELDS[f].default for f in ("grad_compression", *POWERSGD_FIELDS)}


def _recipe_field(name: str) -> Any:
    """The same field as the Recipe's (default, doc, bounds, whether it must be finite)."""
    f = _RECIPE_FIELDS[name]
    return spec_field(f.default, doc=f.metadata["doc"], min=f.metadata["min"], max=f.metadata["max"],
                      finite=f.metadata["finite"])


@dataclass(frozen=True, slots=True, kw_only=True)
class Variant(Spec):
    """One cell of the matrix."""

    precision: BenchPrecision = spec_field("fp32", doc="Numerics: autocast dtype, tf32 math mode, fp8 or int8.")
    compile: bool = spec_field(False, doc="torch.compile (default mode).")
    recompute: bool = spec_field(False, doc="Full activation checkpointing (training only).")
    channels_last: bool = spec_field(False, doc="NHWC memory format (CNNs only).")
    fp8_scaling: Fp8Scaling = spec_field(
        "tensorwise", doc="fp8 training: torchao's tensorwise (SM89+) or rowwise (SM90+) scaling recipe.")
    label: str | None = spec_field(None, doc="Name override (e.g. a data-loader setting); None = derived.")
    explicit_recipe: Recipe | None = spec_field(
        None, doc="A Recipe to apply as it is (accelkit tune); None = the one precision and options mean."
    )
    settings: dict[str, Any] = spec_field(default_factory=dict, doc="Workload-specific settings of this variant.")
    grad_compression: GradCompression = _recipe_field("grad_compression")
    powersgd_rank: int = _recipe_field("powersgd_rank")
    powersgd_start_iter: int = _recipe_field("powersgd_start_iter")
    powersgd_error_feedback: bool = _recipe_field("powersgd_error_feedback")
    powersgd_warm_start: bool = _recipe_field("powersgd_warm_start")
    powersgd_min_compression_rate: float = _recipe_field("powersgd_min_compression_rate")

    def validate(self) -> None:
        if self.fp8_scaling != "tensorwise" and self.precision != "fp8":
            raise ValueError(f"fp8_scaling={self.fp8_scaling!r} applies to precision='fp8', not {self.precision!r}")
        if self.explicit_recipe is None:
            Recipe(grad_compression=self.grad_compression, **self.powersgd)  # the Recipe's own rules

    @property
    def powersgd(self) -> dict[str, Any]:
        """The PowerSGD settings (Recipe field → value)."""
        return {f: getattr(self, f) for f in POWERSGD_FIELDS}

    @property
    def compression(self) -> str:
        """The gradient compression this variant runs ('none' without one)."""
        if self.explicit_recipe is not None:
            return self.explicit_recipe.grad_compression
        return self.grad_compression

    @property
    def compression_name(self) -> str | None:
        """How the name shows the compression: bf16-grads, powersgd-r4[-start10][-no-ef][-no-warm] (None for none;
        the start iteration before the flags: '-no-warm-start1' read as one flag)."""
        if self.grad_compression == "none":
            return None
        if self.grad_compression != "powersgd":
            return f"{self.grad_compression}-grads"
        name = f"powersgd-r{self.powersgd_rank}"
        default_start = _RECIPE_FIELDS["powersgd_start_iter"].default
        name += "" if self.powersgd_start_iter == default_start else f"-start{self.powersgd_start_iter}"
        name += "" if self.powersgd_error_feedback else "-no-ef"
        return name + ("" if self.powersgd_warm_start else "-no-warm")

    @property
    def name(self) -> str:
        if self.label is not None:
            return self.label
        parts: list[str] = [self.precision if self.fp8_scaling == "tensorwise" else f"{self.precision}-{self.fp8_scaling}"]
        parts += [opt for opt, on in self.options.items() if on]
        if self.compression_name:
            parts.append(self.compression_name)
        return "+".join(parts)

    def without_compression(self) -> Variant:
        """The same variant with plain gradient communication (the quality gate's reference)."""
        if self.explicit_recipe is not None:
            return self.replace(explicit_recipe=single_device(self.explicit_recipe))
        return self.replace(**_NO_COMPRESSION)

    @property
    def options(self) -> dict[str, bool]:
        return {"compile": self.compile, "recompute": self.recompute, "channels_last": self.channels_last}

    @property
    def is_plain(self) -> bool:
        return not any(self.options.values())

    @property
    def is_reference(self) -> bool:
        """Plain fp32 eager: the variant the others' drift and FLOPs are measured against."""
        if self.explicit_recipe is not None:
            return self.explicit_recipe == Recipe()
        return self.is_plain and self.precision == "fp32" and not self.settings and self.grad_compression == "none"

    def recipe(self, *, training: bool = False) -> Recipe:
        """The Recipe this variant means. int8 is dynamic int8 quantization with fp32 compute; fp8 is
        FP8 training (torchao.float8, ``fp8_scaling``) for a training step and dynamic fp8 quantization of a
        bf16-cast model for inference — the recipes package draws the same line. The planner's view of the same
        variant (batch layout) is ``accelkit.bench.predict.variant_spec``."""
        if self.explicit_recipe is not None:
            return self.explicit_recipe
        quantization = {"int8": "int8-dynamic", "fp8": None if training else "fp8-dynamic"}.get(self.precision)
        precision = {"int8": "fp32", "fp8": "fp8" if training else "bf16"}.get(self.precision, self.precision)
        return Recipe(
            precision=precision,  # type: ignore[arg-type]
            quantization=quantization,  # type: ignore[arg-type]
            compile="default" if self.compile else False,
            recompute="full" if self.recompute else "none",
            channels_last=self.channels_last,
            grad_compression=self.grad_compression,
            **self.powersgd,
        )

    @property
    def effective_precision(self) -> BenchPrecision:
        """The precision this variant runs at — what every reader of "the precision" (loss scaling, autocast, the
        MFU peak, the stored row) must use, never the ``precision`` field itself: an explicit recipe (`accelkit
        tune`) leaves that field at its fp32 default. For a recipe it is the inverse of :meth:`recipe`: dynamic
        int8 quantization is int8, dynamic fp8 is fp8; weight-only quantization computes in the recipe's
        precision."""
        if self.explicit_recipe is None:
            return self.precision
        quantized = {"int8-dynamic": "int8", "fp8-dynamic": "fp8"}.get(self.explicit_recipe.quantization or "")
        return quantized or self.explicit_recipe.precision  # type: ignore[return-value]

    @property
    def matmul_dtype(self) -> str:
        """The dtype whose dense peak MFU divides by."""
        return self.effective_precision


@dataclass(frozen=True, slots=True, kw_only=True)
class Matrix(Spec):
    """The variants a bench runs: each precision plain, then with the options (what `--precision`,
    `--compile` … ask for)."""

    precisions: tuple[BenchPrecision, ...] = spec_field(
        ("fp32",), doc="Comma list of fp32, tf32, bf16, fp16, fp8, int8; the first is the baseline of the comparison.")
    compile: bool = spec_field(False, doc="Add torch.compile variants.")
    recompute: bool = spec_field(False, doc="Add activation-checkpointing variants (training).")
    channels_last: bool = spec_field(False, doc="Add channels-last variants (CNNs).")
    fp8_scalings: tuple[Fp8Scaling, ...] = spec_field(
        ("tensorwise",), doc="fp8 training recipes to run, comma list of tensorwise (SM89+) and rowwise (SM90+).")
    grad_compressions: tuple[GradCompression, ...] = spec_field(
        ("none",), doc="Data-parallel gradient compressions to run (with --nproc-per-node), comma list of none, bf16, "
                       "fp16, powersgd; each compressed variant is gated on its loss against none.")
    powersgd_rank: int = _recipe_field("powersgd_rank")
    powersgd_start_iter: int = _recipe_field("powersgd_start_iter")
    powersgd_error_feedback: bool = _recipe_field("powersgd_error_feedback")
    powersgd_warm_start: bool = _recipe_field("powersgd_warm_start")
    powersgd_min_compression_rate: float = _recipe_field("powersgd_min_compression_rate")

    def validate(self) -> None:
        if not self.precisions or not self.fp8_scalings or not self.grad_compressions:
            raise ValueError("precisions, fp8_scalings and grad_compressions need at least one value each")
        if "fp8" not in self.precisions and set(self.fp8_scalings) != {"tensorwise"}:
            # the scalings shape only the fp8 variants: without fp8 a rowwise run measured plain fp32 and said nothing
            raise ValueError(f"fp8_scalings={','.join(self.fp8_scalings)} applies to precisions=fp8, not "
                             f"{','.join(self.precisions)}: add fp8, e.g. precisions={','.join(self.precisions)},fp8")
        if "powersgd" not in self.grad_compressions:
            changed = [f for f in POWERSGD_FIELDS if getattr(self, f) != _RECIPE_FIELDS[f].default]
            if changed:
                value = getattr(self, changed[0])  # a switch is named without its value
                named = changed[0] if isinstance(value, bool) else f"{changed[0]}={value}"
                raise ValueError(f"{named} applies to grad_compressions=powersgd, not "
                                 f"{','.join(self.grad_compressions)}")
        else:
            Recipe(grad_compression="powersgd", **self.powersgd)

    @property
    def powersgd(self) -> dict[str, Any]:
        """The PowerSGD settings (Recipe field → value)."""
        return {f: getattr(self, f) for f in POWERSGD_FIELDS}

    def variants(self) -> list[Variant]:
        return matrix(self.precisions, compile=self.compile, recompute=self.recompute,
                      channels_last=self.channels_last, fp8_scalings=self.fp8_scalings,
                      grad_compressions=self.grad_compressions,
                      powersgd=self.powersgd)


def matrix(
    precisions: Sequence[str], *, compile: bool = False, recompute: bool = False, channels_last: bool = False,
    fp8_scalings: Sequence[str] = ("tensorwise",), grad_compressions: Sequence[str] = ("none",),
    powersgd: dict[str, Any] | None = None,
) -> list[Variant]:
    """Each precision plain, and — when options are given — each precision with them too, so the table
    shows what the options buy; fp8 once per scaling in ``fp8_scalings``; each of those once per gradient
    compression (PowerSGD with the ``powersgd`` settings). The first variant is the baseline of the comparison."""
    opts = {"compile": compile, "recompute": recompute, "channels_last": channels_last}
    out: list[Variant] = []
    for p in dict.fromkeys(precisions):  # keep order, drop repeats
        for scaling in dict.fromkeys(fp8_scalings) if p == "fp8" else ("tensorwise",):
            cells: list[dict[str, Any]] = [{"precision": p, "fp8_scaling": scaling}]
            if any(opts.values()):
                cells.append({**cells[0], **opts})
            for cell in cells:
                for kind in dict.fromkeys(grad_compressions):
                    extra = dict(powersgd or {}) if kind == "powersgd" else {}
                    out.append(Variant.from_dict({**cell, "grad_compression": kind, **extra}))
    return out


def device_refusal(variant: Variant, device: str, *, training: bool = False, world_size: int = 1,
                   zero: int = 0) -> str | None:
    """Why this device (and layout: ``world_size`` processes, ZeRO stage ``zero``) cannot run ``variant`` (None if
    it can)."""
    # an explicit recipe is refused below in the recipe's own terms (the field of it that cannot run here)
    if variant.explicit_recipe is None and variant.precision in ("tf32", "fp8") and supported_dtypes(device).get(
            variant.precision):
        return supported_dtypes(device)[variant.precision]
    # lazy: recipes import torch, and the CLI loads this module at start-up
    from accelkit.recipes import refusal
    from accelkit.recipes.apply import techniques
    from accelkit.recipes.grad_compression import compression_refusal

    recipe = variant.recipe(training=training)
    reason = compression_refusal(recipe, world_size=world_size, zero=zero, training=training) or refusal(
        single_device(recipe), device, training=training, steps=techniques(fp8_scaling=variant.fp8_scaling))
    return str(reason) if reason else None


def single_device(recipe: Recipe) -> Recipe:
    """``recipe`` without its data-parallel communication settings (what ``recipes.apply`` transforms)."""
    return recipe.replace(**_NO_COMPRESSION)


# ---- applying a variant ---------------------------------------------------------------------------------
def apply(
    model: torch.nn.Module, variant: Variant, *, example_inputs: Any = None, device: str = "cpu", train: bool = False,
    notes: list[str] | None = None,
) -> torch.nn.Module:
    """``model`` transformed into ``variant`` by ``accelkit.recipes.apply`` (bf16/fp16 keep fp32 weights and
    also run under :func:`numerics`; int8 and fp8 go through the recipes' quantization). ``notes`` receives what
    each technique did (e.g. which share of the matmul weights an fp8 or int8 conversion reached); a workload hands
    them to the bench in ``Prepared.notes``."""
    # lazy: recipes import torch, and the CLI loads this module at start-up
    from accelkit.recipes import apply as apply_recipe

    return apply_recipe(model, single_device(variant.recipe(training=train)), example_inputs=example_inputs,
                        device=device, training=train, fp8_scaling=variant.fp8_scaling, notes=notes)


@contextlib.contextmanager
def numerics(variant: Variant, device: str) -> Iterator[None]:
    """The math mode a variant's step runs under: autocast for bf16/fp16/fp8, TF32 on only for tf32
    (and explicitly off for fp32, so that fp32 means fp32)."""
    import torch

    dev_type = "cuda" if device.startswith("cuda") else "cpu"
    precision = variant.effective_precision
    autocast_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}.get(precision)
    with contextlib.ExitStack() as stack:
        if dev_type == "cuda":
            before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
            on = precision == "tf32"
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
    return device.startswith("cuda") or variant.effective_precision in ("bf16", "fp16", "fp8")
