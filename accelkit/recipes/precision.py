"""Mixed precision: bf16/fp16 autocast around the model's forward, tf32 matmuls on GPUs that have them.
FP8 training (``precision='fp8'``) runs everything but its Float8Linear layers under bf16 autocast too.

Autocast is a context, not a weight change, so the model is wrapped: ``AutocastModule.forward`` enters
``torch.autocast`` (and, for tf32, sets and restores the TF32 flags) around the inner forward. Global
flags are never left changed. fp16 training needs loss scaling: ``grad_scaler()`` gives the GradScaler.

The wrapper's TF32 covers the forward only — all of inference, but a third of a training step's matmul FLOPs:
backward runs after ``forward`` returned, with the caller's flags. To train in TF32, run the whole step (forward,
backward, optimizer step) under ``tf32_enabled(True)``, as the bench's training step does
(``accelkit.bench.workloads.base.tf32_scope``); for an fp32 baseline, under ``tf32_enabled(False)`` (cuDNN's TF32
flag defaults to True, so "fp32" convolutions otherwise use TF32).
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

import torch

from accelkit.core import Recipe
from accelkit.recipes.base import ApplyContext, Technique, keep_state_dict_keys

_AUTOCAST = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp8": torch.bfloat16}
_SHORT = {torch.bfloat16: "bf16 autocast", torch.float16: "fp16 autocast", None: "no autocast"}


@contextlib.contextmanager
def tf32_enabled(enabled: bool) -> Iterator[None]:
    """TF32 on (or off) for fp32 matmuls and cuDNN convolutions in the block, restored after (no global state
    leaks). Enter it around a whole training step: backward's matmuls read the flags when backward runs."""
    # the legacy flags only, as bench.variants.numerics sets them: torch ≥ 2.9 raises from
    # get_float32_matmul_precision() once set_float32_matmul_precision and allow_tf32 have both been used
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32 = enabled
    torch.backends.cudnn.allow_tf32 = enabled
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


#: methods of the wrapped model that run its forward themselves (Hugging Face's ``generate``): reached through the
#: wrapper, they run under its autocast too
THROUGH_FORWARD = ("generate",)


class AutocastModule(torch.nn.Module):
    """Runs ``inner``'s forward under autocast to ``dtype`` (or fp32 with TF32 when ``tf32``). Forward only: for
    TF32 training, enter ``tf32_enabled(True)`` around backward and the optimizer step too (module docstring).
    Its state_dict keys are ``inner``'s own (no ``inner.``), so a checkpoint saved after training loads into the
    model as built."""

    def __init__(self, inner: torch.nn.Module, *, device_type: str, dtype: torch.dtype | None, tf32: bool = False):
        super().__init__()
        self.inner = inner
        self.device_type, self.dtype, self.tf32 = device_type, dtype, tf32
        # the model's mode, not a new Module's True: apply() reads ``model.training`` to pick the inference or the
        # training form of a recipe, and a second apply on an eval model took this wrapper for a training one
        self.training = inner.training
        keep_state_dict_keys(self, "inner.")

    @contextlib.contextmanager
    def _context(self) -> Iterator[None]:
        """The autocast (and TF32 flags) this wrapper runs its model under."""
        with contextlib.ExitStack() as stack:
            if self.dtype is not None:
                stack.enter_context(torch.autocast(self.device_type, dtype=self.dtype))
            if self.tf32:
                stack.enter_context(tf32_enabled(True))
            yield

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        with self._context():
            return self.inner(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:  # reach through to the wrapped model's attributes (config, generate …)
            value = getattr(super().__getattr__("inner"), name)
        if name in THROUGH_FORWARD and callable(value):
            # generate calls the wrapped model's own forward, not this one: without the context it ran in fp32
            # (found in review)
            @functools.wraps(value)
            def in_context(*args: Any, **kwargs: Any) -> Any:
                with self._context():
                    return value(*args, **kwargs)

            return in_context
        return value


class MixedPrecision(Technique):
    """precision = bf16 | fp16 (autocast), tf32 (TF32 tensor-core matmuls), or fp8 (bf16 autocast around the
    fp8 linears)."""

    name = "mixed-precision"

    def wanted(self, recipe: Recipe) -> bool:
        return recipe.precision in ("bf16", "fp16", "tf32", "fp8")

    def refusal(self, recipe: Recipe, ctx: ApplyContext) -> str | None:
        dev = ctx.device
        if recipe.precision == "tf32" and not dev.sm_at_least(8, 0):
            return (f"precision='tf32' needs an NVIDIA Ampere (SM80) or newer GPU; {dev.name} has no TF32 "
                    "tensor cores — use precision='bf16' or 'fp32'")
        if recipe.precision in ("bf16", "fp8") and dev.is_cuda and not dev.is_rocm and not dev.sm_at_least(8, 0):
            return f"precision='bf16' needs SM80+ for tensor-core bf16; {dev.name} is older — use precision='fp16'"
        return None

    def model_refusal(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> str | None:
        wrapped = next((m for m in model.modules() if isinstance(m, AutocastModule)), None)
        if wrapped is not None:
            # the inner autocast wins: a second apply asking for fp16 ran bf16 without a word
            now = "tf32" if wrapped.tf32 else _SHORT.get(wrapped.dtype, str(wrapped.dtype))
            return (f"precision={recipe.precision!r}: {type(wrapped.inner).__name__} already runs under {now} (an "
                    "AutocastModule from an earlier apply), which would override it; apply one Recipe, with all its "
                    "fields, to the model as built")
        if recipe.precision in ("bf16", "fp16") and any(
                type(m).__module__.startswith("torch.ao.nn.quantized") for m in model.modules()):
            return (f"precision={recipe.precision!r}: {type(model).__name__} holds torch.ao int8 dynamic-quantized "
                    "Linears (an earlier apply of quantization='int8-dynamic'), whose kernels take fp32 activations "
                    "only; keep it fp32, or apply precision without the quantization to the model as built")
        return None

    def apply(self, model: torch.nn.Module, recipe: Recipe, ctx: ApplyContext) -> torch.nn.Module:
        tf32 = "tf32 matmuls in forward" + (
            " only: run backward and the optimizer step under accelkit.recipes.precision.tf32_enabled(True) too"
            if ctx.training else "")
        ctx.notes.append({"tf32": tf32, "fp8": "autocast bf16 around the fp8 linears"}.get(
            recipe.precision, f"autocast {recipe.precision}"))
        return AutocastModule(
            model, device_type=ctx.device.torch_device, dtype=_AUTOCAST.get(recipe.precision),
            tf32=recipe.precision == "tf32",
        )


def grad_scaler(recipe: Recipe, device_type: str) -> torch.amp.GradScaler:
    """The loss scaler fp16 training needs (a disabled no-op scaler for every other precision)."""
    return torch.amp.GradScaler(device_type, enabled=recipe.precision == "fp16")
