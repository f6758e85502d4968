"""Profile a benchmark workload (or a user's ``--module``) step; the caller stores the summary."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from accelkit.bench.runner import identify
from accelkit.bench.variants import Variant
from accelkit.bench.workloads import get_workload, make_workload
from accelkit.core import AccelkitError, Measurement, UserError
from accelkit.hardware.detect import environment
from accelkit.hardware.device import resolve_device
from accelkit.monitor.profiler import ProfileConfig, profile_step


def profile_workload(
    name: str,
    options: dict[str, Any],
    config: ProfileConfig,
    *,
    precision: str = "fp32",
    device: str = "auto",
    seed: int = 0,
    on_step: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], Measurement]:
    """Build the workload's first step (the bench workloads' own ``prepare``), profile it; returns the summary
    and the Measurement to store (kind 'profile', hardware named as `hw probe` and `bench` name it)."""

    step_note = on_step or (lambda text: None)
    fields = {f.name for f in dataclasses.fields(get_workload(name).config_cls)}  # type: ignore[arg-type]
    cfg = {k: v for k, v in options.items() if v is not None and k in fields}
    dev = resolve_device(device)
    try:
        workload = make_workload(name, cfg)
    except ValueError as exc:  # a flag value the workload's config refuses (--size huge): the user's to fix, exit 2
        raise UserError(str(exc)) from exc
    try:
        workload.check(dev)
        step_note(f"building {workload.label} ({precision}) on {dev}")  # .label calls a custom factory
        prepared = workload.prepare(Variant(precision=precision), dev, seed=seed)  # type: ignore[arg-type]
    except AccelkitError:
        raise
    except Exception as exc:
        if name != "custom":
            raise
        # the user's factory (or what it returned) failed: their code, so one line that names it, not a traceback
        raise AccelkitError(f"--module {options.get('module')}: building the model failed "
                            f"({type(exc).__name__}: {exc})") from exc
    try:
        step = prepared.steps[0]
        step_note(f"profiling {config.wait} + {config.warmup} + {config.steps} steps of {step.name}")
        summary = profile_step(step.fn, config, device=dev)
    finally:
        prepared.close()
    summary = {"workload": workload.label, "step": step.name, **summary}
    hardware, _ = identify(dev)
    measurement = Measurement(kind="profile", name=f"profile {workload.label}", hardware=hardware,
                              details=summary, environment=environment(with_torch=True))
    return summary, measurement
