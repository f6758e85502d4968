"""Gradient communication compression on real ranks (``Recipe.grad_compression``), with every byte handed to a
gradient collective counted — PyTorch's own mechanisms, nothing re-implemented:

* DDP (ZeRO 0): a communication hook per bucket — ``default_hooks.allreduce_hook`` for ``none`` (what DDP's
  built-in reducer does, in Python, so that its bytes are counted the same way), ``bf16_compress_hook`` /
  ``fp16_compress_hook``, or ``powerSGD_hook`` with a ``PowerSGDState``;
* FSDP2 (ZeRO 2/3): ``MixedPrecisionPolicy(reduce_dtype=bfloat16|float16)`` — the gradients are cast into the
  reduce-scatter buffer; PowerSGD is refused before launch (``accelkit.recipes.grad_compression``).

Counting. Each DDP hook call goes through :func:`counted_hook`, which records the bucket (its plain gradient bytes)
and runs torch's hook inside a ``TorchFunctionMode`` (:class:`HookCollectives`, thread-local, live for that call only)
that records every ``torch.distributed.all_reduce`` the hook issues — directly, or from the ``Future.then`` callbacks
it chains (PowerSGD's P and Q all-reduces): those callbacks run on the calling thread (below), so the mode sees them.
DDP's own C++ reducer does not go through Python (hence torch's ``allreduce_hook`` for ``none``). Under FSDP2 a
``ReduceScatter`` subclass set with ``FSDPModule.set_custom_reduce_scatter`` counts the input buffer of every
reduce-scatter. The figure is the size of the buffers handed to the collective per rank and step (nccl-tests' S),
the same quantity the planner predicts (``accelkit.plan.grad_comm``).

No Python on gloo's threads. A ``Future.then`` callback runs on the thread that completes the future: on gloo, one of
the process group's worker threads, which also drops the callback afterwards (taking the GIL to do so). PowerSGD's P
and Q all-reduces, issued from those callbacks, then reached gloo in an order that differed between ranks once a
model had two or more buckets: gloo paired collectives of different sizes and aborted ("op.preamble.length <=
op.nbytes"), or the callbacks' nested waits held every worker thread. And a worker thread still dropping a callback
when the program ended could abort the rank at exit (``process_group.py`` has that story and the fix for the
group's lifetime). On gloo :class:`HookCollectives` therefore waits for each collective the hook issues before
handing back its ``Work``: every future the hook chains is complete when ``then`` is called, so torch runs the
callback at once, on the calling thread, and nothing of the hook's runs on gloo's threads. Buckets then also go
strictly one after another, the same on every rank. The cost: on gloo, a hooked bucket's all-reduce no longer
overlaps the rest of the backward pass. NCCL's futures complete once the collective is queued on the stream, so
their callbacks already run on the calling thread; there nothing waits.

bf16 on gloo. ``DistributedDataParallel.register_comm_hook`` refuses a hook *named* ``bf16_compress_hook``
unless CUDA + NCCL ≥ 2.10 (old NCCL had no bf16). gloo in the torch versions accelkit supports does all-reduce
bf16: :func:`check_backend` verifies it on the live process group (an exact sum of known bf16 values) before
the run, and on NCCL checks the 2.10 floor itself; the counting wrapper is what DDP registers, so its name check
does not apply.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from accelkit.core import Recipe

#: torch's PowerSGDState default is 0; a gradient matrix of zeros (a parameter no token touched) then turns
#: into NaN in the Gram-Schmidt division — torch's own docstring recommends a small value such as 1e-8
ORTHOGONALIZATION_EPSILON = 1e-8


class CommCounter:
    """Bytes handed to gradient collectives, per training step of this rank."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._active = False
        self._current: dict[str, int] = {}
        self.steps: list[dict[str, int]] = []
        self.note: str | None = None  # why bytes are not counted, where they cannot be

    # ---- recording (any thread)
    def add(self, key: str, value: int) -> None:
        with self._lock:
            if self._active:
                self._current[key] = self._current.get(key, 0) + value

    def collective(self, op: str, tensor: torch.Tensor) -> None:
        size = int(tensor.numel() * tensor.element_size())
        self.add("sent_bytes", size)
        self.add(f"{op}_bytes", size)
        self.add("collectives", 1)

    # ---- the step window
    def step(self, fn: Callable[[], Any]) -> Callable[[], Any]:
        """``fn`` (one training step) with its collectives counted; one record per call."""

        def counted() -> Any:
            with self._lock:
                self._active, self._current = True, {}
            try:
                return fn()
            finally:
                with self._lock:
                    self._active = False
                    self.steps.append(dict(self._current))

        return counted

    def summary(self, *, skip: int = 0) -> dict[str, Any]:
        """The steady state over the steps after the first ``skip`` (the untimed ones): bytes per step, and
        whether every step sent the same."""
        steps = self.steps[skip:] or self.steps
        sent = [s.get("sent_bytes", 0) for s in steps]
        last = steps[-1] if steps else {}
        return {
            "note": self.note, "steps_counted": len(steps), "sent_bytes_per_step": last.get("sent_bytes", 0),
            "min_sent_bytes": min(sent, default=0), "max_sent_bytes": max(sent, default=0),
            "gradient_bytes_per_step": last.get("gradient_bytes", 0), "buckets_per_step": last.get("buckets", 0),
            "collectives_per_step": last.get("collectives", 0),
            "by_collective": {k.removesuffix("_bytes"): v for k, v in last.items()
                              if k.endswith("_bytes") and k not in ("sent_bytes", "gradient_bytes")},
        }


@functools.cache
def _hook_collectives_class() -> type:
    """:class:`HookCollectives`, built on first use (torch stays out of this module's import)."""
    import torch.distributed as dist
    from torch.overrides import TorchFunctionMode

    class HookCollectives(TorchFunctionMode):
        """Live on this thread for one DDP hook call: counts every ``all_reduce`` the hook issues (with a counter)
        and, with ``complete_inline`` (gloo), waits for each before returning its ``Work`` — see the module
        docstring, "No Python on gloo's threads"."""

        def __init__(self, counter: CommCounter | None, complete_inline: bool) -> None:
            super().__init__()
            self.counter, self.complete_inline = counter, complete_inline

        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            result = func(*args, **(kwargs or {}))
            if func is dist.all_reduce:
                if self.counter is not None:
                    self.counter.collective("all_reduce", args[0] if args else kwargs["tensor"])
                if self.complete_inline and result is not None:  # async_op=True: a Work
                    result.wait()
            return result

    return HookCollectives


def counted_hook(hook: Callable[[Any, Any], Any], counter: CommCounter | None, *,
                 complete_inline: bool) -> Callable[[Any, Any], Any]:
    """torch's ``hook`` as DDP calls it, recording each bucket and the collectives the hook issues (with a
    ``counter``); with ``complete_inline`` (gloo) each of its collectives is complete before the hook goes on, so its
    ``Future.then`` callbacks run on the calling thread (the module docstring says why)."""
    mode = _hook_collectives_class()
    watched = counter is not None or complete_inline

    def accelkit_counted_hook(state: Any, bucket: Any) -> Any:
        if counter is not None:
            buffer = bucket.buffer()
            counter.add("gradient_bytes", int(buffer.numel() * buffer.element_size()))
            counter.add("buckets", 1)
        if not watched:
            return hook(state, bucket)
        with mode(counter, complete_inline):
            return hook(state, bucket)

    import torch
    import torch.distributed as dist

    # DDP checks the hook's annotations (this module's are strings: `from __future__ import annotations`)
    accelkit_counted_hook.__annotations__ = {"state": object, "bucket": dist.GradBucket,  # type: ignore[attr-defined]
                                             "return": torch.futures.Future[torch.Tensor]}
    return accelkit_counted_hook


def check_backend(recipe: Recipe, backend: str) -> None:
    """Refuse (RuntimeError, on every rank alike) a compression the live backend cannot reduce."""
    import torch
    import torch.distributed as dist

    kind = recipe.grad_compression
    if kind not in ("bf16", "fp16"):
        return
    if backend == "nccl" and kind == "bf16":
        nccl = tuple(torch.cuda.nccl.version())  # type: ignore[no-untyped-call]  # untyped in torch
        if nccl < (2, 10):
            raise RuntimeError(f"bf16 gradient compression needs NCCL 2.10+ (this torch has NCCL "
                               f"{'.'.join(map(str, nccl))}); use --grad-compression fp16 with --precision fp16, or none")
    dtype = torch.bfloat16 if kind == "bf16" else torch.float16
    device = "cpu" if backend == "gloo" else f"cuda:{torch.cuda.current_device()}"
    probe = torch.full((4,), 1.5, dtype=dtype, device=device)  # 1.5 · world is exact in both dtypes
    dist.all_reduce(probe)
    expected = 1.5 * dist.get_world_size()
    if not bool((probe.float() == expected).all()):
        raise RuntimeError(f"the {backend} backend does not all-reduce {kind} correctly here (got "
                           f"{probe.float().tolist()}, expected {expected}); use --grad-compression none")


def register_ddp_hook(model: Any, recipe: Recipe, counter: CommCounter | None = None) -> Any:
    """Register the DDP hook ``recipe.grad_compression`` names (counted with a ``counter``); returns the hook's
    state. Without a counter the wrapper keeps DDP's name check off torch's bf16 hook (see the module docstring) and,
    on gloo, completes the hook's collectives on the calling thread ("No Python on gloo's threads")."""
    import torch.distributed as dist
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks, powerSGD_hook

    kind = recipe.grad_compression
    state: Any = None  # the default hooks' state is the process group; None = the world
    if kind == "powersgd":
        state = powerSGD_hook.PowerSGDState(
            process_group=None, matrix_approximation_rank=recipe.powersgd_rank,
            start_powerSGD_iter=recipe.powersgd_start_iter, min_compression_rate=recipe.powersgd_min_compression_rate,
            use_error_feedback=recipe.powersgd_error_feedback, warm_start=recipe.powersgd_warm_start,
            orthogonalization_epsilon=ORTHOGONALIZATION_EPSILON, random_seed=0)
        hook: Callable[[Any, Any], Any] = powerSGD_hook.powerSGD_hook
    else:
        hook = {"none": default_hooks.allreduce_hook, "bf16": default_hooks.bf16_compress_hook,
                "fp16": default_hooks.fp16_compress_hook}[kind]
    inline = dist.get_backend() == "gloo"  # see "No Python on gloo's threads" above
    model.register_comm_hook(state, counted_hook(hook, counter, complete_inline=inline))
    return state


def fsdp_policy(recipe: Recipe) -> Any:
    """FSDP2's mixed-precision policy for the compression: the reduce dtype (parameters stay as they are)."""
    import torch
    from torch.distributed.fsdp import MixedPrecisionPolicy

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(recipe.grad_compression)
    return MixedPrecisionPolicy(reduce_dtype=dtype)


def count_fsdp(model: torch.nn.Module, counter: CommCounter) -> str | None:
    """Count every FSDP2 reduce-scatter's input buffer; returns why not where this torch cannot."""
    try:
        from torch.distributed.fsdp import FSDPModule
        from torch.distributed.fsdp._fully_shard._fsdp_collectives import DefaultReduceScatter
    except ImportError:
        return "this torch has no FSDP2 custom reduce-scatter (FSDPModule.set_custom_reduce_scatter): bytes not counted"

    # the gradients' own dtype is the parameters' (FSDP2 computes them in it and casts into the reduce buffer)
    plain_size = next(model.parameters()).element_size()

    class CountingReduceScatter(DefaultReduceScatter):
        def __call__(self, output_tensor: Any, input_tensor: Any, group: Any, op: Any, async_op: bool = False) -> Any:
            counter.collective("reduce_scatter", input_tensor)
            counter.add("gradient_bytes", int(input_tensor.numel()) * plain_size)
            counter.add("buckets", 1)
            return super().__call__(output_tensor, input_tensor, group, op, async_op)

    comm = CountingReduceScatter()
    modules = [m for m in model.modules() if isinstance(m, FSDPModule)]
    if not modules or not hasattr(modules[0], "set_custom_reduce_scatter"):
        return "this torch has no FSDPModule.set_custom_reduce_scatter: bytes not counted"
    for m in modules:
        m.set_custom_reduce_scatter(comm)
    return None
