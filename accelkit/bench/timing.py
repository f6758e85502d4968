"""The timing loop every measurement in accelkit goes through (methodology.md, "Warm-up and stopping").

Warm-up runs on the exact measured shapes until both a minimum count and a minimum time have passed;
the steady state runs until ``iterations >= min_iterations`` and ``elapsed >= min_time_s`` (or a hard
``max_iterations``). On CPU each iteration is timed with ``perf_counter_ns``; on CUDA with a pair of
device events per iteration and a single synchronize at the end, so timing adds no host stalls.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from accelkit.core.spec import Spec, spec_field


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopConfig(Spec):
    """Warm-up and stopping rule for one timed loop."""

    warmup_iterations: int = spec_field(10, min=0, doc="Minimum warm-up iterations (discarded).")
    warmup_time_s: float = spec_field(2.0, min=0.0, doc="Minimum warm-up wall time in seconds.")
    min_iterations: int = spec_field(10, min=1, doc="Measure at least this many iterations …")
    min_time_s: float = spec_field(10.0, min=0.0, doc="… and for at least this long (seconds).")
    max_iterations: int | None = spec_field(None, min=1, doc="Hard cap on measured iterations; None = none.")

    @classmethod
    def quick(cls) -> LoopConfig:
        """Short loops for smoke runs (``--quick``); percentiles will be flagged as unbacked."""
        return cls(warmup_iterations=3, warmup_time_s=0.2, min_iterations=5, min_time_s=1.0)


@dataclass(frozen=True, slots=True)
class LoopResult:
    """Per-iteration seconds of the steady state, plus the warm-up it took."""

    samples_s: list[float]
    warmup_iterations: int
    warmup_s: float
    timer: str


def _cuda_sync_fn(device: str) -> Callable[[], None] | None:
    if not device.startswith("cuda"):
        return None
    import torch

    return torch.cuda.synchronize


def time_loop(fn: Callable[[], object], config: LoopConfig, *, device: str = "cpu") -> LoopResult:
    """Run ``fn`` through warm-up and steady state; return the raw per-iteration times."""
    sync = _cuda_sync_fn(device)
    # warm-up: discarded, but both thresholds must be met
    start = time.perf_counter()
    warm = 0
    while warm < config.warmup_iterations or time.perf_counter() - start < config.warmup_time_s:
        fn()
        warm += 1
        if sync is not None and warm % 8 == 0:
            sync()  # keep the host from running far ahead of the device during warm-up
    if sync is not None:
        sync()
    warmup_s = time.perf_counter() - start

    if sync is None:
        samples: list[float] = []
        start_ns = time.perf_counter_ns()
        while True:
            t0 = time.perf_counter_ns()
            fn()
            samples.append((time.perf_counter_ns() - t0) * 1e-9)
            if _done(len(samples), (time.perf_counter_ns() - start_ns) * 1e-9, config):
                break
        return LoopResult(samples, warm, warmup_s, "perf_counter_ns")

    import torch

    events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []
    host_start = time.perf_counter()
    while True:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        fn()
        end.record()
        events.append((begin, end))
        # the host's clock only decides when to stop issuing work; the samples come from the events
        if _done(len(events), time.perf_counter() - host_start, config):
            break
    sync()  # the one synchronize
    return LoopResult([b.elapsed_time(e) * 1e-3 for b, e in events], warm, warmup_s, "cuda events")


def _done(count: int, elapsed_s: float, config: LoopConfig) -> bool:
    if config.max_iterations is not None and count >= config.max_iterations:
        return True
    return count >= config.min_iterations and elapsed_s >= config.min_time_s
