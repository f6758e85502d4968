"""Estimate (predicted) and Measurement (observed): the same fields, so a report can set them side by side."""

from __future__ import annotations

import datetime as _dt
from dataclasses import dataclass
from typing import Any

from accelkit.core.spec import Spec, spec_field
from accelkit.core.stats import Stats
from accelkit.core.workload import Workload


def utc_now() -> str:
    """ISO-8601 UTC timestamp with seconds, e.g. '2026-11-29T15:04:05Z'."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True, slots=True, kw_only=True)
class _Result(Spec):
    kind: str = spec_field(doc="What produced it: 'plan', 'probe', 'bench', 'loadtest' …")
    name: str = spec_field(doc="Short human label, e.g. 'llama-3.1-70b train on 64×H200'.")
    workload: Workload | None = spec_field(None, doc="The workload, when there is one.")
    hardware: str | None = spec_field(None, doc="Device name (catalog name, or the detected device).")
    num_devices: int = spec_field(1, min=1, doc="Devices involved.")
    throughput: float | None = spec_field(None, min=0.0, doc="Items per second over the whole measured time.")
    throughput_unit: str | None = spec_field(None, doc="What the items are: 'tokens/s', 'samples/s', 'TFLOP/s' …")
    latency_s: Stats | None = spec_field(None, doc="Per-iteration latency statistics in seconds.")
    memory_bytes: dict[str, int] = spec_field(default_factory=dict, doc="Memory by component, bytes.")
    mfu: float | None = spec_field(None, min=0.0, doc="Model FLOPs utilisation (details name the peak used).")
    energy_j_per_item: float | None = spec_field(None, min=0.0, doc="Joules per item; None when not measurable.")
    details: dict[str, Any] = spec_field(default_factory=dict, doc="Kind-specific JSON payload.")
    environment: dict[str, Any] = spec_field(default_factory=dict, doc="Versions, device, threads, git commit.")
    created_at: str = spec_field(default_factory=utc_now, doc="UTC timestamp.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Estimate(_Result):
    """A prediction (the planner's). ``details['assumptions']`` lists what it rests on."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Measurement(_Result):
    """An observation, with its raw samples kept (name → values in the unit the name gives)."""

    samples: dict[str, list[float]] = spec_field(default_factory=dict, doc="Raw samples by series name.")
