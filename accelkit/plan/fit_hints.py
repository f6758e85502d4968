"""What would make a plan that does not fit fit: the flags a user can change, checked by planning them — the
optimizer states in host memory (``--offload``, training) on the same devices, and the smallest device count with a
fitting layout (with the pinned layout fields, else without them)."""

from __future__ import annotations

from typing import Any

from accelkit.core import UserError
from accelkit.plan.context import PlanContext, make_context
from accelkit.plan.layout import flag_text
from accelkit.plan.search import min_devices, search_ctx


def would_fit(ctx: PlanContext, *, fixed: dict[str, Any] | None = None, global_batch: int | None = None,
              batch: int | None = None) -> list[str]:
    """For a plan on ``ctx.cluster`` that does not fit: each change that makes it fit, as the flags to give and why
    (empty when none up to ``options.max_devices`` does)."""
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None}
    n_now = ctx.cluster.num_devices
    w = ctx.workload
    hints = []
    if w.task == "train" and not w.recipe.offload:
        offloaded = make_context(w.replace(recipe=w.recipe.replace(offload=True)), ctx.cluster, ctx.options)
        try:
            best = search_ctx(offloaded, num_devices=n_now, fixed=fixed, global_batch=global_batch, top=1)[0]
        except UserError:
            best = None
        if best is not None and best.fits:
            hints.append(f"--offload (optimizer states in host memory, ZeRO-Offload) on the same {n_now} device(s)")
    n, _ = min_devices(ctx, fixed=fixed, global_batch=global_batch, batch=batch)
    if n is not None and n != n_now:
        hints.append(f"--num-devices {n}, the smallest count that fits")
    elif n is None and fixed:
        n, _ = min_devices(ctx, global_batch=global_batch, batch=batch)
        if n is not None:
            pins = " ".join(flag_text(k, v) for k, v in fixed.items())
            hints.append(f"--num-devices {n} without {pins}, the smallest count that fits with the layout searched")
    return hints
