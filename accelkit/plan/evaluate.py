"""Evaluate one layout: memory per device (and whether it fits), step time, throughput, MFU, energy.
This is the search's inner loop: plain floats and dicts, no validated specs."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from accelkit.plan import energy as E
from accelkit.plan import flops as F
from accelkit.plan.context import PlanContext
from accelkit.plan.grad_comm import PowerSGDSplit, powersgd_memory_bytes, rank_split
from accelkit.plan.layout import Layout
from accelkit.plan.memory import (
    head_activation_bytes,
    kv_cache_bytes,
    layer_activation_bytes,
    model_state_bytes,
)
from accelkit.plan.stages import (
    stage_blocks,
    stage_param_split,
    stage_recompute_share,
    stage_weight_bytes,
)
from accelkit.plan.time import expert_dp, infer_time, train_time

MEMORY_KEYS = ("weights", "gradients", "optimizer", "activations", "kv_cache", "other")


@dataclass(slots=True)
class Candidate:
    """A layout with everything the planner predicts for it."""

    layout: Layout
    memory: dict[str, float]
    fits: bool
    flops_per_step: float
    step_time_s: float
    time_breakdown: dict[str, float]
    tokens_per_step: float
    mfu: float
    energy_j_per_token: float | None
    cost_per_step: float | None
    batch: int | None = None
    prefill_time_s: float | None = None
    decode_time_per_token_s: float | None = None
    max_batch: int | None = None
    itl_s: float | None = None  # serving: decode step + the prefills continuous batching interleaves per step
    #: inference: what ``tokens_per_step`` counts — "output" (generated tokens), "prompt" (a prefill-only LM run,
    #: output_len 0: prompt tokens/s), "input" (an encoder's sequence tokens); None for training and CNNs
    tokens_counted: str | None = None
    #: training under PowerSGD: how the step time split this rank's gradient tensors (grad_comm.rank_split, a walk
    #: over every tensor), kept so that the plan document's gradient reduction is computed from the same split
    powersgd_split: PowerSGDSplit | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens_per_step / self.step_time_s if self.step_time_s > 0 else 0.0

    @property
    def latency_s(self) -> float:
        """What ``max_decode_latency_s`` bounds: the per-token decode time, else (no decode) the batch's prefill."""
        return self.decode_time_per_token_s or self.prefill_time_s or 0.0

    @property
    def bottleneck(self) -> str:
        return max(self.time_breakdown, key=self.time_breakdown.__getitem__)

    @property
    def overflow(self) -> dict[str, Any] | None:
        """When it does not fit: how much over, and the components in order of size."""
        if self.fits:
            return None
        held = {k: self.memory[k] for k in MEMORY_KEYS}
        held["kv_cache"] = max(held["kv_cache"], self.memory.get("kv_budget", 0.0))  # the engine's whole budget
        parts = sorted(((k, v) for k, v in held.items() if v > 0), key=lambda kv: -kv[1])
        return {"over_by_bytes": self.memory["required"] - self.memory["capacity"],
                "largest": [k for k, _ in parts[:3]]}


def required_bytes(parts: dict[str, float]) -> float:
    """What one device must hold: the memory components, the KV cache at least the ``kv_budget`` an inference
    engine allocates up front (``--kv-cache-memory``; its part stays the batch's own KV)."""
    kv = parts["kv_cache"]
    return sum(parts[k] for k in MEMORY_KEYS) - kv + max(kv, parts.get("kv_budget", 0.0))


def _finish_memory(ctx: PlanContext, parts: dict[str, float]) -> tuple[dict[str, float], bool]:
    total = sum(parts[k] for k in MEMORY_KEYS)
    required = required_bytes(parts)
    capacity = float(ctx.device.memory_bytes)
    return {**parts, "total": total, "required": required, "capacity": capacity}, required <= capacity


def inflight_micro_batches(pp: int, vp: int, grad_accum: int, rank: int = 0) -> float:
    """Micro-batches of whole-stage activations pipeline stage ``rank`` holds at its peak (the first stage: 0).

    1F1B: pp − rank (its warm-up forwards plus one), at most the grad_accum there are. Interleaved 1F1B (vp > 1)
    warms up 2(pp−rank−1) + (vp−1)·pp chunks and runs one more forward before its first backward, each chunk 1/vp
    of the stage (Megatron-LM's forward_backward_pipelining_with_interleaving); on the first stage that is
    pp + (pp−1)/vp = pp·(1 + (pp−1)/(pp·vp)) — Korthikanti et al. 2022 §4.2.3: the interleaved schedule of
    Narayanan et al. 2021 multiplies the first stage's activation memory by 1 + (p−1)/(pm), m interleaved
    stages. Capped at grad_accum (every micro-batch of every chunk at once)."""
    if vp > 1:
        return min(float(grad_accum), (2 * (pp - rank - 1) + (vp - 1) * pp + 1) / vp)
    return float(min(pp - rank, grad_accum))


def interleaved_peak_bytes(pp: int, vp: int, grad_accum: int, rank: int, chunk_bytes: Sequence[float]) -> float:
    """The most activation bytes pipeline rank ``rank`` holds at once under Megatron-LM's interleaved 1F1B schedule,
    when its ``vp`` chunks keep different bytes per micro-batch (``chunk_bytes[c]``: chunk c's, one micro-batch).

    The schedule is played forward (``forward_backward_pipelining_with_interleaving``): the rank runs
    2(pp−rank−1) + (vp−1)·pp warm-up forwards, then one forward and one backward at a time, then the cool-down
    backwards; virtual micro-batch k runs its forward on chunk (k mod pp·vp) // pp and its backward on chunk
    vp − 1 − that (``get_model_chunk_id``). A forward adds its chunk's bytes, a backward frees them; the peak is
    taken after each forward. With equal chunks this is ``inflight_micro_batches`` × the stage's bytes; it differs
    when the chunks do not hold the same blocks — the Llama 3 paper's first chunk of the first stage holds only the
    embedding (Dubey et al. 2024 §3.3.2), and it is that chunk the extra warm-up micro-batches (the ones beyond
    pp) sit in, so the first stage keeps no more transformer-layer activations than under plain 1F1B."""
    total = grad_accum * vp
    warmup = min(2 * (pp - rank - 1) + (vp - 1) * pp, total)

    def chunk(k: int, forward: bool) -> int:
        c = (k % (pp * vp)) // pp
        return c if forward else vp - 1 - c

    held = peak = 0.0
    backward = 0
    # after the warm-up the chunks a forward and a backward touch repeat every pp·vp micro-batches: one period past
    # the warm-up holds every state the rest of the step passes through
    for k in range(min(total, warmup + 2 * pp * vp)):
        held += chunk_bytes[chunk(k, True)]
        peak = max(peak, held)
        if k >= warmup:  # steady state: each forward is followed by the oldest backward
            held -= chunk_bytes[chunk(backward, False)]
            backward += 1
    return peak


def _chunks(blocks: int, vp: int, per_layer: float, *, end_slot: bool, end_bytes: float, first: bool) -> list[float]:
    """One micro-batch's activation bytes in each of a stage's ``vp`` chunks. ``end_slot``: the embedding (first
    stage) or the head (last stage) takes one block's place in the partition (``pp_embedding_as_layer``), in the
    first or the last chunk; ``end_bytes``: what it keeps per micro-batch (``head_activation_bytes``)."""
    per_chunk = (blocks + (1 if end_slot else 0)) / vp  # blocks of the partition per chunk
    layers = [per_chunk] * vp
    end = 0 if first else vp - 1
    if end_slot:
        layers[end] -= 1
    out = [n * per_layer for n in layers]
    out[end] += end_bytes
    return out


def train_memory(ctx: PlanContext, layout: Layout) -> dict[str, float]:
    """Bytes on one device of the heaviest pipeline stage. Computed once per layout and context (``ctx.memo``): the
    device-count search checks a layout's fit, may check it again (``enumerate_layouts`` tries a larger micro-batch
    only when this one fits) and ranks the count it settles on with ``evaluate``; each gets a copy to keep."""
    key = ("train_memory", layout)
    parts = ctx.memo.get(key)
    if parts is None:
        parts = ctx.memo[key] = _train_memory(ctx, layout)
    return dict(parts)


def _train_memory(ctx: PlanContext, layout: Layout) -> dict[str, float]:
    w, o = ctx.workload, ctx.options
    dense, expert = stage_param_split(ctx, layout)
    params = dense + expert
    states = model_state_bytes(dense, precision=w.recipe.precision, optimizer=w.optimizer, zero=layout.zero,
                               dp=layout.shard_ranks, offload=w.recipe.offload, expert_params=expert,
                               expert_dp=expert_dp(layout), fp32_params=o.autocast_fp32_params,
                               optimizer_states=o.optimizer_states, frozen=o.frozen_weights,
                               grad_fp32=o.grad_reduce_fp32)
    other = float(o.overhead_bytes)
    if layout.dp * layout.cp > 1 and not o.frozen_weights:
        other += powersgd_memory_bytes(ctx, params)  # PowerSGD's error-feedback copy of the gradients
    if ctx.cnn is not None:
        acts = ctx.cnn["saved_bytes"] * layout.micro_batch
    else:
        # the activations do not depend on how the data-parallel ranks shard the states (dp, ep, ZeRO, shard group):
        # the ZeRO stages the search tries for one shape share them
        # (keyed by the layout with those fields blanked, so a field added to Layout later is in the key by default)
        key = ("activations", layout._replace(dp=1, ep=1, zero=0, shard_group=None))
        acts = ctx.memo.get(key)
        if acts is None:
            acts = ctx.memo[key] = _activation_bytes(ctx, layout)
        if layout.zero >= 3:  # the gathered weights of the current and the prefetched layer
            other += 2 * (ctx.layer_params + ctx.layer_expert_params / layout.ep) / layout.tp * ctx.weight_bytes
    return {"weights": states["weights"], "gradients": states["gradients"], "optimizer": states["optimizer"],
            "activations": acts, "kv_cache": 0.0, "other": other, "host_optimizer": states["optimizer_offloaded"]}


def _activation_bytes(ctx: PlanContext, layout: Layout) -> float:
    """Activation bytes a transformer keeps on one device of its heaviest pipeline stage: the peak over the first,
    a middle and the last stage of what the pipeline schedule holds in flight. Reads only the layout fields
    ``_train_memory`` keys it by: neither dp, ep, the ZeRO stage nor the shard group."""
    w, o = ctx.workload, ctx.options
    m, tokens = ctx.model, layout.micro_batch * w.seq_len // layout.cp  # the part of the sequence this rank holds
    kw = dict(tokens=tokens, seq=w.seq_len, e=ctx.e, tp=layout.tp, kernels=o.kernels, attention=o.attention,
              dropout=o.dropout, fp8_te=o.fp8_activations == "te")
    per_layer = layer_activation_bytes(m, sequence_parallel=layout.sequence_parallel, recompute=layout.recompute,
                                       selective=o.selective_recompute, **kw)  # type: ignore[arg-type]
    checkpointed = stage_recompute_share(ctx, layout)
    kept = layer_activation_bytes(m, sequence_parallel=layout.sequence_parallel, **kw)  # type: ignore[arg-type]
    if layout.recompute == "full" and checkpointed < 1:  # every n-th block: the others keep all they save
        per_layer = checkpointed * per_layer + (1 - checkpointed) * kept
    head = head_activation_bytes(m, tokens=tokens, seq=w.seq_len, e=ctx.e, tp=layout.tp, kernels=o.kernels,
                                 sequence_parallel=layout.sequence_parallel, dropout=o.dropout)
    # the first stage keeps the most micro-batches in flight; with lighter first/last stages (uneven, the
    # embedding and head counted as blocks) the second stage, one micro-batch fewer, can hold more
    first_blocks, mid_blocks, last_blocks = stage_blocks(ctx, layout)
    pp, vp, ga = layout.pp, layout.vp, layout.grad_accum
    if vp > 1:  # interleaved: play the schedule chunk by chunk (the embedding and the head sit in end chunks)
        ends = o.pp_embedding_as_layer
        first = interleaved_peak_bytes(pp, vp, ga, 0, _chunks(first_blocks, vp, per_layer, end_slot=ends,
                                                              end_bytes=head["first"], first=True))
        middle = interleaved_peak_bytes(pp, vp, ga, 1, _chunks(mid_blocks, vp, per_layer, end_slot=False,
                                                               end_bytes=0.0, first=True)) if pp > 2 else 0.0
        last = interleaved_peak_bytes(pp, vp, ga, pp - 1, _chunks(last_blocks, vp, per_layer, end_slot=ends,
                                                                  end_bytes=head["last"], first=False))
    else:
        inflight = inflight_micro_batches(pp, vp, ga)
        first = inflight * (first_blocks * per_layer + head["first"])
        middle = 0.0
        if pp > 2 and mid_blocks > first_blocks:
            middle = inflight_micro_batches(pp, vp, ga, rank=1) * mid_blocks * per_layer
        last = last_blocks * per_layer + head["last"] + (head["first"] if pp == 1 else 0.0)
    acts = max(first, middle, last)
    if layout.recompute == "full" and checkpointed > 0:  # backward rebuilds one layer's activations at a time
        acts += kept
    return acts


def evaluate_train(ctx: PlanContext, layout: Layout) -> Candidate:
    w = ctx.workload
    memory, fits = _finish_memory(ctx, train_memory(ctx, layout))
    split = rank_split(ctx, layout)
    times = train_time(ctx, layout, split)
    step = sum(times.values())
    global_batch = layout.dp * layout.micro_batch * layout.grad_accum
    if ctx.cnn is not None:
        model_flops = 3.0 * ctx.cnn["forward_flops"] * global_batch
        items = float(global_batch)
    else:
        model_flops = F.training_flops(ctx.model, batch=global_batch, seq=w.seq_len)
        if ctx.options.frozen_weights:  # no weight-gradient GEMMs: one forward's matmul FLOPs fewer
            model_flops -= 2.0 * global_batch * w.seq_len * (ctx.model.num_layers * F.layer_matmul_params(ctx.model)
                                                              + F.head_matmul_params(ctx.model))
        items = float(global_batch * w.seq_len)
    n = layout.num_devices
    mfu = model_flops / (step * n * ctx.peak) if step > 0 else 0.0
    joules = E.energy_j(ctx.device, num_devices=n, seconds=step, activity_factor=ctx.options.activity_factor)
    return Candidate(
        layout=layout, memory=memory, fits=fits, flops_per_step=model_flops, step_time_s=step, time_breakdown=times,
        tokens_per_step=items, mfu=mfu, energy_j_per_token=None if joules is None else joules / items,
        cost_per_step=E.cost(n, step, ctx.options.price_per_device_hour), batch=global_batch, powersgd_split=split,
    )


def infer_memory(ctx: PlanContext, layout: Layout, batch: int) -> tuple[dict[str, float], float]:
    """Bytes per device at ``batch`` sequences, and the KV-cache bytes one more sequence costs. With
    ``kv_cache_memory_bytes`` a decoder's parts add ``kv_budget``, the KV cache the engine allocates up front."""
    m, w, o = ctx.model, ctx.workload, ctx.options
    weights = stage_weight_bytes(ctx, layout)
    if ctx.cnn is not None:
        acts = 2 * ctx.cnn["largest_output_bytes"] * batch
        return {"weights": weights, "gradients": 0.0, "optimizer": 0.0, "activations": acts, "kv_cache": 0.0,
                "other": float(o.overhead_bytes)}, 0.0
    is_lm = m.kind in ("decoder", "moe")
    seq = w.prompt_len + w.output_len if is_lm else w.seq_len
    per_seq = kv_cache_bytes(m, batch=1, seq=seq, kv_cache_dtype=w.recipe.kv_cache_dtype, dtype_bytes=ctx.e,
                             tp=layout.tp, pp=layout.pp, kv_scales=o.kv_cache_scales)
    # the largest step: one prefill chunk through one layer (residual, q/k/v, MLP intermediates) + last logits
    tokens = min(batch * (w.prompt_len if is_lm else w.seq_len), o.prefill_chunk_tokens)
    q, kv = m.num_heads * m.head_size, max(m.kv_heads / layout.tp, 1) * m.head_size
    width = 2 * m.hidden_size + q / layout.tp + 2 * kv + (3 if m.gated_mlp else 2) * m.ffn_hidden_size / layout.tp
    acts = tokens * ctx.e * width
    if is_lm:  # fp32 logits of each sequence's last position
        acts += batch * 4 * m.vocab_size / layout.tp
    else:  # an encoder returns every position's hidden state: the whole batch's output stays in memory
        acts += batch * w.seq_len * m.hidden_size * ctx.e
    parts = {"weights": weights, "gradients": 0.0, "optimizer": 0.0, "activations": acts,
             "kv_cache": per_seq * batch, "other": float(o.overhead_bytes)}
    if is_lm and o.kv_cache_memory_bytes is not None:
        # the engine allocates the whole --kv-cache-memory budget up front, whatever the batch uses of it: weights +
        # budget over the device is a plan `accelkit serve` refuses (serve/preflight.py check_memory), not one that
        # fits with room to spare (found in review). ``required_bytes`` holds it against the device.
        parts["kv_budget"] = float(o.kv_cache_memory_bytes)
    return parts, per_seq


#: the largest batch ``max_fitting_batch`` looks for (a reported maximum at this bound means "at least")
MAX_BATCH_SEARCHED = 1 << 24


def _infer_fits(ctx: PlanContext, layout: Layout, batch: int) -> bool:
    parts, _ = infer_memory(ctx, layout, batch)
    return required_bytes(parts) <= ctx.device.memory_bytes


def max_fitting_batch(ctx: PlanContext, layout: Layout) -> int:
    """The largest batch whose memory fits on the device (0 when not even one sequence does). Memory grows
    with the batch (KV cache, the prefill chunk's activations, the last logits), so a bisection finds it;
    it is exactly the largest batch for which ``evaluate_infer(...).fits`` is true."""
    if not _infer_fits(ctx, layout, 1):
        return 0
    lo, hi = 1, 2
    while hi <= MAX_BATCH_SEARCHED and _infer_fits(ctx, layout, hi):
        lo, hi = hi, hi * 2
    if hi > MAX_BATCH_SEARCHED:
        return lo
    while hi - lo > 1:  # invariant: lo fits, hi does not
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _infer_fits(ctx, layout, mid) else (lo, mid)
    return lo


def _latency_s(ctx: PlanContext, layout: Layout, batch: int) -> float:
    """What ``max_decode_latency_s`` bounds at ``batch``: the per-token decode time; for a run with no decode (output
    length 0, an encoder, a CNN) the batch's prefill. ``Candidate.latency_s`` is the same figure."""
    t = infer_time(ctx, layout, batch)
    decodes = ctx.model.kind in ("decoder", "moe") and ctx.workload.output_len > 0
    return t["decode"] if decodes else t["prefill"]


def batch_within_latency(ctx: PlanContext, layout: Layout, batch: int, bound: float) -> int:
    """The largest batch up to ``batch`` whose latency (``_latency_s``) is within ``bound`` — a bisection: a larger
    batch reads more KV and runs more FLOPs per step, never fewer — or 1 when not even one sequence meets it (the
    layout's fastest). The search ranked layouts by the bound but planned each at its largest batch, so a plan
    above the bound was shown where a smaller batch met it (found in review)."""
    if batch <= 1 or _latency_s(ctx, layout, batch) <= bound:
        return batch
    if _latency_s(ctx, layout, 1) > bound:
        return 1
    lo, hi = 1, batch  # invariant: lo meets the bound, hi does not
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if _latency_s(ctx, layout, mid) <= bound else (lo, mid)
    return lo


def evaluate_infer(ctx: PlanContext, layout: Layout, batch: int | None) -> Candidate:
    w, m = ctx.workload, ctx.model
    max_batch = max_fitting_batch(ctx, layout)
    if batch is None:  # the default fits by construction (when anything fits at all) and meets the latency bound
        batch = max(1, min(ctx.options.max_serving_batch, max_batch))
        if ctx.options.max_decode_latency_s is not None:
            batch = batch_within_latency(ctx, layout, batch, ctx.options.max_decode_latency_s)
    parts, _ = infer_memory(ctx, layout, batch)
    memory, fits = _finish_memory(ctx, parts)
    t = infer_time(ctx, layout, batch)
    is_lm = m.kind in ("decoder", "moe")  # the model kind decides what a token is, not the flags
    decodes = is_lm and w.output_len > 0
    itl = None
    if decodes:  # each request is prefilled once per output_len decode steps: batch/output_len prefills per step
        one = t["prefill"] if batch == 1 else infer_time(ctx, layout, 1)["prefill"]
        itl = t["decode"] + batch / w.output_len * one
    step = t["prefill"] + (w.output_len * t["decode"] if decodes else 0.0)
    mixed = t.get("mixed_step") if decodes else None  # options.inflight_batching: prefill rides in the decode steps
    if mixed is not None:
        itl = mixed
    scale = (w.output_len * mixed / step) if mixed is not None and step > 0 else 1.0
    if mixed is not None:
        step = w.output_len * mixed
    # per sequence: the generated tokens; a prefill-only LM run its prompt (--seq-len is a training flag and says
    # nothing here); an encoder its seq_len input tokens; a CNN one image
    counted: str | None = "output" if decodes else "prompt" if is_lm else "input" if m.kind != "cnn" else None
    per_seq = {"output": w.output_len, "prompt": w.prompt_len, "input": w.seq_len, None: 1}[counted]
    per_replica = batch * per_seq
    items = float(per_replica * layout.dp)
    if ctx.cnn is not None:
        model_flops = ctx.cnn["forward_flops"] * batch
    elif m.kind in ("decoder", "moe"):
        model_flops = F.prefill_flops(m, batch=batch, prompt_len=w.prompt_len) + w.output_len * F.decode_flops(
            m, batch=batch, context=w.prompt_len + w.output_len // 2)
    else:
        model_flops = F.forward_flops(m, batch=batch, seq=w.seq_len)
    n_replica = layout.tp * layout.pp
    mfu = model_flops / (step * n_replica * ctx.peak) if step > 0 else 0.0
    times = {"compute": 0.0, "memory": 0.0, "communication": 0.0, "bubble": 0.0, "launch": 0.0}
    for phase, count in (("prefill", 1.0), ("decode", float(w.output_len) if decodes else 0.0)):
        # under in-flight batching the static parts, scaled to the overlapped step (an apportioning, not a split)
        times["compute"] += scale * count * t[f"{phase}_compute"]
        times["memory"] += scale * count * t[f"{phase}_memory"]
        times["communication"] += scale * count * t[f"{phase}_comm"]
    n = layout.num_devices
    joules = E.energy_j(ctx.device, num_devices=n, seconds=step, activity_factor=ctx.options.activity_factor)
    return Candidate(
        layout=layout, memory=memory, fits=fits, flops_per_step=model_flops * layout.dp, step_time_s=step,
        time_breakdown=times, tokens_per_step=items, mfu=mfu,
        energy_j_per_token=None if joules is None or items == 0 else joules / items,
        cost_per_step=E.cost(n, step, ctx.options.price_per_device_hour), batch=batch,
        prefill_time_s=t["prefill"], decode_time_per_token_s=t["decode"] if decodes else None, max_batch=max_batch,
        itl_s=itl, tokens_counted=counted,
    )


def evaluate(ctx: PlanContext, layout: Layout, batch: int | None = None) -> Candidate:
    if ctx.workload.task == "train":
        return evaluate_train(ctx, layout)
    return evaluate_infer(ctx, layout, batch)
