"""The planner's public calls: ``plan`` (one given layout → Estimate) and the JSON document the CLI
prints (field names fixed by issue 3; other tools rely on them)."""

from __future__ import annotations

from typing import Any

from accelkit.core import Cluster, Estimate, UserError, Workload
from accelkit.core.units import fmt_bytes
from accelkit.plan.context import PlanContext, kv_cache_dtype, make_context
from accelkit.plan.evaluate import MEMORY_KEYS, Candidate, evaluate
from accelkit.plan.grad_comm import PowerSGDSplit, describe, grad_reduction, rank_split
from accelkit.plan.kv_capacity import describe as describe_kv_capacity
from accelkit.plan.kv_capacity import kv_capacity
from accelkit.plan.layout import (
    Layout,
    check_compression,
    check_frozen,
    check_inference_plan_layout,
    check_interleaving,
    check_layout_fields,
    check_user_layout,
    checkpointed_blocks,
)
from accelkit.plan.options import PlanOptions
from accelkit.plan.stages import stage_blocks, stage_layers, stage_param_split
from accelkit.plan.time import (
    compression_s,
    dp_groups,
    links,
    reduce_s,
    reductions_per_step,
    replica_links,
    replica_reduce_s,
)


def layout_of(workload: Workload) -> Layout:
    r = workload.recipe
    return Layout(dp=r.dp, tp=r.tp, pp=r.pp, ep=r.ep, zero=r.zero, micro_batch=r.micro_batch,
                  grad_accum=r.grad_accum, recompute=r.recompute, sequence_parallel=r.sequence_parallel)


def plan(workload: Workload, cluster: Cluster, options: PlanOptions | None = None, *,
         layout: Layout | None = None) -> Estimate:
    """Predict the layout written in ``workload.recipe`` on ``cluster`` (dp·tp·pp must equal its size).

    Training takes the global batch from the layout (dp · micro_batch · grad_accum); inference plans
    ``workload.batch_size`` sequences per model replica. ``layout`` replaces the recipe's layout when the run
    uses what a Recipe cannot say (context parallelism ``cp``, interleaved stages ``vp``); ``options`` carries
    the software stack (attention kernel, eager or fused kernels, dropout, tensor-parallel overlap). This is
    the one time model: `accelkit plan`, the bench's predicted-vs-measured and docs/validation.md all call it.
    Use ``accelkit.plan.search`` to choose a layout.
    """
    if layout is None:
        layout = layout_of(workload)
    check_layout_fields(layout)
    if workload.task != "train":
        check_inference_plan_layout(layout)
    if layout.recompute == "budget":
        raise UserError("recompute 'budget' is not modelled by the planner; use none, selective or full")
    if layout.num_devices != cluster.num_devices:
        raise UserError(f"the recipe's dp·tp·pp = {layout.num_devices} but the cluster has {cluster.num_devices} "
                        "devices; make them equal" if layout.cp == 1 else
                        f"the layout's dp·tp·pp·cp = {layout.num_devices} but the cluster has {cluster.num_devices} "
                        "devices; make them equal")
    ctx = make_context(workload, cluster, options)
    train = workload.task == "train"
    check_user_layout(workload.model, cluster, layout.to_dict(), cluster.num_devices,
                      seq_len=workload.seq_len if train else None, embedding_as_layer=ctx.options.pp_embedding_as_layer,
                      train=train)
    if train:
        check_interleaving(layout)
    check_compression(workload.recipe, layout.zero)
    if train:
        check_frozen(ctx.options, layout.zero)
    batch = workload.batch_size if workload.task != "train" else None
    return to_estimate(evaluate(ctx, layout, batch), ctx)


def _bytes(x: float | None) -> int | None:
    return None if x is None else round(x)


def _mfu_warning(c: Candidate, ctx: PlanContext) -> list[str]:
    """An MFU above 100% is no plan: the model's FLOPs would run faster than the device's peak allows."""
    if c.mfu <= 1.0:
        return []
    return [f"the plan's MFU is {c.mfu:.0%}, above the {ctx.peak_dtype} peak: the time model is inconsistent for "
            "this workload — do not use these times"]


def _kv_budget_warning(c: Candidate, ctx: PlanContext) -> list[str]:
    """A --kv-cache-memory budget that does not fit beside this device's weights, the step's activations and the
    framework allowance: `accelkit serve` refuses it (serve/preflight.py check_memory: weights + KV budget over the
    device), so the plan says so with the figures and the largest budget that fits."""
    budget = ctx.options.kv_cache_memory_bytes
    if budget is None or ctx.workload.task == "train" or ctx.model.kind not in ("decoder", "moe"):
        return []
    mem = c.memory
    rest = mem["weights"] + mem["activations"] + mem["other"]
    if rest + budget <= mem["capacity"]:
        return []
    room = int(mem["capacity"] - rest) >> 20  # whole MiB, rounded down: the flag value that fits
    lower = f"lower --kv-cache-memory to {room}MiB or less, or " if room > 0 else ""
    return [f"--kv-cache-memory {fmt_bytes(budget)} + this device's weights {fmt_bytes(mem['weights'])}, activations "
            f"{fmt_bytes(mem['activations'])} and --overhead {fmt_bytes(mem['other'])} = {fmt_bytes(rest + budget)}, "
            f"more than the {fmt_bytes(mem['capacity'])} of one {ctx.device.name}: `accelkit serve` refuses this "
            f"budget; {lower}spread the weights over more devices (--tp, --pp)"]


def _assumed_efficiency(ctx: PlanContext) -> dict[str, float]:
    """The figures this plan ASSUMES for the card, by name: its kernel efficiencies with no published or measured
    value, and a serving fraction borrowed from another family (MI325X: MI300X's)."""
    out = {k: getattr(ctx.efficiency, k) for k in ctx.efficiency.assumed}
    if ctx.serving_attained_assumed:
        out["serving_attained"] = ctx.serving_attained
    return out


def to_json(c: Candidate, ctx: PlanContext) -> dict[str, Any]:
    """The issue-3 document for one candidate."""
    m, w = ctx.model, ctx.workload
    lay = c.layout
    mem = {k: _bytes(c.memory[k]) for k in MEMORY_KEYS}
    mem["total"] = _bytes(c.memory["total"])
    doc: dict[str, Any] = {
        "model": {"name": m.name, "params": m.num_params(), "active_params": m.num_active_params()},
        "task": w.task,
        "hardware": {"name": ctx.device.name, "num_devices": lay.num_devices},
        "layout": {"dp": lay.dp, "tp": lay.tp, "pp": lay.pp, "ep": lay.ep, "zero": lay.zero,
                   "micro_batch": lay.micro_batch, "grad_accum": lay.grad_accum, "recompute": lay.recompute,
                   "recompute_every": lay.recompute_every, "sequence_parallel": lay.sequence_parallel, "cp": lay.cp,
                   "vp": lay.vp, "shard_group": lay.shard_group or lay.dp},
        "memory_per_device_bytes": mem,
        "memory_capacity_bytes": int(c.memory["capacity"]),
        "fits": c.fits,
        "overflow": c.overflow,
        "flops_per_step": c.flops_per_step,
        "step_time_s": c.step_time_s,
        "tokens_per_s": None if m.kind == "cnn" else c.tokens_per_s,
        "tokens_per_s_per_device": None if m.kind == "cnn" else c.tokens_per_s / lay.num_devices,
        "mfu": c.mfu,
        "time_breakdown_s": dict(c.time_breakdown),
        "bottleneck": c.bottleneck,
        "energy_j_per_token": None if m.kind == "cnn" else c.energy_j_per_token,
        "assumptions": list(ctx.assumptions) + layout_assumptions(ctx, lay),
        "assumed_efficiency": _assumed_efficiency(ctx),
        "warnings": list(ctx.warnings) + _mfu_warning(c, ctx) + _kv_budget_warning(c, ctx),
    }
    if ctx.compare_basis is not None:
        doc["compare_basis"] = ctx.compare_basis
    if m.kind == "cnn":
        doc["samples_per_s"] = c.tokens_per_s
        doc["energy_j_per_sample"] = c.energy_j_per_token
    if w.task == "train":
        doc["global_batch"] = c.batch
        doc["seq_len"] = w.seq_len
        doc["grad_reduction"] = grad_reduction_doc(ctx, lay, c.powersgd_split)
        if c.memory.get("host_optimizer"):  # per rank: this device's share of the optimizer states
            doc["host_memory_bytes"] = {"optimizer": _bytes(c.memory["host_optimizer"])}
    else:
        doc.update(prefill_time_s=c.prefill_time_s, decode_time_per_token_s=c.decode_time_per_token_s,
                   max_batch=c.max_batch, batch=c.batch, serving_itl_s=c.itl_s, tokens_counted=c.tokens_counted)
        capacity = kv_capacity(ctx, lay)
        if capacity is not None:
            doc.update(prompt_len=w.prompt_len, output_len=w.output_len, kv_cache_dtype=kv_cache_dtype(w),
                       kv_cache_dtype_requested=w.recipe.kv_cache_dtype, kv_cache_capacity=capacity.to_dict())
            doc["assumptions"].append(describe_kv_capacity(ctx, capacity))
    if ctx.options.price_per_device_hour is not None and c.cost_per_step is not None:
        per_token = c.cost_per_step / c.tokens_per_step if c.tokens_per_step else None
        doc["cost"] = {"price_per_device_hour": ctx.options.price_per_device_hour, "price_source": ctx.price_source,
                       "per_step": c.cost_per_step,
                       "per_hour": c.cost_per_step / c.step_time_s * 3600 if c.step_time_s else None,
                       "per_million_tokens": None if per_token is None else per_token * 1e6}
        if m.kind == "cnn":  # its items are images, as samples_per_s and energy_j_per_sample say
            doc["cost"]["per_million_samples"] = doc["cost"].pop("per_million_tokens")
    return doc


def layout_assumptions(ctx: PlanContext, layout: Layout) -> list[str]:
    """Assumptions that depend on the layout chosen (the context's hold for every layout)."""
    out = []
    m = ctx.model
    if m.is_transformer and layout.pp > 1 and m.num_layers % (layout.pp * layout.vp):
        first, middle, last = stage_blocks(ctx, layout)
        chunks = f"pp {layout.pp}" + (f" × vp {layout.vp}" if layout.vp > 1 else "")
        out.append(f"uneven pipeline stages: the {m.num_layers} layers do not divide over {chunks}; planned at the "
                   f"heaviest stage — first {first}, middle {middle}, last {last} blocks"
                   + (" (the embedding and the head counted as one block each)" if ctx.options.pp_embedding_as_layer
                      else " (every stage taken at the ceiling; --pp-embedding-as-layer for Megatron's lighter "
                           "first and last stages)"))
    if ctx.workload.task == "train" and layout.replicas > 1:
        rl = replica_links(ctx, layout)
        where = "across nodes" if rl is not None and rl.spans_nodes else "inside a node"
        sg = links(ctx, layout.shard_ranks, layout.tp)
        out.append(f"hybrid sharding (--shard-group {layout.shard_group}, PyTorch HSDP / DeepSpeed MiCS): ZeRO-"
                   f"{layout.zero} states sharded over {layout.shard_ranks} ranks "
                   f"({'across nodes' if sg.spans_nodes else 'inside a node'}) and replicated over {layout.replicas} "
                   f"groups; each gradient reduction is a reduce-scatter in the group, then an all-reduce of the "
                   f"shard across the groups ({where})")
    if ctx.workload.task == "train" and layout.recompute == "full" and layout.recompute_every > 1 and ctx.cnn is None:
        blocks = stage_layers(ctx, layout)
        n = layout.recompute_every
        out.append(f"full recompute of one block in {n} (--recompute-every {n}, torchtitan's selective_ac_option "
                   f"{n}): {checkpointed_blocks(blocks, n)} of the heaviest stage's {blocks} blocks keep only their "
                   "input and run their forward again in backward; the others keep all their activations")
    if ctx.workload.task == "train" and layout.recompute == "selective" and ctx.options.selective_recompute == "op":
        out.append("selective recompute, op-level (--selective-recompute op, torchtitan's policy): the block input and "
                   "the outputs of every other matmul (q, v, gate/fc1, down/fc2) and of attention are kept; the other "
                   "matmuls and the pointwise ops run again in backward")
    elif ctx.workload.task == "train" and layout.recompute == "selective" and ctx.options.attention != "math":
        out.append(f"selective recompute recomputes the attention core's s² scores and softmax, which --attention "
                   f"{ctx.options.attention} never stores: with this kernel it plans the same memory and time as "
                   "--recompute none (use --recompute full, or --attention math for Megatron 2022's unfused core)")
    return out


def grad_reduction_doc(ctx: PlanContext, layout: Layout, split: PowerSGDSplit | None = None) -> dict[str, Any] | None:
    """The data-parallel gradient reduction of a training plan: bytes per reduction and rank, its collective
    time, the compression compute (plan/grad_comm.py); None without data parallelism. With expert parallelism
    the experts' gradients are reduced over their own, smaller group (``expert_dp``): the top level describes
    the dense parameters' reduction over dp·cp, ``expert_group`` the experts' (absent when ep spans dp·cp).
    ``split``: the PowerSGD split the candidate's step time used (``Candidate.powersgd_split``; made here when None)."""
    if layout.dp * layout.cp == 1 or ctx.options.frozen_weights:
        return None
    per_step = reductions_per_step(layout)
    if split is None:
        split = rank_split(ctx, layout)
    docs = []
    for group_links, params in dp_groups(ctx, layout, *stage_param_split(ctx, layout)):
        red = grad_reduction(ctx, layout, params, split)
        docs.append({**describe(red), "group_size": group_links.n, "reductions_per_step": per_step,
                     "buffer_bytes_per_step": round(red.sent_bytes * per_step),
                     "collective_s": reduce_s(group_links, red) * per_step, "compress_s": compression_s(ctx, layout, red)})
        if layout.replicas > 1:  # hybrid sharding: the shard's all-reduce across the groups, after each reduction
            docs[-1].update(replicas=layout.replicas, replica_all_reduce_s=replica_reduce_s(ctx, layout, red) * per_step)
    if not docs:
        return None
    doc = docs[0]
    if len(docs) > 1:
        doc["expert_group"] = docs[1]
    return doc


def to_estimate(c: Candidate, ctx: PlanContext) -> Estimate:
    """The candidate as an Estimate for the results store (``details`` holds the JSON document)."""
    doc = to_json(c, ctx)
    w = ctx.workload
    lay = c.layout
    recipe = w.recipe.replace(dp=lay.dp, tp=lay.tp, pp=lay.pp, ep=lay.ep, zero=lay.zero, micro_batch=lay.micro_batch,
                              grad_accum=lay.grad_accum, recompute=lay.recompute,
                              sequence_parallel=lay.sequence_parallel)
    workload = w.replace(recipe=recipe, batch_size=c.batch or w.batch_size)
    unit = "samples/s" if ctx.model.kind == "cnn" else ("tokens/s" if w.task == "train" else
                                                        f"{c.tokens_counted or 'output'} tokens/s")
    return Estimate(
        kind="plan", name=f"{ctx.model.name} {w.task} on {lay.num_devices}×{ctx.device.name}", workload=workload,
        hardware=ctx.device.name, num_devices=lay.num_devices, throughput=c.tokens_per_s, throughput_unit=unit,
        memory_bytes={k: int(v) for k, v in doc["memory_per_device_bytes"].items()}, mfu=c.mfu,
        energy_j_per_item=c.energy_j_per_token, details=doc,
    )
