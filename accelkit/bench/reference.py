"""The fp32 reference of a run, at no more memory than the variants themselves (issue 13: the first H200 run of a
1B model at batch 8 × 2048 died in this phase with 129.8 GB allocated, before any variant ran).

- **FLOPs** are counted on the **meta device**: the fp32 eager model built without storage, its step run once
  under ``FlopCounterMode`` at the measured shapes — exact, and free at any size. A model the meta device cannot
  run (data-dependent Python, an op without a meta kernel) is counted on the fp32 variant when the run measures
  it first, else once on this device (guarded: a count that does not fit leaves a note and MFU falls back to the
  workload's analytic formula).
- **The drift reference** is the fp32 model's output on a small fixed slice of the batch (``EVAL_ROWS`` rows),
  under ``inference_mode``: fp32 weights plus one forward of two rows. Built only when accuracy is asked for and
  the first variant is not plain fp32 (that variant, loaded before the others, is then their reference), and
  freed before any variant loads.

Neither touches what a variant measures: every variant builds its own model from the same seed.
"""

from __future__ import annotations

import contextlib
import gc
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelkit.bench.metrics import FLOPS_SOURCE, FLOPS_SOURCE_ON_DEVICE, count_flops, meta_grouped_mm
from accelkit.bench.variants import Variant

if TYPE_CHECKING:
    from accelkit.bench.workloads.base import BenchWorkload, Prepared


@dataclass(slots=True)
class Reference:
    """What the variants are compared with: the fp32 output on the evaluation slice, and FLOPs per item."""

    output: Any = None  # torch.Tensor on the CPU, or None
    flops: dict[str, float] = field(default_factory=dict)  # step name → model FLOPs per item
    flops_source: str = FLOPS_SOURCE
    notes: list[str] = field(default_factory=list)
    #: why the meta device could not count FLOPs, when the fp32 variant (measured first) is to count them instead
    meta_failure: str | None = None

    def flops_note(self, device: str, variant_failure: str | None) -> str | None:
        """Once the run is over: where the FLOPs the fp32 variant was to count came from — counted by it, or not at
        all (``variant_failure``: why that variant failed; None when the run stopped before it counted them).
        None when the meta device counted them or the fp32 variant was not asked to."""
        if self.meta_failure is None:
            return None
        if self.flops:
            return f"FLOPs counted on {device} by the fp32 variant, not on the meta device ({self.meta_failure})"
        why = variant_failure or "the run was interrupted before it counted them"
        return (f"FLOPs not counted: the meta device could not run the model ({self.meta_failure}) and the fp32 "
                f"variant, which was to count them on {device}, did not ({why}); MFU uses the analytic formula "
                "where there is one")


#: how many runs (``run_benchmark``, in any thread) are inside :func:`freezing_heap` now, and whether one of them
#: froze the heap; both under ``_heap_lock``
_heap_lock = threading.Lock()
_heap_runs = 0
_heap_frozen_here = False


@contextlib.contextmanager
def freezing_heap() -> Iterator[None]:
    """A run's hold on the cyclic collector: inside it, ``free(device, idle=True)`` freezes (``gc.freeze``) what
    survives its full collection, and the heap is handed back (``gc.unfreeze``) on the way out, also on Ctrl-C and
    errors — so nothing the run froze is still frozen when the process exits (native modules such as nanobind's
    report what the collector cannot see at exit as leaks) or when the caller goes on (a cycle frozen while alive is
    freed only once unfrozen). A heap someone else froze before (a test session, a server's ``frozen_heap``) is
    left as it is, and so is the heap while a second run goes on in another thread (freezing there could freeze
    that run's loaded variant)."""
    global _heap_runs, _heap_frozen_here
    with _heap_lock:
        _heap_runs += 1
    try:
        yield
    finally:
        with _heap_lock:
            _heap_runs -= 1
            if _heap_runs == 0 and _heap_frozen_here:
                gc.unfreeze()
                _heap_frozen_here = False


def free(device: str, *, idle: bool = False) -> None:
    """Free what the last variant (or the reference model) left: a full collection (:func:`collect`) — its model
    may be held in reference cycles, which only a collection frees — then the device's cache back to the device (the
    CUDA caching allocator keeps it otherwise)."""
    collect(idle=idle)
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def collect(*, idle: bool = False) -> None:
    """A full collection. ``idle``: no variant is loaded now, so what survives the collection is the process's own: modules (torch,
    transformers, what a variant's load imported — torch.compile's alone some 230,000 objects), the run's records.
    Inside :func:`freezing_heap` it is then frozen, so that the next collection walks only what came after: each
    full collection walked the whole heap, 0.2–0.6 s on the 2-core VM once a compile variant had run (600,000
    objects; `bench bert --size tiny` with six variants one after another). Frozen only after the collection, and
    only while idle, so that no variant's model is frozen: a frozen cycle is never freed until the heap is handed
    back, and the next variant would be measured beside it."""
    global _heap_frozen_here
    gc.collect()
    # (not while an exception is being handled: its traceback's frames may still hold the model that failed, which
    # a freeze would keep alive beside every later variant)
    if idle and sys.exc_info()[0] is None:
        with _heap_lock:
            if _heap_runs == 1 and (_heap_frozen_here or not gc.get_freeze_count()):
                gc.freeze()
                _heap_frozen_here = True


def _is_oom(exc: BaseException) -> bool:
    import torch

    return isinstance(exc, (MemoryError, torch.OutOfMemoryError))


def step_flops(prepared: Prepared) -> dict[str, float]:
    """Model FLOPs per item of each step: one first call (seeds caches, e.g. a decode's KV cache), then
    ``step.cycle`` counted calls."""
    out = {}
    for step in prepared.steps:
        per_call = step.flops_per_call() if step.flops_per_call is not None else None
        if per_call is None:
            with meta_grouped_mm():  # the first call too: an MoE's grouped GEMMs run on meta tensors of any dtype
                step.fn()
            per_call = count_flops(step.fn, calls=step.cycle)
        out[step.name] = per_call / step.items
    return out


def count_on_meta(workload: BenchWorkload, seed: int) -> tuple[dict[str, float], str | None]:
    """FLOPs per item of every step at the measured shapes, on the meta device; ({}, why) when it cannot run."""
    prepared = None
    try:
        prepared = workload.prepare(Variant(), "meta", seed=seed)
        return step_flops(prepared), None
    except Exception as exc:  # the meta device cannot run every model; the caller falls back
        return {}, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
    finally:
        if prepared is not None:
            prepared.close()


def count_on_device(workload: BenchWorkload, device: str, seed: int) -> tuple[dict[str, float], str | None]:
    """FLOPs per item counted on the fp32 model on ``device`` (the fallback); ({}, why) when it does not fit."""
    prepared = None
    try:
        prepared = workload.prepare(Variant(), device, seed=seed)
        return step_flops(prepared), None
    except Exception as exc:
        if not _is_oom(exc):
            raise
        return {}, f"the fp32 model does not fit on {device} to count its FLOPs ({type(exc).__name__})"
    finally:
        if prepared is not None:
            prepared.close()
        del prepared
        free(device, idle=True)  # before any variant loads


def output_on_slice(workload: BenchWorkload, device: str, seed: int) -> tuple[Any, str | None]:
    """The fp32 eager output on the evaluation slice (on the CPU), or (None, why not)."""
    import torch

    prepared = None
    try:
        prepared = workload.prepare(Variant(), device, seed=seed)
        if prepared.evaluate is None:
            return None, None
        with torch.inference_mode():
            return prepared.evaluate().detach().float().cpu(), None
    except Exception as exc:
        if not _is_oom(exc):
            raise
        return None, (f"no fp32 drift reference: the fp32 model does not fit on {device} beside nothing else "
                      f"({type(exc).__name__}); the variants' accuracy is not compared")
    finally:
        if prepared is not None:
            prepared.close()
        del prepared
        free(device, idle=True)  # before any variant loads


def build_reference(workload: BenchWorkload, variants: list[Variant], device: str, *, seed: int,
                    accuracy: bool) -> Reference:
    """FLOPs (meta device) and, when needed, the fp32 output on the slice — everything freed on return."""
    ref = Reference()
    if workload.task == "input":
        return ref
    ref.flops, why = count_on_meta(workload, seed)
    # the fp32 variant can stand in only when it loads before every other: a variant measured (and, run one after
    # another, stored) before it would have no drift and no FLOPs (`--precision bf16,fp32` had neither for bf16)
    fp32_first = bool(variants) and variants[0].is_reference
    if not ref.flops:
        ref.flops_source = FLOPS_SOURCE_ON_DEVICE
        if fp32_first:  # the fp32 variant counts its own, at no extra memory; whether it did is known only after it
            ref.meta_failure = why  # ran (it may fail first): flops_note says which
        else:
            ref.flops, oom = count_on_device(workload, device, seed)
            ref.notes.append(f"FLOPs not counted: the meta device could not run the model ({why}) and {oom}; MFU "
                             "uses the analytic formula where there is one" if oom
                             else f"FLOPs counted on {device}, not on the meta device ({why})")
    if accuracy and not fp32_first:
        ref.output, note = output_on_slice(workload, device, seed)
        if note:
            ref.notes.append(note)
    return ref
