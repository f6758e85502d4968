"""Profile a benchmark workload (or a user's ``--module``) step and store the summary."""

from __future__ import annotations

import dataclasses
from typing import Any

from accelkit.core import Measurement
from accelkit.monitor.profiler import ProfileConfig, profile_step


def profile_workload(
    name: str,
    options: dict[str, Any],
    config: ProfileConfig,
    *,
    precision: str = "fp32",
    device: str = "auto",
    seed: int = 0,
    save: bool = True,
) -> tuple[dict[str, Any], int | None]:
    """Build the workload's first step (the bench workloads' own ``prepare``), profile it, store it."""
    import torch

    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import get_workload, make_workload
    from accelkit.hardware.detect import environment

    fields = {f.name for f in dataclasses.fields(get_workload(name).config_cls)}
    cfg = {k: v for k, v in options.items() if v is not None and k in fields}
    workload = make_workload(name, cfg)
    dev = ("cuda:0" if torch.cuda.is_available() else "cpu") if device == "auto" else device
    workload.check(dev)
    prepared = workload.prepare(Variant(precision=precision), dev, seed=seed)
    try:
        step = prepared.steps[0]
        summary = profile_step(step.fn, config, device=dev)
    finally:
        prepared.close()
    summary = {"workload": workload.label, "step": step.name, **summary}
    result_id = None
    if save:
        from accelkit.results import ResultStore

        with ResultStore() as store:
            result_id = store.add(Measurement(kind="profile", name=f"profile {workload.label}", hardware=dev,
                                              details=summary, environment=environment(with_torch=True)))
    return summary, result_id
