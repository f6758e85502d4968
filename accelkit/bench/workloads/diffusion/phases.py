"""Where a generation call's time goes: the text encoders, each denoiser step and the VAE decode, timed inside the
real pipeline call by forward hooks on those modules — host clocks on a CPU, CUDA events on a GPU (recorded on the
current stream, read once they have completed: no synchronize is added inside a call) — and, while a FLOP counter
runs, the model FLOPs of each phase (the counter's total read at each hook).

The pipeline is diffusers' own ``__call__``; nothing of it is re-implemented here. What the hooks do not cover —
tokenization, the scheduler's update, latent preparation, post-processing, Python — is the ``other`` phase: the call
minus the phases.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

TEXT, DENOISER, VAE, OTHER = "text encoders", "denoiser", "vae decode", "other"
PHASES = (TEXT, DENOISER, VAE)


@dataclass
class _Call:
    """The marks of one generation call: (phase, start, end) per hooked forward, and the call's own start and end.
    A mark is a perf_counter_ns reading (CPU) or a recorded CUDA event."""

    start: Any
    spans: list[tuple[str, Any, Any]] = field(default_factory=list)
    end: Any = None


@dataclass
class _Timed:
    """One finished call in seconds: the call, and each phase's spans in order."""

    total_s: float
    spans: dict[str, list[float]]


class PhaseRecorder:
    """Forward hooks on a pipeline's text encoders, denoiser and VAE decoder (:meth:`add`); ``wrap(fn)`` makes a
    generation call record its phases. Calls are kept in seconds once their marks have completed (``timed``). The
    phases never nest, so one span per phase is open at a time."""

    def __init__(self, device: str):
        self.device = device
        self.cuda = device.startswith("cuda")
        self.counter: Any = None  # a FlopCounterMode while FLOPs are being counted
        self.flops: dict[str, float] = {}  # phase → FLOPs per generation call (``other``: the call minus the phases)
        self.timed: list[_Timed] = []
        self._pending: list[_Call] = []
        self._call: _Call | None = None
        self._open: dict[str, tuple[Any, float]] = {}
        self._handles: list[Any] = []

    def add(self, phase: str, module: Any, *, end: Any = None) -> None:
        """Time ``phase`` from the start of ``module``'s forward to the end of ``end``'s (default: the same module's;
        the VAE decode runs post_quant_conv, then the decoder)."""
        self._handles.append(module.register_forward_pre_hook(self._enter(phase)))
        self._handles.append((end or module).register_forward_hook(self._leave(phase)))

    def _mark(self) -> Any:
        if not self.cuda:
            return time.perf_counter_ns()
        import torch

        event = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        # on the measured device's current stream, where its kernels run (cuda:1 is not the current device's)
        event.record(torch.cuda.current_stream(torch.device(self.device)))
        return event

    def _enter(self, phase: str) -> Callable[..., None]:
        def hook(module: Any, args: Any) -> None:
            if self._call is not None or self.counter is not None:
                flops = float(self.counter.get_total_flops()) if self.counter is not None else 0.0
                self._open[phase] = (self._mark() if self._call is not None else None, flops)
        return hook

    def _leave(self, phase: str) -> Callable[..., None]:
        def hook(module: Any, args: Any, output: Any) -> None:
            opened = self._open.pop(phase, None)
            if opened is None:
                return
            start, flops = opened
            if self.counter is not None:
                self.flops[phase] = self.flops.get(phase, 0.0) + float(self.counter.get_total_flops()) - flops
            if self._call is not None:
                self._call.spans.append((phase, start, self._mark()))
        return hook

    def wrap(self, fn: Callable[[], object]) -> Callable[[], object]:
        """``fn`` (one generation call) with its phases recorded."""
        def call() -> object:
            self._collect()
            self._call = _Call(start=self._mark())
            try:
                return fn()
            finally:
                self._call.end = self._mark()
                self._pending.append(self._call)
                self._call = None
        return call

    def count(self, fn: Callable[[], object], counter: Any) -> float:
        """Run ``fn`` once under ``counter`` (a FlopCounterMode), keeping each phase's FLOPs in ``flops``; returns the
        call's total."""
        self.flops = {}
        self.counter = counter
        try:
            with counter:
                fn()
        finally:
            self.counter = None
        total = float(counter.get_total_flops())
        self.flops[OTHER] = total - sum(self.flops.values())
        return total

    def _seconds(self, start: Any, end: Any) -> float:
        return float((end - start) * 1e-9 if not self.cuda else start.elapsed_time(end) * 1e-3)

    def _collect(self, *, wait: bool = False) -> None:
        """Turn finished calls into seconds: on a GPU those whose last event has completed (``wait``: all, after a
        synchronize)."""
        if self.cuda and wait and self._pending:
            import torch

            torch.cuda.synchronize(torch.device(self.device))
        keep = []
        for call in self._pending:
            if self.cuda and not call.end.query():
                keep.append(call)
                continue
            spans: dict[str, list[float]] = {}
            for phase, start, end in call.spans:
                spans.setdefault(phase, []).append(self._seconds(start, end))
            self.timed.append(_Timed(self._seconds(call.start, call.end), spans))
        self._pending = keep

    def summary(self, *, measured: int | None = None) -> list[dict[str, Any]]:
        """Per phase, over the last ``measured`` calls (the measured blocks' calls; None: every call but the cold
        first): calls of the phase per generation call, the median seconds it takes per generation call and its share
        of the calls' time, the median of one call of it (one denoiser step), FLOPs per generation call when they were
        counted — and, for the denoiser, the median of each step. The ``other`` phase is the call minus the hooked
        phases. The warm-up's calls go through the same wrapped step, and they were summarised with the measured ones
        (8 warm-up calls beside 5 measured: found in review).

        A share is the phase's seconds summed over the calls ÷ the calls' seconds summed, and ``other``'s is the rest,
        so the shares add to 1. Each phase's median over the median call did not: the phases vary independently from
        call to call, so the medians of the parts do not add to the median of the whole (the shares added to 64–86%:
        found in review)."""
        self._collect(wait=True)
        calls = (self.timed[-measured:] if measured else self.timed[1:]) or self.timed
        if not calls:
            return []
        calls_s = sum(c.total_s for c in calls)
        rows: list[dict[str, Any]] = []
        for phase in (*PHASES, OTHER):
            if phase == OTHER:
                per_call = [c.total_s - sum(sum(v) for v in c.spans.values()) for c in calls]
                spans: list[list[float]] = [[]]
            else:
                spans = [c.spans.get(phase, []) for c in calls]
                per_call = [sum(s) for s in spans]
            if calls_s <= 0:
                share = None
            elif phase == OTHER:  # the rest, so the shares add to 1 (never below 0 by rounding: a share is ≥ 0)
                share = max(0.0, 1 - sum(r["share"] for r in rows))
            else:
                share = sum(per_call) / calls_s
            row: dict[str, Any] = {
                "phase": phase, "calls": len(spans[0]) if phase != OTHER else 0,
                "median_s": statistics.median(per_call), "share": share,
                "call_median_s": statistics.median(x for s in spans for x in s) if any(spans) else None,
                "flops": self.flops.get(phase),
            }
            if phase == DENOISER and spans[0]:
                steps = min(len(s) for s in spans)
                row["per_step_s"] = [statistics.median(s[i] for s in spans) for i in range(steps)]
            rows.append(row)
        return rows

    def close(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()
