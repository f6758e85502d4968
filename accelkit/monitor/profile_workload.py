"""Profile a benchmark workload (or a user's ``--module``) step; the caller stores the summary."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelkit.bench.runner import Reporter, identify, plan_variants
from accelkit.bench.variants import Variant
from accelkit.bench.workloads import WORKLOADS, config_fields, make_workload
from accelkit.core import AccelkitError, Measurement, UserError
from accelkit.hardware.detect import environment
from accelkit.hardware.device import resolve_device
from accelkit.monitor.profiler import ProfileConfig, profile_step


def _workload_options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    """The flags given, checked against the workload's config: one it does not take is refused in `bench`'s words,
    naming the workloads that take it (they were dropped silently, found in review: `profile resnet --seq-len 4096`
    profiled the default image size)."""
    fields = config_fields(name)
    given = {k: v for k, v in options.items() if v is not None}
    for key in given:
        if key not in fields:
            takers = [_command(w) for w in WORKLOADS if key in config_fields(w)]
            raise UserError(f"--{key.replace('_', '-')} does not apply to {_command(name)}"
                            + (f"; it applies to {', '.join(takers)}" if takers else ""))
    return given


def _command(workload: str) -> str:
    """The command that profiles ``workload``, as an error names it."""
    return "`profile --module`" if workload == "custom" else f"`profile {workload}`"


def _pick_step(prepared: Any, name: str | None, label: str) -> Any:
    """The step called ``name`` (default: the workload's first, e.g. llm's prefill); an unknown name is refused
    with the names there are."""
    if name is None:
        return prepared.steps[0]
    for step in prepared.steps:
        if step.name == name:
            return step
    names = ", ".join(repr(s.name) for s in prepared.steps)
    raise UserError(f"--step {name!r}: {label} has no such step; its steps are {names}")


def profile_workload(
    name: str,
    options: dict[str, Any],
    config: ProfileConfig,
    *,
    precision: str = "fp32",
    device: str = "auto",
    seed: int = 0,
    step_name: str | None = None,
    on_step: Callable[[str], None] | None = None,
) -> tuple[dict[str, Any], Measurement]:
    """Build the workload (the bench workloads' own ``prepare``, its first variant that can run as `bench` plans
    them), profile its first step or ``step_name``; returns the summary and the Measurement to store (kind
    'profile', hardware named as `hw probe` and `bench` name it)."""

    step_note = on_step or (lambda text: None)
    cfg = _workload_options(name, options)
    dev = resolve_device(device)
    try:
        workload = make_workload(name, cfg)
    except ValueError as exc:  # a flag value the workload's config refuses (--size huge): the user's to fix, exit 2
        raise UserError(str(exc)) from exc
    try:
        workload.check(dev)
        step_note(f"building {workload.label} ({precision}) on {dev}")  # .label calls a custom factory
        # as bench plans them: the data loader's variants are its worker settings (a bare Variant lacked them)
        variant = plan_variants(workload, [Variant(precision=precision)], dev, Reporter())[0][0]  # type: ignore[arg-type]
        prepared = workload.prepare(variant, dev, seed=seed)
    except AccelkitError:
        raise
    except Exception as exc:
        if name != "custom":
            raise
        # the user's factory (or what it returned) failed: their code, so one line that names it, not a traceback
        raise AccelkitError(f"--module {options.get('module')}: building the model failed "
                            f"({type(exc).__name__}: {exc})") from exc
    try:
        step = _pick_step(prepared, step_name, workload.label)
        step_note(f"profiling {config.wait} + {config.warmup} + {config.steps} steps of {step.name}")
        summary = profile_step(step.fn, config, device=dev)
    finally:
        prepared.close()
    summary = {"workload": workload.label, "step": step.name, **summary}
    hardware, _ = identify(dev)
    measurement = Measurement(kind="profile", name=f"profile {workload.label} {step.name}", hardware=hardware,
                              details=summary, environment=environment(with_torch=True))
    return summary, measurement
