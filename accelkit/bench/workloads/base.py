"""The workload plug-in shape: a config (a Spec), a class that builds one variant of the model and
returns the timed steps, and a registry at the edge (``workloads/__init__.py``).

A workload never times anything itself: it returns :class:`Step` objects (a callable plus what one call
produces) and the runner puts them through the phases and the timing loop.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from accelkit.bench.variants import Variant, needs_context, numerics
from accelkit.core import ModelSpec, UserError
from accelkit.core import Workload as WorkloadSpec
from accelkit.core.spec import Spec
from accelkit.hardware.device import free_memory_bytes
from accelkit.models.build import check_buildable

if TYPE_CHECKING:
    import torch

    from accelkit.core import Estimate
    from accelkit.core.bench_result import OutputGate

Task = Literal["infer", "train", "input"]
#: rows of the batch the accuracy drift is computed on: a small fixed slice, so the fp32 reference output costs
#: a forward of these rows, not of the whole batch (the first H200 run's reference of a 1B model at b8 × s2048
#: died out of memory)
EVAL_ROWS = 2
#: the most a size flag (batch, sequence, image side) may ask for: torch tensor sizes are signed 64-bit integers
MAX_SIZE = 2**63 - 1
#: bytes of one activation value at the narrowest precision a variant computes in (bf16/fp16): memory lower bounds
#: use it so that a refusal holds for every variant
ACT_BYTES = 2


@dataclass(slots=True)
class Step:
    """One timed operation of a workload (a forward, a training step, a prefill, one decode step)."""

    name: str
    fn: Callable[[], object]
    items: int  # items one call produces (samples, images, tokens)
    unit: str  # "samples", "images", "tokens"
    latency_name: str = "step latency"
    cycle: int = 1  # calls after which the shapes repeat (decode: output_len); FLOPs average over it
    returns_loss: bool = False  # a training step: fn() returns the loss (the bench keeps the first steps')
    analytic_flops_per_item: float | None = None
    analytic_formula: str | None = None
    #: model FLOPs of one call averaged over the cycle, counted more cheaply than ``cycle`` calls under the counter
    #: (a decode step: three contexts instead of every one); None from it, or no function: count the whole cycle
    flops_per_call: Callable[[], float | None] | None = None
    #: calls' worth of work the first call does (decode: a prefill, then a whole cycle and one step): with no
    #: warm-up, the first call's time ÷ this sizes the measured blocks
    first_call_calls: int = 1
    #: phases timed inside the call (text-to-image: text encoders, denoiser steps, VAE decode), read once the lane
    #: is measured, given the number of measured calls (the last ones; the warm-up's come before): one dict per phase
    #: with the fields of ``core.bench_result.PhaseTime`` less its MFU, and "flops" (the phase's model FLOPs per call,
    #: or None); None: the step has no phases
    phases: Callable[[int], list[dict[str, Any]]] | None = None


@dataclass(slots=True)
class Prepared:
    """A variant ready to run: its steps, the output on the fixed evaluation slice (the first ``EVAL_ROWS``
    rows of the batch), and a cleanup."""

    steps: list[Step]
    evaluate: Callable[[], torch.Tensor] | None = None
    close: Callable[[], None] = lambda: None
    notes: list[str] = field(default_factory=list)


class BenchWorkload(ABC):
    """Base of every workload. Subclasses set ``name``, ``config_cls``, ``task`` and ``summary``."""

    name: ClassVar[str]
    config_cls: ClassVar[type[Spec]]
    task: ClassVar[Task]
    summary: ClassVar[str]
    #: whether the output is logits over classes (accuracy gates then read top-1 agreement); False: a hidden state
    #: or other features (cosine and SQNR only); None: guessed from its shape
    output_is_logits: ClassVar[bool | None] = None
    #: False where interleaving would be unfair (the data loader's idle workers keep prefetching)
    can_interleave: ClassVar[bool] = True
    is_cnn: ClassVar[bool] = False

    def __init__(self, config: Spec):
        if not isinstance(config, self.config_cls):
            raise TypeError(f"{self.name} takes a {self.config_cls.__name__}")
        self.config: Any = config

    @property
    @abstractmethod
    def label(self) -> str:
        """Short human label with the shapes, e.g. 'bert tiny-bert b8 s384'."""

    def spec(self) -> WorkloadSpec | None:
        """The workload in the planner's vocabulary (None when it has no architecture, e.g. custom)."""
        return None

    def variants(self, requested: list[Variant]) -> list[Variant]:
        """The variants to run; most workloads run the precision matrix as asked."""
        return requested

    def refusal(self, variant: Variant, device: str) -> str | None:
        """Workload-level reasons a variant cannot run (device reasons are checked separately)."""
        if self.task != "train" and variant.recompute:
            return "activation checkpointing only changes training; this workload is inference"
        if self.task == "train" and variant.effective_precision == "int8":
            return "int8 dynamic quantization is inference-only; train with bf16, fp16 or fp8"
        if variant.channels_last and not self.is_cnn:
            return f"channels_last is a layout for 4-D CNN inputs; {self.name} has none"
        if variant.fp8_scaling != "tensorwise" and self.task != "train":
            return (f"fp8 {variant.fp8_scaling} scaling is a training recipe (torchao.float8); fp8 inference is dynamic "
                    "per-tensor quantization — drop --fp8-scaling for this workload")
        return None

    def check(self, device: str) -> None:
        """Raise UserError when the workload as configured cannot run on ``device`` at all."""
        return None

    def output_gate(self, reference: torch.Tensor, output: torch.Tensor) -> OutputGate | None:
        """The workload's own accuracy gate on a variant's evaluation output against the fp32 one (both as
        ``Prepared.evaluate`` returned them, on the CPU); None: only the generic drift figures apply."""
        return None

    def estimate(self, variant: Variant, device: str, catalog: str | None) -> tuple[Estimate | None, str | None] | None:
        """The planner's estimate of ``variant`` (or None and why not) when the workload plans itself — a
        text-to-image pipeline is no ``Workload`` of the planner's; None: the generic call in
        ``accelkit.bench.predict``."""
        return None

    @abstractmethod
    def prepare(self, variant: Variant, device: str, *, seed: int) -> Prepared:
        """Build the model for ``variant`` on ``device`` (random weights from ``seed``) and its steps."""


# ---- helpers shared by the workloads -------------------------------------------------------------------
def run_in(variant: Variant, device: str, fn: Callable[[], object], *, inference: bool) -> Callable[[], object]:
    """``fn`` wrapped in the variant's math mode (and inference mode); bare when neither is needed, so
    the harness adds nothing to a plain fp32 step."""
    ctx = needs_context(variant, device)
    if not ctx and not inference:
        return fn
    import torch

    def wrapped() -> object:
        with contextlib.ExitStack() as stack:
            if inference:
                stack.enter_context(torch.inference_mode())
            if ctx:
                stack.enter_context(numerics(variant, device))
            return fn()

    return wrapped


def first_tensor(output: Any) -> torch.Tensor:
    """The tensor a model output stands for: logits, last hidden state, or the first tensor in it."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    for key in ("logits", "last_hidden_state"):
        value = getattr(output, key, None)
        if isinstance(value, torch.Tensor):
            return value
    items = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    for value in items:
        if isinstance(value, torch.Tensor):
            return value
    raise UserError(f"cannot find a tensor in the model output of type {type(output).__name__}")


def free_bytes(device: str) -> tuple[int, str]:
    """(bytes the workload may use on ``device``, how to say so in an error)."""
    free = free_memory_bytes(device)
    if device.startswith("cuda"):
        return free, f"{device} has {free / 1e9:.1f} GB free"
    return free, f"this machine has {free / 1e9:.1f} GB of RAM available"


def gb(num_bytes: float) -> str:
    """Bytes as GB in one short token, however absurd the size (a fuzzed 10**40 stays one word)."""
    return f"{num_bytes / 1e9:.1f} GB" if num_bytes < 1e15 else f"{num_bytes / 1e9:.3g} GB"


def check_workload(workload: BenchWorkload, device: str) -> None:
    """Everything refused before a run: the workload's own ``check``, then — for a workload of a model preset or
    config.json — whether transformers builds that architecture at all."""
    workload.check(device)
    spec = getattr(workload, "model_spec", None)
    if isinstance(spec, ModelSpec):
        check_buildable(spec)


def check_fits(num_params: int, device: str, what: str, *, data_bytes: int = 0,
               shape: dict[str, int] | None = None) -> None:
    """Refuse up front when the run cannot fit: fp32 weights alone (weights are built in fp32), or those plus
    ``data_bytes`` — a lower bound of the inputs and activations that one step at ``shape`` (flag → value) must hold
    at once, so a refusal never turns away a run that would have fitted; it names the flags to lower."""
    needed = num_params * 4
    free, where = free_bytes(device)
    if needed * 6 > free * 5:  # 20% headroom; integers, since a fuzzed size can exceed a float
        raise UserError(
            f"{what} needs {gb(needed)} for fp32 weights alone and {where}; "
            "pick a smaller --model (e.g. tiny-llama) or a bigger device"
        )
    if data_bytes and (needed + data_bytes) * 6 > free * 5:
        given = list((shape or {}).items())
        flags = " ".join(f"{flag} {value}" for flag, value in given)
        lower = ", ".join(flag for flag, _ in given[:-1]) + (" or " if len(given) > 1 else "") + given[-1][0]
        raise UserError(
            f"{what} at {flags} needs at least {gb(data_bytes)} for one step's inputs and activations (beside "
            f"{gb(needed)} of fp32 weights) and {where}; lower {lower}"
        )


def model_seed(seed: int) -> Any:
    """A torch generator for inputs, separate from the weights' seed. Wrapped to 64 bits: torch takes seeds up to
    2**64 - 1 and the largest seed (or a rank added to it) would otherwise overflow."""
    import torch

    return torch.Generator().manual_seed((seed + 1) % 2**64)


def tf32_scope(variant: Variant, device: str, step: Callable[[], object]) -> Callable[[], object]:
    """``step`` (a whole training step: forward, backward and the optimizer step) under TF32 on CUDA: on for tf32,
    off for every other variant. Autocast covers the forward only, but the TF32 flags are read by every fp32 matmul
    and conv, and backward holds about 2/3 of a step's matmul FLOPs: scoped to the forward, tf32 trained mostly in
    full fp32. Off means both flags: cuDNN's defaults to True, so an "fp32" baseline's convolutions would use TF32.
    Flags are restored afterwards. On a CPU (no TF32) ``step`` itself, bare. Decided here, once, not per timed step."""
    if not device.startswith("cuda"):
        return step
    # lazy: recipes import torch, and the CLI loads this module at start-up
    from accelkit.recipes.precision import tf32_enabled

    enabled = variant.effective_precision == "tf32"

    def scoped() -> object:
        with tf32_enabled(enabled):
            return step()

    return scoped


def train_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    compute_loss: Callable[[], torch.Tensor],
    variant: Variant,
    device: str,
) -> Callable[[], object]:
    """One optimizer step: zero grads → forward + loss (in the variant's math mode) → backward → step, all under the
    variant's TF32 setting (:func:`tf32_scope`); returns the loss. fp16 uses a GradScaler (its dynamic range needs
    loss scaling); bf16 and fp8 do not."""
    import torch

    scaler = torch.amp.GradScaler(device.split(":")[0]) if variant.effective_precision == "fp16" else None
    forward = run_in(variant, device, compute_loss, inference=False)  # autocast: the forward only

    def step() -> object:
        optimizer.zero_grad(set_to_none=True)
        loss: torch.Tensor = forward()  # type: ignore[assignment]
        if scaler is not None:
            scaler.scale(loss).backward()  # type: ignore[no-untyped-call]
            scaler.step(optimizer)
            scaler.update()
        else:
            loss.backward()  # type: ignore[no-untyped-call]
            optimizer.step()
        return loss

    return tf32_scope(variant, device, step)


def evaluate_fn(model: torch.nn.Module, variant: Variant, device: str, forward: Callable[[], Any]) -> Callable[[], Any]:
    """The model's output on the fixed batch in eval mode, for the accuracy drift (training workloads
    flip back to train mode afterwards)."""

    def evaluate() -> Any:
        was_training = model.training
        model.eval()
        try:
            return first_tensor(run_in(variant, device, forward, inference=True)())
        finally:
            model.train(was_training)

    return evaluate
