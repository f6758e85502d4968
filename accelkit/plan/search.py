"""Layout search: enumerate valid layouts → drop what does not fit → rank.

Training ranks by step time (global batch fixed), inference by tokens/s under an optional decode-latency
bound. Without a device count, ``min_devices`` walks counts upward (1, 2, 4, then whole nodes, then
doubling) and stops at the first that fits and meets the throughput target.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from accelkit.core import Cluster, DeviceSpec, UserError, Workload
from accelkit.plan.context import DEFAULT_STEP_TOKENS, PlanContext, make_context
from accelkit.plan.evaluate import MEMORY_KEYS, Candidate, evaluate, infer_memory, train_memory
from accelkit.plan.layout import (
    Layout,
    check_compression,
    check_inference_layout,
    check_user_layout,
    ep_choices,
    pp_choices,
    tp_choices,
)
from accelkit.plan.options import PlanOptions

MICRO_BATCHES = (1, 2, 4, 8)


def default_global_batch(workload: Workload) -> int:
    """~4 Mi tokens per step when the user gives no global batch."""
    return max(1, DEFAULT_STEP_TOKENS // workload.seq_len)


def _pick(fixed: dict[str, Any], key: str, choices: list[Any]) -> list[Any]:
    value = fixed.get(key)
    if value is None:
        return choices
    return [value] if value in choices else []


def enumerate_layouts(ctx: PlanContext, num_devices: int, fixed: dict[str, Any], global_batch: int | None) -> Iterator[Layout]:
    """Every valid layout on ``num_devices`` that agrees with the ``fixed`` fields."""
    model, cluster = ctx.model, ctx.cluster
    train = ctx.workload.task == "train"
    recomputes = ["none", "full"] if ctx.cnn is not None else (
        ["none", "selective", "full"] if ctx.options.attention == "math" else ["none", "full"])
    if fixed.get("recompute") == "selective" and "selective" not in recomputes:
        recomputes.append("selective")
    cp = fixed.get("cp") or 1  # context parallelism and virtual stages are the user's choice (training), not searched
    vp = fixed.get("vp") or 1
    if num_devices % cp:
        return
    for tp in _pick(fixed, "tp", tp_choices(model, cluster, num_devices // cp)):
        for pp in _pick(fixed, "pp", pp_choices(model, num_devices // (tp * cp))):
            if vp > 1 and (pp == 1 or model.num_layers % (pp * vp)):
                continue
            dp = num_devices // (tp * pp * cp)
            if fixed.get("dp") not in (None, dp):
                continue
            for ep in _pick(fixed, "ep", ep_choices(model, dp)):
                if not train:
                    yield Layout(dp=dp, tp=tp, pp=pp, ep=ep, cp=cp, vp=vp)
                    continue
                if global_batch is None or global_batch % dp:
                    continue
                per_rank = global_batch // dp
                mbs = [mb for mb in MICRO_BATCHES if per_rank % mb == 0]
                if fixed.get("micro_batch") is not None:
                    mbs = [fixed["micro_batch"]] if per_rank % fixed["micro_batch"] == 0 else []
                zeros = _pick(fixed, "zero", [0] if dp * cp == 1 or ctx.workload.recipe.grad_compression == "powersgd"
                              else [0, 1, 2, 3])
                sps = _pick(fixed, "sequence_parallel", [False, True] if tp > 1 else [False])
                for zero in zeros:
                    for mb in mbs:
                        for rc in _pick(fixed, "recompute", recomputes):
                            for sp in sps:
                                yield Layout(dp, tp, pp, ep, zero, mb, per_rank // mb, rc, sp, cp, vp)


def _rank_key(ctx: PlanContext, c: Candidate) -> tuple[Any, ...]:
    over = c.memory["total"] - c.memory["capacity"]
    if ctx.workload.task == "train":
        return (not c.fits, over if not c.fits else 0.0, c.step_time_s)
    bound = ctx.options.max_decode_latency_s
    slow = bound is not None and (c.decode_time_per_token_s or c.prefill_time_s or 0.0) > bound
    return (not c.fits, slow, over if not c.fits else 0.0, -c.tokens_per_s / c.layout.num_devices)


def _fits_memory(ctx: PlanContext, layout: Layout, batch: int | None) -> bool:
    if ctx.workload.task == "train":
        parts = train_memory(ctx, layout)
    else:
        parts, _ = infer_memory(ctx, layout, batch or 1)
    return sum(parts[k] for k in MEMORY_KEYS) <= ctx.device.memory_bytes


def search_context(ctx: PlanContext, num_devices: int, *, fixed: dict[str, Any] | None = None,
                   global_batch: int | None = None, batch: int | None = None) -> list[Candidate]:
    """Evaluate and rank every layout on ``num_devices`` (best first)."""
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None}
    if ctx.workload.task != "train":
        check_inference_layout(fixed, global_batch)
    check_user_layout(ctx.model, ctx.cluster, fixed, num_devices)
    check_compression(ctx.workload.recipe, fixed.get("zero", 0))
    if ctx.workload.task == "train" and global_batch is None:
        global_batch = default_global_batch(ctx.workload)
    found = [evaluate(ctx, layout, batch) for layout in enumerate_layouts(ctx, num_devices, fixed, global_batch)]
    if not found:
        raise UserError(_no_layout_message(ctx, num_devices, fixed, global_batch))
    found.sort(key=lambda c: _rank_key(ctx, c))
    return found


def _no_layout_message(ctx: PlanContext, n: int, fixed: dict[str, Any], global_batch: int | None) -> str:
    given = ", ".join(f"--{k.replace('_', '-')} {v}" for k, v in fixed.items()) or "no layout flags"
    extra = f" and global batch {global_batch} (--global-batch)" if ctx.workload.task == "train" else ""
    return (f"no valid layout of {ctx.model.name} on {n} × {ctx.device.name} (--num-devices {n}) with {given}{extra}: "
            "dp·tp·pp must equal the device count, tp divide the heads (and divide or be a multiple of the KV heads), "
            "pp the layers, dp the global batch; change one of them")


def _counts(device: DeviceSpec, limit: int) -> Iterator[int]:
    """1, 2, … up to two nodes, then whole nodes up to 32, then doubling."""
    node = max(1, min(device.scaleup_domain, 8))
    n = 1
    while n <= limit:
        yield n
        n = n + 1 if n < 2 * node else (n + node if n < 32 * node else n * 2)


def _cluster_for(cluster: Cluster, n: int) -> Cluster:
    node = cluster.devices_per_node
    return cluster.replace(num_devices=n, devices_per_node=min(node, n) if node else None)


def min_devices(ctx: PlanContext, *, fixed: dict[str, Any] | None = None, global_batch: int | None = None,
                batch: int | None = None) -> tuple[int | None, PlanContext]:
    """Smallest device count with a fitting layout (and meeting the target throughput, if any)."""
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None}
    if ctx.workload.task != "train":
        check_inference_layout(fixed, global_batch)
    target = ctx.options.target_tokens_per_s
    if ctx.workload.task == "train" and global_batch is None:
        global_batch = default_global_batch(ctx.workload)
    for n in _counts(ctx.device, ctx.options.max_devices):
        sized = _with_cluster(ctx, _cluster_for(ctx.cluster, n))
        try:
            check_user_layout(ctx.model, sized.cluster, fixed, n)
        except UserError:
            continue
        fitting = [lay for lay in enumerate_layouts(sized, n, fixed, global_batch) if _fits_memory(sized, lay, batch)]
        if not fitting:
            continue
        if target is None or any(evaluate(sized, lay, batch).tokens_per_s >= target for lay in fitting):
            return n, sized
    return None, ctx


def _with_cluster(ctx: PlanContext, cluster: Cluster) -> PlanContext:
    """The same context on a cluster of another size (peaks and efficiencies do not change)."""
    from dataclasses import replace

    return replace(ctx, cluster=cluster, assumptions=list(ctx.assumptions))


def search(workload: Workload, cluster: Cluster, *, options: PlanOptions | None = None,
           fixed: dict[str, Any] | None = None, global_batch: int | None = None, batch: int | None = None,
           minimize_devices: bool = False, top: int | None = None) -> list[Candidate]:
    """Ranked candidates (best first) for ``workload`` on ``cluster.num_devices`` of its device.

    ``minimize_devices`` instead finds the smallest count that fits (and reaches
    ``options.target_tokens_per_s``) and ranks the layouts there. ``fixed`` pins layout fields (dp, tp,
    pp, ep, zero, micro_batch, recompute, sequence_parallel); ``global_batch`` (training, sequences;
    default ~4 Mi tokens) and ``batch`` (inference, sequences per replica; default the largest that fits,
    capped by ``options.max_serving_batch``). Each candidate's ``extra['context']`` is its PlanContext.
    """
    ctx = make_context(workload, cluster, options)
    return search_ctx(ctx, fixed=fixed, global_batch=global_batch, batch=batch,
                      num_devices=None if minimize_devices else cluster.num_devices, top=top)


def search_ctx(ctx: PlanContext, *, fixed: dict[str, Any] | None = None, global_batch: int | None = None,
               batch: int | None = None, num_devices: int | None = None, top: int | None = None) -> list[Candidate]:
    if num_devices is None:
        n, sized = min_devices(ctx, fixed=fixed, global_batch=global_batch, batch=batch)
        if n is None:  # nothing fits anywhere we looked: report the largest count's best (fits = false)
            n = ctx.options.max_devices
            sized = _with_cluster(ctx, _cluster_for(ctx.cluster, n))
            sized.assumptions.append(f"no device count up to {n} fits or meets the target; showing {n}")
    else:
        n, sized = num_devices, _with_cluster(ctx, _cluster_for(ctx.cluster, num_devices))
    found = search_context(sized, n, fixed=fixed, global_batch=global_batch, batch=batch)
    for c in found:
        c.extra["context"] = sized
    return found[:top] if top else found
