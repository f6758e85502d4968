"""Job metrics for a user's own loop: ``with track("train", ...) as job: ... job.step(loss=...)``.

Each ``step()`` closes one step: its wall time since the previous one, samples/s and tokens/s, MFU
(model FLOPs per step ÷ step time ÷ peak), device and host memory, and any scalar given (loss, lr …). Everything
goes to accelkit's Prometheus registry, so an exporter in the same process serves it beside the device
and host metrics. FLOPs per step may be given, or derived by the planner from a model and shapes.
"""

from __future__ import annotations

import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, ClassVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from accelkit.core import ModelSpec
from accelkit.monitor.registry import REGISTRY

STEP_BUCKETS = (*tuple(10.0 ** e for e in (-3, -2.5, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2)), math.inf)


class _JobMetrics:
    """The job metric families, registered once per registry. The job's label is ``job_name``: a plain
    ``job`` label would clash with the one Prometheus attaches to every scraped target.

    Keyed by the registry itself, weakly: an ``id()`` key outlives its registry, and a new registry at the
    recycled address would get the dead one's families, so its scrapes would lack every job metric."""

    _by_registry: ClassVar[weakref.WeakKeyDictionary[CollectorRegistry, _JobMetrics]] = weakref.WeakKeyDictionary()
    _lock = threading.Lock()

    def __init__(self, registry: CollectorRegistry):
        kw: dict[str, Any] = {"registry": registry}
        self.step_seconds = Histogram("accelkit_job_step_seconds", "Wall time per step.", ["job_name"], buckets=STEP_BUCKETS, **kw)
        self.last_step_seconds = Gauge("accelkit_job_last_step_seconds", "Wall time of the latest step.", ["job_name"], **kw)
        self.steps = Counter("accelkit_job_steps", "Steps completed.", ["job_name"], **kw)
        self.samples_per_s = Gauge("accelkit_job_samples_per_second", "Samples per second in the latest step.", ["job_name"], **kw)
        self.tokens_per_s = Gauge("accelkit_job_tokens_per_second", "Tokens per second in the latest step.", ["job_name"], **kw)
        self.mfu = Gauge("accelkit_job_mfu", "Model FLOPs utilisation of the latest step (0-1).", ["job_name"], **kw)
        self.device_memory = Gauge("accelkit_job_device_memory_bytes", "CUDA memory of the job's process (kind: allocated, reserved), "
                                   "when it uses a GPU.", ["job_name", "kind"], **kw)
        self.host_memory = Gauge("accelkit_job_host_memory_bytes", "Host memory of the job's process (kind: rss, its resident set).",
                                 ["job_name", "kind"], **kw)
        self.scalar = Gauge("accelkit_job_scalar", "A value the job logs (loss, lr …).", ["job_name", "scalar"], **kw)

    @classmethod
    def get(cls, registry: CollectorRegistry) -> _JobMetrics:
        with cls._lock:
            metrics = cls._by_registry.get(registry)
            if metrics is None:
                metrics = cls._by_registry[registry] = cls(registry)
            return metrics


@dataclass(frozen=True, slots=True)
class StepRecord:
    """What one step measured."""

    index: int
    seconds: float
    samples_per_s: float | None
    tokens_per_s: float | None
    mfu: float | None


def _device_memory() -> dict[str, float]:
    """CUDA allocated/reserved when torch is already in use with a GPU (never initialises CUDA); else none."""
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        return {"allocated": float(torch.cuda.memory_allocated()), "reserved": float(torch.cuda.memory_reserved())}
    return {}


def _host_memory() -> dict[str, float]:
    """This process's resident set in host memory — under its own name, never as device memory."""
    import psutil

    return {"rss": float(psutil.Process(os.getpid()).memory_info().rss)}


class JobTracker:
    """Publishes one job's step metrics. Create it with :func:`track`."""

    def __init__(
        self,
        job: str,
        *,
        samples_per_step: float | None = None,
        tokens_per_step: float | None = None,
        flops_per_step: float | None = None,
        peak_flops: float | None = None,
        registry: CollectorRegistry = REGISTRY,
    ):
        if not job:
            raise ValueError("job must be a non-empty name")
        for name, value in (("samples_per_step", samples_per_step), ("tokens_per_step", tokens_per_step),
                            ("flops_per_step", flops_per_step), ("peak_flops", peak_flops)):
            if value is not None and value <= 0:
                raise ValueError(f"{name}={value} must be > 0")
        self.job = job
        self.samples_per_step, self.tokens_per_step = samples_per_step, tokens_per_step
        self.flops_per_step, self.peak_flops = flops_per_step, peak_flops
        self._m = _JobMetrics.get(registry)
        self._last = time.perf_counter()
        self.records: list[StepRecord] = []

    def reset_clock(self) -> None:
        """Start timing the next step now (e.g. after evaluation or a checkpoint save)."""
        self._last = time.perf_counter()

    def step(self, *, samples: float | None = None, tokens: float | None = None, flops: float | None = None,
             **scalars: float) -> StepRecord:
        """Close a step. Counts given here override the per-step defaults; keyword scalars are logged."""
        now = time.perf_counter()
        dt, self._last = max(now - self._last, 1e-9), now
        samples = samples if samples is not None else self.samples_per_step
        tokens = tokens if tokens is not None else self.tokens_per_step
        flops = flops if flops is not None else self.flops_per_step
        m, job = self._m, self.job
        m.step_seconds.labels(job).observe(dt)
        m.last_step_seconds.labels(job).set(dt)
        m.steps.labels(job).inc()
        sps = samples / dt if samples else None
        tps = tokens / dt if tokens else None
        mfu = flops / dt / self.peak_flops if flops and self.peak_flops else None
        for gauge, value in ((m.samples_per_s, sps), (m.tokens_per_s, tps), (m.mfu, mfu)):
            if value is not None:
                gauge.labels(job).set(value)
        for gauge, values in ((m.device_memory, _device_memory()), (m.host_memory, _host_memory())):
            for kind, value in values.items():
                gauge.labels(job, kind).set(value)
        self.log(**scalars)
        record = StepRecord(len(self.records), dt, sps, tps, mfu)
        self.records.append(record)
        return record

    __call__ = step  # usable directly as a per-step callback

    def log(self, **scalars: float) -> None:
        """Export scalars (loss, lr, grad norm …) without closing a step."""
        for name, value in scalars.items():
            self._m.scalar.labels(self.job, name).set(float(value))


def flops_per_step_for(model: ModelSpec, *, batch: int, seq: int, training: bool = True) -> float:
    """Model FLOPs of one step from the planner's formulas (6N + attention for training; 2N + attention forward)."""
    from accelkit.plan.flops import forward_flops, training_flops

    if training:
        return training_flops(model, batch=batch, seq=seq)
    return forward_flops(model, batch=batch, seq=seq)


@contextmanager
def track(
    job: str = "job",
    *,
    samples_per_step: float | None = None,
    tokens_per_step: float | None = None,
    flops_per_step: float | None = None,
    model: ModelSpec | None = None,
    seq_len: int | None = None,
    training: bool = True,
    peak_flops: float | None = None,
    registry: CollectorRegistry = REGISTRY,
) -> Iterator[JobTracker]:
    """Track a loop. Give ``flops_per_step``, or ``model`` + ``samples_per_step`` + ``seq_len`` for the
    planner to count them; MFU needs ``peak_flops`` (the dense peak of the dtype in use)."""
    if flops_per_step is None and model is not None:
        if samples_per_step is None or seq_len is None:
            raise ValueError("model= needs samples_per_step (sequences per step) and seq_len to count FLOPs")
        flops_per_step = flops_per_step_for(model, batch=int(samples_per_step), seq=seq_len, training=training)
        tokens_per_step = tokens_per_step or samples_per_step * seq_len
    yield JobTracker(job, samples_per_step=samples_per_step, tokens_per_step=tokens_per_step,
                     flops_per_step=flops_per_step, peak_flops=peak_flops, registry=registry)
