"""`accelkit plan --compare-compression`: the same layout with each gradient compression, side by side — when
compressing the data-parallel reduction shortens the step (a slow scale-out network, a large dp) and when it does
not (groups inside one NVLink node, where the reduction already hides behind the backward)."""

from __future__ import annotations

from typing import Any

from accelkit.core import Cluster, Recipe, Workload
from accelkit.plan.api import plan
from accelkit.plan.layout import Layout
from accelkit.plan.options import PlanOptions

COMPRESSIONS = ("none", "bf16", "fp16", "powersgd")
#: a step-time change smaller than this is "no gain"
NO_GAIN = 0.01


def _recipe(base: Recipe, compression: str, powersgd_rank: int) -> Recipe:
    """``base`` with one compression (PowerSGD's other settings at their defaults)."""
    defaults = {k: v for k, v in Recipe().to_dict().items() if k.startswith("powersgd_")}
    return Recipe.from_dict({**base.to_dict(), **defaults, "grad_compression": compression,
                             **({"powersgd_rank": powersgd_rank} if compression == "powersgd" else {})})


def compare_compression(workload: Workload, cluster: Cluster, layout: Layout, options: PlanOptions | None = None, *,
                        powersgd_rank: int = 4) -> dict[str, Any]:
    """Plan ``layout`` once per compression (``accelkit.plan.plan``, the one time model). Rows carry the step time,
    its ratio to ``none``, the bytes each rank hands to the gradient collectives per step, the collective's time,
    the exposed communication and the compression compute; PowerSGD on a ZeRO layout is refused with the reason."""
    rows: list[dict[str, Any]] = []
    base_step: float | None = None
    for kind in COMPRESSIONS:
        if kind == "powersgd" and layout.zero > 0:
            rows.append({"compression": kind, "refused": f"PowerSGD is a DDP communication hook (zero 0); this layout "
                                                         f"is zero {layout.zero} (a reduce-scatter)"})
            continue
        recipe = _recipe(workload.recipe, kind, powersgd_rank)
        doc = plan(workload.replace(recipe=recipe), cluster, options, layout=layout).details
        red = doc.get("grad_reduction")
        step = float(doc["step_time_s"])
        if base_step is None:
            base_step = step
        row: dict[str, Any] = {
            "compression": kind if kind != "powersgd" else f"powersgd-r{powersgd_rank}",
            "step_time_s": step, "step_vs_none": step / base_step if base_step else None,
            "communication_s": doc["time_breakdown_s"]["communication"],
            "buffer_bytes_per_step": red["buffer_bytes_per_step"] if red else 0,
            "bytes_vs_none": red["ratio"] if red else None,
            "collective_s": red["collective_s"] if red else 0.0,
            "compress_s": red["compress_s"] if red else 0.0,
            "fits": doc["fits"],
            # what fits compares: the per-device total against the device's memory (the table says so, not only --json)
            "memory_total_bytes": doc["memory_per_device_bytes"]["total"],
            "memory_capacity_bytes": doc["memory_capacity_bytes"],
        }
        if red and red.get("note"):
            row["note"] = red["note"]
        rows.append(row)
    return {"model": workload.model.name, "hardware": cluster.device.name, "num_devices": cluster.num_devices,
            "num_nodes": cluster.num_nodes, "scaleout_bandwidth_bytes_per_s": cluster.scaleout_bandwidth_bytes_per_s,
            "layout": layout.to_dict(), "rows": rows, "verdict": verdict(rows, layout)}


def verdict(rows: list[dict[str, Any]], layout: Layout) -> str:
    """One sentence: which compression pays on this layout and by how much, or why none does."""
    if layout.dp * layout.cp <= 1:
        return "no data parallelism in this layout: there is no gradient reduction to compress"
    timed = [r for r in rows if "step_time_s" in r and r["compression"] != "none"]
    best = min(timed, key=lambda r: r["step_time_s"], default=None)
    if best is None or best["step_vs_none"] is None or best["step_vs_none"] > 1 - NO_GAIN:
        return (f"no compression shortens the step by {NO_GAIN:.0%} or more: the gradient reduction hides behind the "
                "backward or is cheap on these links (the compression compute can cost more than it saves)")
    return (f"{best['compression']} pays: the step takes {best['step_vs_none']:.3f}× the uncompressed one "
            f"({(1 - best['step_vs_none']) * 100:.1f}% shorter)")
