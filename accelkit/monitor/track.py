"""Job metrics for a user's own loop: ``with track("train", ...) as job: ... job.step(loss=...)``.

Each ``step()`` closes one step: its wall time since the previous one, samples/s and tokens/s, MFU
(model FLOPs per step ÷ step time ÷ peak), device and host memory, and any scalar given (loss, lr …). Everything
goes to accelkit's Prometheus registry, so an exporter in the same process serves it beside the device
and host metrics. FLOPs per step may be given, or derived by the planner from a model and shapes.
"""

from __future__ import annotations

import contextlib
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

from accelkit.core import ModelSpec, UserError
from accelkit.monitor.registry import REGISTRY
from accelkit.plan.flops import forward_flops, training_flops

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


_MEANING = {
    "samples_per_step": "sequences per step", "tokens_per_step": "tokens per step",
    "flops_per_step": "model FLOPs per step", "peak_flops": "the dense peak FLOP/s of the dtype in use (a float such as 989e12)",
    "seq_len": "tokens per sequence", "samples": "this step's samples", "tokens": "this step's tokens",
    "flops": "this step's model FLOPs",
}


def _number(name: str, value: Any, fix: str) -> float:
    """``float(value)``, or one line naming ``name``. Anything ``float()`` takes but a string or a bool passes
    (numpy scalars, a 0-d tensor); ``"989e12"`` is refused rather than parsed, as a typo would be."""
    if not isinstance(value, (str, bytes, bool)):
        with contextlib.suppress(TypeError, ValueError):
            return float(value)
    raise UserError(f"{name}={value!r} is not a number; {fix}")


def _count(name: str, value: Any, *, zero_ok: bool = False) -> float:
    """A finite count > 0 (>= 0 with ``zero_ok``): NaN or inf would make every rate and MFU after it NaN or
    inf, and a negative count a negative rate."""
    bound = ">= 0" if zero_ok else "> 0"
    fix = f"pass {_MEANING[name]}, a finite number {bound}, or leave it out"
    number = _number(name, value, fix)
    if not math.isfinite(number) or number < 0 or (number == 0 and not zero_ok):
        raise UserError(f"{name}={value!r} must be a finite number {bound}; {fix}")
    return number


def _whole(name: str, value: Any) -> int:
    """A whole count >= 1 for the planner's FLOP formulas (a batch of 0.5 sequences counts 0 FLOPs)."""
    number = _number(name, value, f"pass {_MEANING[name]} as an integer >= 1, or give flops_per_step= instead of model=")
    if not (math.isfinite(number) and number.is_integer() and number >= 1):
        raise UserError(f"{name}={value!r} must be a whole number >= 1 ({_MEANING[name]}) to count FLOPs with "
                        "model=; or give flops_per_step= instead")
    return int(number)


def _scalars(scalars: dict[str, Any]) -> dict[str, float]:
    """Logged values as floats (NaN passes: a diverged loss must show), or one line naming the bad one."""
    numbers = {}
    for name, value in scalars.items():
        try:
            numbers[name] = float(value)
        except (TypeError, ValueError):
            raise UserError(f"{name}={value!r} is not a number; log scalars as numbers (e.g. loss.item())") from None
    return numbers


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
        if not isinstance(job, str) or not job:  # a number became a label silently ('3')
            raise UserError(f"job={job!r} is not a name; give the job a non-empty string such as 'train'")
        if not isinstance(registry, CollectorRegistry):  # was "cannot create weak reference to 'str' object"
            raise TypeError(f"registry={registry!r} is not a prometheus_client CollectorRegistry; leave it out for "
                            "accelkit's (accelkit.monitor.REGISTRY) or pass CollectorRegistry()")
        for name, value in (("samples_per_step", samples_per_step), ("tokens_per_step", tokens_per_step),
                            ("flops_per_step", flops_per_step), ("peak_flops", peak_flops)):
            if value is not None:
                _count(name, value)
        self.job = job
        self.samples_per_step, self.tokens_per_step = samples_per_step, tokens_per_step
        self.flops_per_step, self.peak_flops = flops_per_step, peak_flops
        self._m = _JobMetrics.get(registry)
        self._last = time.perf_counter()
        self._scalars: set[str] = set()  # the scalar names published, for close() to withdraw
        self._closed = False
        self.records: list[StepRecord] = []

    def _check_open(self, what: str) -> None:
        if self._closed:  # published after the end, its gauges would stay on /metrics for the process's life
            raise UserError(f"job {self.job!r} has ended (its `with track(...)` block exited); call {what} inside "
                            f"the block, or start a new track({self.job!r})")

    @staticmethod
    def _remove(gauge: Gauge, *labels: str) -> None:
        with contextlib.suppress(KeyError):  # prometheus_client before 0.20 raised KeyError for an absent series
            gauge.remove(*labels)

    def close(self) -> None:
        """End the job: its gauges (rates, MFU, last step time, memory, scalars) leave the registry, so a scrape no
        longer shows a finished job's last values as if it still ran; the cumulative ``accelkit_job_steps_total``
        and ``accelkit_job_step_seconds`` stay (they remain true). ``track()`` calls it when its block exits;
        ``step()`` and ``log()`` after it are refused. Idempotent."""
        if self._closed:
            return
        self._closed = True
        m, job = self._m, self.job
        for gauge in (m.last_step_seconds, m.samples_per_s, m.tokens_per_s, m.mfu):
            self._remove(gauge, job)
        for kind in ("allocated", "reserved"):
            self._remove(m.device_memory, job, kind)
        self._remove(m.host_memory, job, "rss")
        for name in self._scalars:
            self._remove(m.scalar, job, name)

    def step(self, *, samples: float | None = None, tokens: float | None = None, flops: float | None = None,
             **scalars: float) -> StepRecord:
        """Close a step. Counts given here override the per-step defaults; keyword scalars are logged."""
        now = time.perf_counter()
        self._check_open("step()")
        # checked before anything is published: a bad count must not leave half a step in the registry
        samples = _count("samples", samples, zero_ok=True) if samples is not None else self.samples_per_step
        tokens = _count("tokens", tokens, zero_ok=True) if tokens is not None else self.tokens_per_step
        flops = _count("flops", flops, zero_ok=True) if flops is not None else self.flops_per_step
        logged = _scalars(scalars)
        dt, self._last = max(now - self._last, 1e-9), now
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
            else:  # a step with no count (samples=0) has no rate: the previous step's must not stand for it
                self._remove(gauge, job)
        device = _device_memory()
        for kind in ("allocated", "reserved"):
            if kind in device:
                m.device_memory.labels(job, kind).set(device[kind])
            else:
                self._remove(m.device_memory, job, kind)
        for kind, value in _host_memory().items():
            m.host_memory.labels(job, kind).set(value)
        for name, number in logged.items():
            m.scalar.labels(job, name).set(number)
        self._scalars.update(logged)
        record = StepRecord(len(self.records), dt, sps, tps, mfu)
        self.records.append(record)
        return record

    __call__ = step  # usable directly as a per-step callback

    def log(self, **scalars: float) -> None:
        """Export scalars (loss, lr, grad norm …) without closing a step."""
        self._check_open("log()")
        for name, number in _scalars(scalars).items():
            self._m.scalar.labels(self.job, name).set(number)
            self._scalars.add(name)


def flops_per_step_for(model: ModelSpec, *, batch: int, seq: int, training: bool = True) -> float:
    """Model FLOPs of one step from the planner's formulas (6N + attention for training; 2N + attention forward)."""
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
    planner to count them; MFU needs ``peak_flops`` (the dense peak of the dtype in use). When the block exits
    (an exception too) the job's gauges leave the registry (:meth:`JobTracker.close`)."""
    if model is not None and not isinstance(model, ModelSpec):  # a preset name was a bare AttributeError
        raise UserError(f"model={model!r} is not a ModelSpec; pass accelkit.models.get_preset(name) or "
                        "accelkit.models.resolve_model(path), or give flops_per_step")
    if model is not None and flops_per_step is not None:  # the model was ignored: say which count is meant
        raise UserError("model= and flops_per_step= both count a step's FLOPs; give one of them (model= with "
                        "samples_per_step and seq_len, or flops_per_step alone)")
    if seq_len is not None and model is None:  # read only to count a model's FLOPs: it was ignored
        raise UserError(f"seq_len={seq_len!r} is read only with model= (to count its FLOPs and tokens); give "
                        "model=, or tokens_per_step for tokens/s")
    if not isinstance(training, bool):  # training="no" counted a training step (a truthy string)
        raise UserError(f"training={training!r} is not True or False; True counts a training step's FLOPs (6N), "
                        "False a forward pass's (2N)")
    if not training and model is None:  # read only to count a model's FLOPs: it was ignored
        raise UserError("training=False is read only with model= (to count a forward pass's FLOPs); with "
                        "flops_per_step give the forward FLOPs yourself and leave training out")
    if flops_per_step is None and model is not None:
        if samples_per_step is None or seq_len is None:
            raise UserError("model= needs samples_per_step (sequences per step) and seq_len to count FLOPs")
        # the user's own arguments are checked here: a derived count's error ("tokens_per_step=-40") names
        # nothing they passed
        batch, seq = _whole("samples_per_step", samples_per_step), _whole("seq_len", seq_len)
        flops_per_step = flops_per_step_for(model, batch=batch, seq=seq, training=training)
        # a tokens_per_step of 0 given with model= was replaced by batch × seq; it is refused as without model=
        tokens_per_step = batch * seq if tokens_per_step is None else tokens_per_step
    tracker = JobTracker(job, samples_per_step=samples_per_step, tokens_per_step=tokens_per_step,
                         flops_per_step=flops_per_step, peak_flops=peak_flops, registry=registry)
    try:
        yield tracker
    finally:  # on an exception too: a crashed job's last rates must not go on being scraped
        tracker.close()
