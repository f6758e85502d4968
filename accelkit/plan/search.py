"""Layout search: enumerate valid layouts → drop what does not fit → rank.

Training ranks by step time (global batch fixed), inference by tokens/s under an optional decode-latency
bound. Without a device count, ``min_devices`` walks counts upward (1, 2, 4, then whole nodes, then
doubling) and stops at the first that fits and meets the throughput target; when none up to
``options.max_devices`` does, the plan shows the largest count with a valid layout and says so in its
``warnings``. When no layout is valid, the error names the rule the pinned fields break.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterator
from dataclasses import fields, replace
from typing import Any

from accelkit.core import Cluster, DeviceSpec, UserError, Workload
from accelkit.core.errors import closest
from accelkit.core.units import and_list
from accelkit.plan.context import DEFAULT_STEP_TOKENS, PlanContext, make_context
from accelkit.plan.evaluate import Candidate, evaluate, infer_memory, required_bytes, train_memory
from accelkit.plan.layout import (
    Layout,
    check_compression,
    check_context_parallel,
    check_frozen,
    check_inference_layout,
    check_selective_recompute,
    check_user_layout,
    ep_choices,
    flag_text,
    interleaving_fits,
    is_int,
    pinned_pp_fits,
    pp_choices,
    scaleup_limit,
    tp_choices,
)
from accelkit.plan.options import PlanOptions
from accelkit.plan.request import LayoutChoice

#: the micro-batches every layout tries; larger powers of two are tried while they fit (``_micro_batches``)
MICRO_BATCHES = (1, 2, 4, 8)


def default_global_batch(workload: Workload) -> int:
    """~4 Mi tokens per step when the user gives no global batch: the power of two nearest 4 Mi / seq_len sequences
    (2^round(log2(4 Mi / seq_len)), at least 1). dp must divide the global batch, and ⌊4 Mi / seq_len⌋ is odd for most
    lengths that are not powers of two (1365 at 3072, 21290 for ViT's 197 tokens): it squeezed dp to 1-3, or left
    no layout at all on 64 devices (found in review)."""
    return 1 << max(0, round(math.log2(DEFAULT_STEP_TOKENS / workload.seq_len)))


def default_batch_assumption(workload: Workload, global_batch: int) -> str:
    """What the plan says when it chose the global batch itself."""
    if workload.model.kind == "cnn":
        return (f"global batch {global_batch:,} images: the default, the power of two nearest 4 Mi / --seq-len "
                f"{workload.seq_len:,}; --global-batch to change it")
    return (f"global batch {global_batch:,} sequences of {workload.seq_len:,} tokens ({global_batch * workload.seq_len:,} "
            "tokens per step): the default, the power of two nearest 4 Mi tokens per step; --global-batch to change it")


def _pick(fixed: dict[str, Any], key: str, choices: list[Any]) -> list[Any]:
    value = fixed.get(key)
    if value is None:
        return choices
    return [value] if value in choices else []


def _shapes(ctx: PlanContext, num_devices: int, fixed: dict[str, Any]) -> Iterator[tuple[int, int, int, int]]:
    """(tp, pp, dp, ep) on ``num_devices`` that agree with the ``fixed`` fields, cp and vp as given (default 1)."""
    model, cluster = ctx.model, ctx.cluster
    cp = fixed.get("cp") or 1  # context parallelism and virtual stages are the user's choice (training), not searched
    vp = fixed.get("vp") or 1
    if num_devices % cp:
        return
    pinned = fixed.get("pp")
    for tp in _pick(fixed, "tp", tp_choices(model, cluster, num_devices // cp, train=ctx.workload.task == "train")):
        # a free pp keeps the stages (and their vp chunks) even; a pinned one may leave them uneven
        pps = pp_choices(model, num_devices // (tp * cp)) if pinned is None else (
            [pinned] if pinned_pp_fits(model, pinned, vp, num_devices // (tp * cp),
                                       embedding_as_layer=ctx.options.pp_embedding_as_layer) else [])
        for pp in pps:
            if vp > 1 and (pp == 1 or (pinned is None and model.num_layers % (pp * vp))):
                continue
            dp = num_devices // (tp * pp * cp)
            if fixed.get("dp") not in (None, dp):
                continue
            for ep in _pick(fixed, "ep", ep_choices(model, dp)):
                yield tp, pp, dp, ep


def enumerate_layouts(ctx: PlanContext, num_devices: int, fixed: dict[str, Any], global_batch: int | None) -> Iterator[Layout]:
    """Every valid layout on ``num_devices`` that agrees with the ``fixed`` fields."""
    train = ctx.workload.task == "train"
    recomputes = _recomputes(ctx, fixed)
    cp = fixed.get("cp") or 1
    vp = fixed.get("vp") or 1
    every = fixed.get("recompute_every") or 1  # only with a pinned --recompute full (check_user_layout)
    group = fixed.get("shard_group")  # hybrid sharding: a shard group that divides dp
    for tp, pp, dp, ep in _shapes(ctx, num_devices, fixed):
        if not train:
            yield Layout(dp=dp, tp=tp, pp=pp, ep=ep, cp=cp, vp=vp)
            continue
        if global_batch is None or global_batch % dp:
            continue
        hybrid = group is not None and group < dp
        if group is not None and (dp % group or (hybrid and ep > 1)):
            continue
        per_rank = global_batch // dp
        zeros = _pick(fixed, "zero", [0] if dp * cp == 1 or ctx.workload.recipe.grad_compression == "powersgd"
                      or ctx.options.frozen_weights else [0, 1, 2, 3])  # frozen: no states for ZeRO to shard
        if hybrid:  # a shard group shards ZeRO's states
            zeros = [z for z in zeros if z > 0]
        sps = _pick(fixed, "sequence_parallel", [False, True] if tp > 1 else [False])
        mbs = _micro_batches(fixed, per_rank, pp, vp)
        fitted: dict[tuple[Any, ...], bool] = {}  # (zero, rc, sp) → whether its last micro-batch of 8 or more fits
        for zero, mb, rc, sp in itertools.product(zeros, mbs, _pick(fixed, "recompute", recomputes), sps):
            if mb > MICRO_BATCHES[-1] and not fitted.get((zero, rc, sp), True):
                continue  # half this micro-batch did not fit: neither does this one
            layout = Layout(dp, tp, pp, ep, zero, mb, per_rank // mb, rc, sp, cp, vp, every if rc == "full" else 1,
                            group)
            if MICRO_BATCHES[-1] <= mb < mbs[-1]:  # a larger one follows: it is tried only if this one fits
                fitted[zero, rc, sp] = _fits_memory(ctx, layout, None)
            yield layout


def _recomputes(ctx: PlanContext, fixed: dict[str, Any]) -> list[str]:
    """The recompute choices: selective only where it recomputes something (the math attention's scores, or
    torchtitan's op-level selection), or where it is pinned."""
    recomputes = ["none", "full"] if ctx.cnn is not None else (
        ["none", "selective", "full"] if ctx.options.attention == "math" else ["none", "full"])
    if (fixed.get("recompute") == "selective" or ctx.options.selective_recompute == "op") \
            and "selective" not in recomputes and ctx.cnn is None:
        recomputes.append("selective")
    return recomputes


def _micro_batches(fixed: dict[str, Any], per_rank: int, pp: int, vp: int) -> list[int]:
    """The micro-batches that divide a rank's share of the global batch (the pinned one, if it does), each leaving
    enough micro-batches for an interleaved pipeline: powers of two up to the share. ``enumerate_layouts`` tries
    those above ``MICRO_BATCHES`` only while the one half their size fits in memory (memory grows with the
    micro-batch). The search stopped at 8, where a small model is launch-bound: bert-base at seq 128 ran 1.85×
    faster at a pinned 64 than at the 8 the search chose (found in review)."""
    mbs = [1 << k for k in range(per_rank.bit_length()) if per_rank % (1 << k) == 0]
    if fixed.get("micro_batch") is not None:
        mbs = [fixed["micro_batch"]] if per_rank % fixed["micro_batch"] == 0 else []
    return [mb for mb in mbs if interleaving_fits(pp, vp, per_rank // mb)]


def _rank_key(ctx: PlanContext, c: Candidate) -> tuple[Any, ...]:
    over = c.memory["required"] - c.memory["capacity"]
    if ctx.workload.task == "train":
        return (not c.fits, over if not c.fits else 0.0, c.step_time_s)
    slow = _slow(ctx, c)
    # layouts over the latency bound come last, the nearest to it first
    return (not c.fits, slow, over if not c.fits else 0.0, c.latency_s if slow else -c.tokens_per_s / c.layout.num_devices)


def _slow(ctx: PlanContext, c: Candidate) -> bool:
    """Whether an inference candidate's latency is over ``options.max_decode_latency_s``."""
    bound = ctx.options.max_decode_latency_s
    return ctx.workload.task != "train" and bound is not None and c.latency_s > bound


def _meets(ctx: PlanContext, c: Candidate) -> bool:
    """Whether a candidate reaches ``options.target_tokens_per_s`` and keeps ``options.max_decode_latency_s``."""
    target = ctx.options.target_tokens_per_s
    return (target is None or c.tokens_per_s >= target) and not _slow(ctx, c)


def _constraints(ctx: PlanContext) -> str:
    """What ``min_devices`` asks of a count beyond a fitting layout, in the flags' words."""
    o = ctx.options
    parts = ["fits"]
    if o.target_tokens_per_s is not None:
        parts.append(f"reaches --target-tokens-per-s {o.target_tokens_per_s:,.0f}")
    if o.max_decode_latency_s is not None and ctx.workload.task != "train":
        parts.append(f"decodes within --max-decode-latency-s {o.max_decode_latency_s:g}")
    return and_list(parts[1:]) if len(parts) > 1 else parts[0]


def _fits_memory(ctx: PlanContext, layout: Layout, batch: int | None) -> bool:
    if ctx.workload.task == "train":
        parts = train_memory(ctx, layout)
    else:
        parts, _ = infer_memory(ctx, layout, batch or 1)
    return required_bytes(parts) <= ctx.device.memory_bytes


def search_context(ctx: PlanContext, num_devices: int, *, fixed: dict[str, Any] | None = None,
                   global_batch: int | None = None, batch: int | None = None,
                   count_flag: str | None = None, top: int | None = None) -> list[Candidate]:
    """Evaluate and rank every layout on ``num_devices`` (best first). ``count_flag``: how the user chose the count,
    for the error when no layout is valid (default ``--num-devices N``). ``top``: only the best K are wanted — when
    at least K training layouts fit, only those are ranked (the others rank after every one that fits)."""
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None}
    train = ctx.workload.task == "train"
    if not train:
        check_inference_layout(fixed, global_batch)
    check_user_layout(ctx.model, ctx.cluster, fixed, num_devices, seq_len=ctx.workload.seq_len if train else None,
                      embedding_as_layer=ctx.options.pp_embedding_as_layer, train=train)
    check_compression(ctx.workload.recipe, fixed.get("zero", 0))
    if train:
        check_frozen(ctx.options, fixed.get("zero", 0))
    if train and global_batch is None:
        global_batch = default_global_batch(ctx.workload)
        ctx.assumptions.append(default_batch_assumption(ctx.workload, global_batch))
    layouts = list(enumerate_layouts(ctx, num_devices, fixed, global_batch))
    if train and top is not None:
        # a layout's fit is its memory alone (cached for evaluate): the step time, most of an evaluation, is then
        # computed for the fitting layouts only — at the smallest count that fits, a few of hundreds
        fitting = [layout for layout in layouts if _fits_memory(ctx, layout, None)]
        if len(fitting) >= top:
            layouts = fitting
    found = [evaluate(ctx, layout, batch) for layout in layouts]
    if not found:
        raise UserError(_no_layout_message(ctx, num_devices, fixed, global_batch,
                                           count_flag or f"--num-devices {num_devices}"))
    found.sort(key=lambda c: _rank_key(ctx, c))
    return found


def _or(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " or " + items[-1]


def _rule(ctx: PlanContext, key: str) -> str:
    """What the search requires of one pinned layout field (``enumerate_layouts``), for the no-layout message."""
    m = ctx.model
    train = ctx.workload.task == "train"
    rules = {
        "dp": "dp is the devices tp·pp·cp leave and divides the global batch" if train else
              "dp is the replicas the devices leave, each of tp·pp devices",
        "tp": f"tp divides the {m.num_heads} heads, "
              + (f"divides the {m.kv_heads} KV heads (training shards whole KV heads), " if train else
                 f"divides or is a multiple of the {m.kv_heads} KV heads, ")
              + f"divides the device count and stays inside the scale-up domain ({scaleup_limit(ctx.cluster)} devices)",
        "pp": f"pp divides the device count left by {'tp·cp' if train else 'tp'}; a free pp also divides the "
              f"{m.num_layers} layers (the search tries even stages), a pinned one may leave them uneven",
        "ep": f"ep divides dp (the experts are spread over ep of the {'data-parallel ranks' if train else 'replicas'}) "
              f"and the {m.num_experts} experts",
        "cp": "cp divides the device count",
        "vp": f"pp·vp chunks hold at least one of the {m.num_layers} layers each (dividing them when pp is free) and, "
              "interleaved, the micro-batches per step are a multiple of pp (Megatron-LM's interleaved 1F1B)",
        "zero": "ZeRO 1-3 shard over the dp·cp data-parallel ranks, so they need dp·cp > 1"
                + ("; PowerSGD needs zero 0" if ctx.workload.recipe.grad_compression == "powersgd" else ""),
        "micro_batch": "the micro-batch divides each data-parallel rank's sequences (global batch ÷ dp)",
        "sequence_parallel": "sequence parallelism needs tp > 1",
        "recompute_every": "checkpointing every n-th block needs --recompute full and n within the layers",
        "shard_group": "the shard group divides dp and, below dp, needs zero 1-3 and ep 1",
    }
    return rules.get(key, f"{key} as the search takes it")


def _no_layout_message(ctx: PlanContext, n: int, fixed: dict[str, Any], global_batch: int | None,
                       count_flag: str) -> str:
    """One line naming the rule the pinned fields break: each pinned field that, left free, would give a layout is
    named with the values that would (a conflict of two pinned fields names both); then the global batch; then all
    the rules."""
    given = ", ".join(flag_text(k, v) for k, v in fixed.items()) or "no layout flags"
    train = ctx.workload.task == "train"
    extra = f" and global batch {global_batch} (--global-batch)" if train else ""
    head = f"no valid layout of {ctx.model.name} on {n} × {ctx.device.name} ({count_flag}) with {given}{extra}"
    rules, fixes = [], []
    for key in fixed:
        rest = {k: v for k, v in fixed.items() if k != key}
        values = sorted({getattr(lay, key) for lay in enumerate_layouts(ctx, n, rest, global_batch)})
        if values:
            rules.append(_rule(ctx, key))
            if isinstance(values[0], bool):
                fixes.append(_or([flag_text(key, v) for v in values]))
            else:
                fixes.append(f"--{key.replace('_', '-')} " + _or([str(v) for v in values]))
    if fixes:
        return f"{head}: {'; '.join(rules)} — use {_or(fixes)}"
    dps = sorted({dp for _, _, dp, _ in _shapes(ctx, n, fixed)})
    if train and global_batch is not None and dps and all(global_batch % dp for dp in dps):
        d = dps[0]  # the nearest multiples of the smallest dp ("a multiple of one" said nothing when dp was one value)
        near = [m for m in (global_batch // d * d, global_batch // d * d + d) if m > 0]
        return (f"{head}: dp must divide the global batch and here dp can only be {_or([str(d) for d in dps])}; give a "
                f"--global-batch that is a multiple of {d if len(dps) == 1 else 'one of them'}, e.g. "
                f"{_or([str(m) for m in near])}")
    if train:
        return (f"{head}: dp·tp·pp·cp must equal the device count, tp divide the heads (and the KV heads) and stay "
                "inside the scale-up domain, pp the layers, dp the global batch; change one of them")
    return (f"{head}: dp·tp·pp (dp replicas of tp·pp devices each) must equal the device count, tp divide the heads "
            "(and divide or be a multiple of the KV heads) and stay inside the scale-up domain, pp the layers; change "
            "one of them")


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
    """Smallest device count with a fitting layout (that also reaches the target throughput and keeps the decode
    latency bound, when given); None when no count up to ``options.max_devices`` has one."""
    fixed = {k: v for k, v in (fixed or {}).items() if v is not None}
    train = ctx.workload.task == "train"
    if not train:
        check_inference_layout(fixed, global_batch)
    elif fixed.get("cp"):  # whatever the count: the sequence must split over cp
        check_context_parallel(fixed["cp"], ctx.workload.seq_len)
    constrained = ctx.options.target_tokens_per_s is not None or (
        not train and ctx.options.max_decode_latency_s is not None)
    if train and global_batch is None:
        global_batch = default_global_batch(ctx.workload)
    for n in _counts_for(ctx, fixed):
        sized = _with_cluster(ctx, _cluster_for(ctx.cluster, n))
        try:
            check_user_layout(ctx.model, sized.cluster, fixed, n, train=ctx.workload.task == "train")
        except UserError:
            continue
        fitting = [lay for lay in enumerate_layouts(sized, n, fixed, global_batch) if _fits_memory(sized, lay, batch)]
        if not fitting:
            continue
        if not constrained or any(_meets(sized, evaluate(sized, lay, batch)) for lay in fitting):
            return n, sized
    return None, ctx


def _fastest_count(ctx: PlanContext, fixed: dict[str, Any], batch: int | None) -> tuple[Candidate, int] | None:
    """Inference under ``options.max_decode_latency_s``: the fastest fitting candidate of every count ``min_devices``
    tries (each planned at its fastest batch when none meets the bound) and the smallest count that reaches it
    (None: nothing fits anywhere). More dp never lowers a replica's latency and pp does not either, so a bound no
    count meets was planned on the largest count (65,536 H100s for what tp 8 on 8 does); this finds the count to
    plan instead."""
    fixed = {k: v for k, v in fixed.items() if v is not None}
    best: tuple[Candidate, int] | None = None
    for n in _counts_for(ctx, fixed):
        sized = _with_cluster(ctx, _cluster_for(ctx.cluster, n))
        try:
            check_user_layout(ctx.model, sized.cluster, fixed, n, train=False)
        except UserError:
            continue
        for lay in enumerate_layouts(sized, n, fixed, None):
            if not _fits_memory(sized, lay, batch):
                continue
            c = evaluate(sized, lay, batch)
            # a later count must be faster by more than rounding to count (dp replicas decode at the same speed)
            if c.fits and (best is None or c.latency_s < best[0].latency_s * (1 - 1e-9)):
                best = c, n
    return best


def _largest_counts(ctx: PlanContext, fixed: dict[str, Any], global_batch: int | None) -> tuple[int | None, int | None]:
    """Of the counts ``min_devices`` tries: the largest the pinned fields accept (``check_user_layout``) and the
    largest with any valid layout, fitting or not (None: no such count)."""
    fixed = {k: v for k, v in fixed.items() if v is not None}
    if ctx.workload.task == "train" and global_batch is None:
        global_batch = default_global_batch(ctx.workload)
    accepted = None
    for n in reversed(list(_counts_for(ctx, fixed))):
        sized = _with_cluster(ctx, _cluster_for(ctx.cluster, n))
        try:
            check_user_layout(ctx.model, sized.cluster, fixed, n, train=ctx.workload.task == "train")
        except UserError:
            continue
        accepted = accepted or n
        if next(enumerate_layouts(sized, n, fixed, global_batch), None) is not None:
            return accepted, n
    return accepted, None


def _counts_for(ctx: PlanContext, fixed: dict[str, Any]) -> Iterator[int]:
    """The counts ``min_devices`` tries: dp·tp·pp·cp alone when dp, tp and pp are all pinned, else ``_counts``."""
    if all(fixed.get(k) is not None for k in ("dp", "tp", "pp")):
        n = fixed["dp"] * fixed["tp"] * fixed["pp"] * (fixed.get("cp") or 1)
        if n <= ctx.options.max_devices:
            yield n
        return
    yield from _counts(ctx.device, ctx.options.max_devices)


def _with_cluster(ctx: PlanContext, cluster: Cluster) -> PlanContext:
    """The same context on a cluster of another size (peaks and efficiencies do not change)."""
    return replace(ctx, cluster=cluster, assumptions=list(ctx.assumptions), warnings=list(ctx.warnings))


def search(workload: Workload, cluster: Cluster, *, options: PlanOptions | None = None,
           fixed: dict[str, Any] | None = None, global_batch: int | None = None, batch: int | None = None,
           minimize_devices: bool = False, top: int | None = None) -> list[Candidate]:
    """Ranked candidates (best first) for ``workload`` on ``cluster.num_devices`` of its device.

    ``minimize_devices`` instead finds the smallest count that fits (and reaches
    ``options.target_tokens_per_s``) and ranks the layouts there. ``fixed`` pins layout fields (those of
    ``LayoutChoice``: dp, tp, pp, ep, cp, vp, zero, micro_batch, recompute, recompute_every, sequence_parallel,
    shard_group);
    ``global_batch`` (training, sequences; default ~4 Mi tokens) and ``batch`` (inference, sequences per
    replica; default the largest that fits, capped by ``options.max_serving_batch``); ``top``: keep the best
    K (default all). A bad argument is a one-line UserError, as on the CLI. Each candidate's
    ``extra['context']`` is its PlanContext.
    """
    ctx = make_context(workload, cluster, options)
    return search_ctx(ctx, fixed=fixed, global_batch=global_batch, batch=batch,
                      num_devices=None if minimize_devices else cluster.num_devices, top=top)


def check_arguments(fixed: dict[str, Any] | None, **counts: int | None) -> None:
    """Raise UserError for what the CLI's flag ranges refuse but Python callers can pass: a ``fixed`` key the
    search does not read (it would be ignored: a typo plans unpinned), a pinned value out of its range, and a
    count below 1 (``global_batch=-4`` planned a negative step time; 0 divided by zero; ``top=-1`` sliced off
    the last candidate)."""
    if fixed is not None:
        if not isinstance(fixed, dict):
            raise UserError(f"fixed={fixed!r} is not valid; give a dict of layout fields, e.g. {{'tp': 2}}")
        known = [f.name for f in fields(LayoutChoice)]
        for key in fixed:
            if key not in known:
                near = closest(str(key), known)
                hint = f"did you mean {near!r}? " if near else ""
                raise UserError(f"fixed has no layout field {key!r}; {hint}the fields are {', '.join(known)}")
        try:
            LayoutChoice(**fixed)
        except ValueError as e:
            raise UserError(f"fixed: {e}") from None
    for name, value in counts.items():
        if value is not None and (not is_int(value) or value < 1):
            what, default = _COUNTS[name]
            raise UserError(f"{name}={value!r} is not valid; give a positive integer ({what}), or None for {default}")


#: each count ``search_ctx`` takes: what it counts, and what None gives
_COUNTS = {
    "global_batch": ("sequences per training step", "about 4 Mi tokens per step"),
    "batch": ("concurrent sequences per inference replica", "the most that fit"),
    "num_devices": ("devices", "the smallest count that fits"),
    "top": ("the best K candidates", "all of them"),
}


def _check_pinned_fields(ctx: PlanContext, fixed: dict[str, Any]) -> None:
    """Without a device count: refuse pinned fields no count can hold for a reason of their own (``--tp 3`` on 64
    heads), in check_user_layout's words, rather than after walking every count up to --max-devices. They are
    checked at the count they pin, dp·tp·pp·cp, where no count-dependent rule can fail."""
    given = {k: v for k, v in fixed.items() if v is not None}
    count = 1
    for key in ("dp", "tp", "pp", "cp"):
        value = given.get(key)
        if is_int(value) and value > 0:
            count *= value
    train = ctx.workload.task == "train"
    if not train:  # as search_context does, first: --vp 2 was refused as needing --pp > 1, and --pp 2 --vp 2 then as
        check_inference_layout(given, None)  # not modelled for inference (found in a docs hunt)
    check_user_layout(ctx.model, ctx.cluster, given, count, seq_len=ctx.workload.seq_len if train else None,
                      embedding_as_layer=ctx.options.pp_embedding_as_layer, train=train)


def _fastest_reachable(ctx: PlanContext, fixed: dict[str, Any], batch: int | None) -> tuple[int | None, PlanContext]:
    """Inference whose ``--max-decode-latency-s`` no count meets: the smallest count with the best latency there is
    (and the target throughput at that latency, when one is given), with a warning naming it — not the largest
    count. (None, ctx) where that does not apply."""
    bound = ctx.options.max_decode_latency_s
    fastest = None if bound is None or ctx.workload.task == "train" else _fastest_count(ctx, fixed, batch)
    if fastest is None or bound is None or fastest[0].latency_s <= bound:
        return None, ctx
    best, at = fastest
    relaxed = replace(ctx.options, max_decode_latency_s=best.latency_s * (1 + 1e-9))
    n, _ = min_devices(replace(ctx, options=relaxed), fixed=fixed, batch=batch)
    if n is None:
        return None, ctx
    took = (f"decode is {best.latency_s * 1e3:.3g} ms per token" if best.decode_time_per_token_s else
            f"batch takes {best.latency_s * 1e3:.3g} ms")  # no decode: the batch's prefill (_latency_s)
    lay = best.layout
    where = (f"tp {lay.tp}" + (f", pp {lay.pp}" if lay.pp > 1 else "") + (f", ep {lay.ep}" if lay.ep > 1 else "")
             + f" on {at} × {ctx.device.name}")
    sized = _with_cluster(ctx, _cluster_for(ctx.cluster, n))
    note = (f"--max-decode-latency-s {bound:g} is not reachable on any device count up to --max-devices "
            f"{ctx.options.max_devices}: the fastest {took} ({where}, batch {best.batch}); "
            f"showing the smallest count that reaches it"
            + ("" if ctx.options.target_tokens_per_s is None else
               f" and --target-tokens-per-s {ctx.options.target_tokens_per_s:,.0f}"))
    sized.assumptions.append(note)
    sized.warnings.append(note)
    return n, sized


def _largest_fallback(ctx: PlanContext, fixed: dict[str, Any],
                      global_batch: int | None) -> tuple[int, PlanContext, str | None]:
    """Nothing fits (or meets the target) at any count tried: the largest count with a layout, a warning saying so,
    and the count flag ``search_context`` names when even that has no layout."""
    limit, count_flag = ctx.options.max_devices, None
    accepted, n = _largest_counts(ctx, fixed, global_batch)
    if n is None:  # no count has a valid layout: search_context says why, at the largest it accepts
        pinned = {k: v for k, v in fixed.items() if v is not None}
        if accepted is None and all(is_int(pinned.get(k)) for k in ("dp", "tp", "pp")):
            # the pinned fields name one count, above the limit: say it (the words below named no cause)
            count = pinned["dp"] * pinned["tp"] * pinned["pp"] * (pinned.get("cp") or 1)
            product = "dp·tp·pp·cp" if ctx.workload.task == "train" else "dp·tp·pp"
            raise UserError(f"{product} = {count} devices is above --max-devices {limit}; raise --max-devices "
                            f"to {count} or more, or pin smaller values")
        if accepted is None:
            raise UserError(f"no device count up to --max-devices {limit} can hold the layout fields given "
                            f"({', '.join(flag_text(k, v) for k, v in pinned.items())}"
                            "); give --num-devices, or raise --max-devices")
        n, count_flag = accepted, f"nor any other count up to --max-devices {limit}"
    sized = _with_cluster(ctx, _cluster_for(ctx.cluster, n))
    note = f"no device count up to --max-devices {limit} {_constraints(ctx)}; showing the best layout on {n}"
    sized.assumptions.append(note)
    sized.warnings.append(note)
    return n, sized, count_flag


def search_ctx(ctx: PlanContext, *, fixed: dict[str, Any] | None = None, global_batch: int | None = None,
               batch: int | None = None, num_devices: int | None = None, top: int | None = None) -> list[Candidate]:
    """``search`` on a made context (``num_devices`` None: the smallest count that fits)."""
    check_arguments(fixed, global_batch=global_batch, batch=batch, num_devices=num_devices, top=top)
    if ctx.workload.task == "train" and batch is not None:  # read by inference only: a training plan ignored it
        raise UserError(f"--batch {batch} applies to --task infer (concurrent sequences per replica); for training "
                        "give --global-batch (sequences per step)")
    if ctx.workload.task == "train":
        check_selective_recompute(ctx.model, ctx.options, (fixed or {}).get("recompute"))
    count_flag = None
    if num_devices is None:
        _check_pinned_fields(ctx, fixed or {})
        n, sized = min_devices(ctx, fixed=fixed, global_batch=global_batch, batch=batch)
        if n is None:
            n, sized = _fastest_reachable(ctx, fixed or {}, batch)
        if n is None:  # nothing fits (or meets the target) anywhere we looked: the largest count with a layout
            n, sized, count_flag = _largest_fallback(ctx, fixed or {}, global_batch)
    else:
        n, sized = num_devices, _with_cluster(ctx, _cluster_for(ctx.cluster, num_devices))
    found = search_context(sized, n, fixed=fixed, global_batch=global_batch, batch=batch, count_flag=count_flag,
                           top=top)
    if _slow(sized, found[0]) and num_devices is not None:  # a pinned count (or batch) where no layout keeps the bound
        best = found[0]
        took = f"{best.latency_s * 1e3:.3g} ms" + (" per token" if best.decode_time_per_token_s else " of prefill")
        note = (f"no layout on {n} × {sized.device.name} decodes within --max-decode-latency-s "
                f"{sized.options.max_decode_latency_s:g}; showing the fastest, {took} at batch {best.batch}"
                + ("" if batch is None else " (--batch)"))
        sized.assumptions.append(note)
        sized.warnings.append(note)
    target = sized.options.target_tokens_per_s
    if target is not None and num_devices is not None and found[0].tokens_per_s < target:
        # a count given (--num-devices, or a --compare basis): the target chose no count here, so say it is missed
        # rather than drop it silently, as --max-decode-latency-s does
        note = (f"the best layout on {n} × {sized.device.name} reaches {found[0].tokens_per_s:,.0f} tokens/s, short of "
                f"--target-tokens-per-s {target:,.0f}")
        sized.assumptions.append(note)
        sized.warnings.append(note)
    for c in found:
        c.extra["context"] = sized
    sized.memo.clear()  # the estimates served this search; the plans it returns keep their context, not the cache
    return found[:top] if top else found
