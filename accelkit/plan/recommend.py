"""Hardware recommendation: the same workload on several accelerators, one row each — minimum devices,
best layout, step time, tokens/s, MFU, energy per token, cost and the dominant bottleneck."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from accelkit.core import Cluster, UserError, Workload
from accelkit.plan.calibrate import resolve_hardware
from accelkit.plan.context import PlanContext, make_context
from accelkit.plan.evaluate import Candidate
from accelkit.plan.options import PlanOptions
from accelkit.plan.search import check_arguments, search_ctx


def compare(workload: Workload, hardware: str | Sequence[str], *, options: PlanOptions | None = None,
            fixed: dict[str, Any] | None = None, global_batch: int | None = None, batch: int | None = None,
            num_devices: int | None = None, scaleout_bandwidth_bytes_per_s: float | None = None,
            ) -> list[tuple[Candidate, PlanContext]]:
    """Best candidate per hardware name, in the order given. Without ``num_devices`` each device gets
    its own minimum count (the memory answer); with it, all get the same count. One name alone (``"h100"``) is
    one hardware, not its letters."""
    check_arguments(fixed, global_batch=global_batch, batch=batch, num_devices=num_devices)  # before any hardware
    names = [hardware] if isinstance(hardware, str) else list(hardware)
    if not names:
        raise UserError("compare needs at least one hardware name, e.g. ['h100', 'b200']")
    rows = []
    for name in names:
        device = resolve_hardware(name)
        cluster = Cluster(device=device, num_devices=num_devices or 1)
        if scaleout_bandwidth_bytes_per_s is not None:
            cluster = cluster.replace(scaleout_bandwidth_bytes_per_s=scaleout_bandwidth_bytes_per_s)
        ctx = make_context(workload, cluster, options)
        best = search_ctx(ctx, fixed=fixed, global_batch=global_batch, batch=batch, num_devices=num_devices, top=1)[0]
        rows.append((best, best.extra["context"]))
    return rows
