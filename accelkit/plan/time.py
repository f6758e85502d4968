"""Step time, kernel class by kernel class (docs/plan.md, "The time model").

Per layer and micro-batch, on one device, the kernels of a stream run one after another:

* **matmuls** at dense peak × GEMM efficiency (MAMF or the probe) × the sustained factor (fitted.py);
* **attention** (flash) at dense peak × the flash-attention efficiency of the device generation and kernel
  (``options.attention``: the generation's best, FlashAttention-2, or the pre-MLIR Triton kernel at FA2 ÷ 1.83),
  with the causal kernel's diagonal blocks computed in full (useful fraction s/(s+128), or w/(w+128) on a layer
  with a sliding window w < s: priors.causal_block_factor); unfused ("math")
  attention runs its two score matmuls at GEMM efficiency and moves the s² scores through memory;
* **memory-bound kernels** (norms, residual adds, rotary, activation, dropout, copies; the loss over the
  logits; the optimizer step) move their bytes (kernels.py) at HBM bandwidth × memory efficiency;
* the **host** launches every kernel; a layer whose kernels run shorter than their launch cost waits for it.

Communication, with what overlaps it. A collective hidden behind compute is not free: the compute beside it
runs slower (NCCL takes SMs and HBM bandwidth), by priors.OVERLAP_SLOWDOWN of the hidden time (``overlapped``):

* tensor parallel: 2 all-reduces (or all-gather + reduce-scatter under sequence parallelism) forward and 2
  backward per layer (+2 with full recompute, +2 on the share of blocks checkpointed with ``recompute_every``);
  exposed, unless ``tp_comm_overlap`` hides them behind the
  layer's matmuls, or ``tp_backward_overlap`` hides the 2 backward ones behind the column-parallel layers'
  weight-gradient matmuls (Megatron-LM 2022);
* context parallel (ring attention): K and V chunks travel cp−1 hops forward, K, V and their gradients
  backward; hidden behind the attention kernels, only the excess is exposed;
* pipeline: one activation send forward and one gradient send backward per chunk boundary (not overlapped;
  with ``pp_scatter_gather`` 1/tp of it crosses nodes and is all-gathered inside the node); the interleaved
  1F1B bubble is (pp−1)/vp stage-micro-batches (Narayanan et al. 2021);
* data parallel, ZeRO 0-1: gradients are reduced (all-reduce, or reduce-scatter + all-gather of the updated
  weights) once per step, bucketed during the last micro-batch's backward — only the part longer than
  that backward is exposed (the all-gather of ZeRO 1/2 hides behind the next forward the same way); with
  ``grad_reduce_overlap`` off (Megatron's local DDP, DeepSpeed's pipeline engine) all of it is exposed;
* ZeRO 2: a rank keeps only its shard of the gradients (memory.py), so it cannot accumulate the full gradients
  over micro-batches: DeepSpeed stage 2 and FSDP SHARD_GRAD_OP reduce-scatter after every micro-batch's
  backward, each hidden behind that backward the same way (the all-gather of the updated weights stays once);
  a MoE's expert gradients (already ÷ ep) reduce, and ZeRO shards their states, over the expert-data-parallel
  group of dp·cp/ep ranks only (``dp_groups``), the dense part over dp·cp;
* ZeRO 3 / FSDP: every micro-batch all-gathers each layer's weights for forward and again for backward and
  reduce-scatters its gradients, prefetched one layer ahead — exposed are the layers whose traffic outlasts
  their compute, plus the first gather and the last reduce-scatter, which nothing hides; with
  ``fsdp_backward_prefetch="post"`` (FSDP1 BACKWARD_POST) every backward gather waits in the open.

Collectives inside a node run over the scale-up fabric, groups that span nodes run two-level (comm.py).

Inference: prefill runs the same kernels forward only; a decode step reads every weight once and every
cached token's K and V (roofline max against the matmul time, per layer; a sliding-window layer keeps and reads
min(context, window) tokens, and its flash prefill executes s·w − w²/2 query-key pairs, not s²/2) and is latency-bound in its
tensor-parallel all-reduces. Under expert parallelism a device reads only its E/ep experts and every MoE layer
adds an all-to-all dispatch and combine of the routed tokens over the ep group. Serving engines capture decode in CUDA graphs: no host launch cost there.
"""

from __future__ import annotations

import math

from accelkit.core import ModelSpec
from accelkit.plan import flops as F
from accelkit.plan.comm import Links
from accelkit.plan.context import PlanContext
from accelkit.plan.grad_comm import GradReduction, PowerSGDSplit, buckets, compress_s, grad_reduction, rank_split
from accelkit.plan.kernels import layer_traffic, loss_bytes_per_token, math_attention_bytes
from accelkit.plan.layout import Layout
from accelkit.plan.memory import TRAIN_WEIGHT_BYTES, kv_layer_token_bytes, optimizer_bytes_per_param, uses_dropout
from accelkit.plan.priors import (
    COLLECTIVE_LATENCY_S,
    FLASH1_SLOWDOWN,
    FLASH_TRITON_SLOWDOWN,
    OFFLOAD_BANDWIDTH,
    OVERLAP_SLOWDOWN,
    causal_block_factor,
)
from accelkit.plan.stages import stage_layers, stage_param_split, stage_recompute_share

#: flash backward executes 2.5× the forward FLOPs (it recomputes QKᵀ): the convention of the FlashAttention
#: benchmarks, whose fwd+bwd figures are what the efficiency priors quote
FLASH_BACKWARD = 2.5
#: the share of a micro-batch's compute that is backward (2 of 3 matmul passes), the window in which
#: bucketed gradient reduction can overlap
BACKWARD_SHARE = 2.0 / 3.0

TIME_KEYS = ("compute", "memory", "communication", "bubble", "launch")


def expert_dp(layout: Layout) -> int:
    """Ranks that hold the same experts: the expert-data-parallel group, dp·cp/ep (DeepSpeed-MoE's expert-data
    group, Megatron-Core's expert data-parallel group). ZeRO shards the expert states and the expert gradients
    are reduced over it, not over dp·cp: ep of the dp ranks already split the experts. Without expert parallelism
    the experts shard as the dense part does: over ``layout.shard_ranks`` (dp·cp, or the hybrid shard group)."""
    if layout.ep == 1:
        return layout.shard_ranks
    return max(1, layout.dp * layout.cp // layout.ep)


def replica_links(ctx: PlanContext, layout: Layout) -> Links | None:
    """Hybrid sharding (``layout.shard_group`` below dp): the dp/G groups each shard is replicated over — one rank of
    every shard group, tp·cp·G ranks apart (ranks are placed tp, cp, then dp) — or None without it."""
    if layout.replicas == 1:
        return None
    return links(ctx, layout.replicas, layout.tp * layout.shard_ranks)


def replica_reduce_s(ctx: PlanContext, layout: Layout, red: GradReduction) -> float:
    """Hybrid sharding: after the reduce-scatter inside the shard group, each rank all-reduces its shard of the
    gradients (1/(G·cp) of the buffer) with the ranks holding the same shard in the other groups (PyTorch HSDP's
    reduce-scatter then all-reduce; DeepSpeed MiCS's hierarchical reduction); 0 without it."""
    group = replica_links(ctx, layout)
    return 0.0 if group is None else group.all_reduce_s(red.sent_bytes / layout.shard_ranks)


def tensor_flop_s(ctx: PlanContext) -> float:
    """Matmul FLOP/s a full step sustains: dense peak × GEMM efficiency × the sustained factor."""
    return ctx.peak * ctx.efficiency.compute * ctx.sustained


def experts_read_share(tokens: float, k: float, num_experts: int) -> float:
    """The share of a MoE layer's experts that ``tokens`` tokens, each routed to ``k`` of ``num_experts`` uniformly,
    touch: an expert is missed by each token with probability 1 − k/E."""
    return float(1 - (1 - min(1.0, k / num_experts)) ** tokens)


def attention_flop_s(ctx: PlanContext, seq: int, *, causal: bool) -> float:
    """Flash-attention FLOP/s (useful FLOPs) at query/key length ``seq``; ``seq`` is the band of keys a causal
    kernel's query sees (``causal_block_factor``: a sliding window's w when shorter than the sequence)."""
    eff, kernel = ctx.efficiency, ctx.options.attention
    base = eff.attention if kernel == "flash" else eff.flash2
    if kernel == "flash-triton":
        base /= FLASH_TRITON_SLOWDOWN
    elif kernel == "flash1":
        base /= FLASH1_SLOWDOWN
    useful = causal_block_factor(seq) if causal else 1.0
    return ctx.peak_16 * base * ctx.sustained * useful


def model_attention_flop_s(ctx: PlanContext, seq: int, span: int) -> float:
    """Flash-attention FLOP/s (useful FLOPs) of the model's layers over ``seq`` tokens, each kernel covering ``span``
    of them (seq/cp under context parallelism): a causal layer at its block factor over span, a sliding-window layer
    over its window when that is shorter (priors.causal_block_factor). With full and windowed layers mixed (Qwen2),
    the rate at which their summed FLOPs take their summed times; all alike, that one layer's rate."""
    m = ctx.model
    causal = _is_causal(ctx)
    w = m.sliding_window
    if not causal or w is None or w >= span:
        return attention_flop_s(ctx, span, causal=causal)
    # useful pairs per layer, as flops.causal_attention_flops counts them: s²/2 full, s·w − w²/2 windowed (w < span ≤ s)
    full_pairs = (m.num_layers - m.num_window_layers) * seq * seq / 2
    window_pairs = m.num_window_layers * (seq * w - w * w / 2)
    seconds = full_pairs / attention_flop_s(ctx, span, causal=True) + window_pairs / attention_flop_s(ctx, w, causal=True)
    return (full_pairs + window_pairs) / seconds


def overlapped(comm_s: float, window_s: float) -> float:
    """Time a collective of ``comm_s`` adds when it runs beside ``window_s`` of compute: the part longer than the
    window, plus the slowdown of the compute it shares the GPU with (priors.OVERLAP_SLOWDOWN)."""
    hidden = min(comm_s, window_s)
    return comm_s - hidden + OVERLAP_SLOWDOWN * hidden


def byte_s(ctx: PlanContext) -> float:
    return ctx.device.memory_bandwidth_bytes_per_s * ctx.efficiency.memory


def links(ctx: PlanContext, size: int, stride: int) -> Links:
    eff = ctx.efficiency
    return Links(ctx.cluster, size, stride, comm_eff=eff.comm, scaleout_eff=eff.scaleout,
                 latency_s=COLLECTIVE_LATENCY_S)


def _dropout(ctx: PlanContext) -> bool:
    return uses_dropout(ctx.model, ctx.options.dropout)


def _is_causal(ctx: PlanContext) -> bool:
    return ctx.model.kind in ("decoder", "moe")


def _flash_attention_flops(model: ModelSpec, batch: int, seq: int, *, causal: bool) -> float:
    """FLOPs a flash kernel executes over ``seq`` tokens, forward, all layers: the causal (and sliding-window)
    triangle, or the full square of an encoder."""
    if causal:
        return F.causal_attention_flops(model, batch=batch, seq=seq)
    return F.attention_flops(model, batch=batch, q_len=seq, kv_len=seq)


# ---- training -------------------------------------------------------------------------------------------
def train_time(ctx: PlanContext, layout: Layout, split: PowerSGDSplit | None = None) -> dict[str, float]:
    """Seconds per optimizer step by kernel class: compute (matmuls, attention), memory (memory-bound
    kernels, loss, optimizer), communication (exposed), bubble (pipeline), launch (host-bound excess).
    ``split``: the layout's ``grad_comm.rank_split`` when the caller keeps it for the plan document (made here
    when None): every gradient reduction of the layout is computed from this one split."""
    if split is None:
        split = rank_split(ctx, layout)
    if ctx.cnn is not None:
        return _cnn_train_time(ctx, layout, split)
    o = ctx.options
    pp, vp = layout.pp, layout.vp
    bw = byte_s(ctx)
    # the stage's time does not depend on the ZeRO stage or the shard group: the ZeRO stages the search tries for
    # one shape share it (``ctx.memo``)
    key = ("stage_s", layout._replace(zero=0, shard_group=None))
    stage_s = ctx.memo.get(key)
    if stage_s is None:
        stage_s = ctx.memo[key] = _stage_s(ctx, layout)
    layers, st_compute, st_memory, st_launch, st_comm, stage = stage_s
    mb = layout.grad_accum

    # ---- data parallel and the optimizer
    dense, expert = stage_param_split(ctx, layout)
    if o.frozen_weights:  # nothing to reduce over data parallelism, nothing to update
        dp_exposed, optimizer = 0.0, 0.0
    else:
        red = dp_reduction(ctx, layout, dense + expert, split)
        dp_exposed = _dp_exposed(ctx, layout, dense, expert, split, layers, stage, st_compute)
        optimizer = _optimizer_s(ctx, layout, dense, expert, bw) + compression_s(ctx, layout, red)
    return {
        "compute": mb * st_compute,
        "memory": mb * st_memory + optimizer,
        "communication": mb * st_comm + dp_exposed,
        "bubble": (pp - 1) / vp * stage,
        "launch": mb * st_launch,
    }


def _stage_s(ctx: PlanContext, layout: Layout) -> tuple[int, float, float, float, float, float]:
    """The heaviest pipeline stage (ceil(L/pp) layers, plus the LM head on the last), one micro-batch: its layers and
    the seconds of its compute, memory-bound kernels, launch excess and exposed communication, and their sum."""
    o = ctx.options
    pp, vp = layout.pp, layout.vp
    tokens = layout.micro_batch * ctx.workload.seq_len / layout.cp  # tokens this rank holds per micro-batch
    # ---- one layer, one micro-batch
    gemm, attention, memory, launch, matmul_fwd = _layer_s(ctx, layout, tokens)
    tp_comm, cp_comm, ep_comm = _layer_comm_s(ctx, layout, tokens, gemm, attention, matmul_fwd)
    # ---- one stage, one micro-batch
    layers = stage_layers(ctx, layout)
    head_gemm, head_mem = _head_s(ctx, layout, tokens)
    blocks = layers
    if pp > 1 and o.pp_embedding_as_layer:  # the head shares its stage with one block fewer: the heavier one runs
        block = gemm + attention + memory + launch + tp_comm + cp_comm + ep_comm
        if block >= head_gemm + head_mem:
            head_gemm = head_mem = 0.0
        else:
            blocks = layers - 1
    st_compute = blocks * (gemm + attention) + head_gemm
    st_memory = blocks * memory + head_mem
    st_launch = blocks * launch
    st_comm = blocks * (tp_comm + cp_comm + ep_comm)
    if pp > 1:
        st_comm += 2 * vp * _stage_send_s(ctx, layout, tokens)
    stage = st_compute + st_memory + st_launch + st_comm
    return layers, st_compute, st_memory, st_launch, st_comm, stage


def _layer_s(ctx: PlanContext, layout: Layout, tokens: float) -> tuple[float, float, float, float, float]:
    """One layer, one micro-batch of ``tokens`` on this rank: seconds of its matmuls, attention, memory-bound kernels
    and host-bound launch excess, and the forward matmul FLOPs (the backward overlap's measure)."""
    m, o, e, seq = ctx.model, ctx.options, ctx.e, ctx.workload.seq_len
    tp, cp = layout.tp, layout.cp
    sp = tp if layout.sequence_parallel else 1
    flop_s, bw = tensor_flop_s(ctx), byte_s(ctx)
    selective = layout.recompute == "selective"
    full = stage_recompute_share(ctx, layout)  # the share of blocks whose forward runs again: 1 full, 1/n every n-th
    matmul_fwd = 2.0 * tokens * ctx.layer_matmul_active / tp
    frozen = o.frozen_weights  # LoRA: backward computes the input gradients only, no weight gradients
    op = selective and o.selective_recompute == "op"  # torchtitan: every second matmul and the pointwise ops again
    gemm = matmul_fwd * (3 + full - (1 if frozen else 0) + (F.op_recompute_share(m) if op else 0)) \
        / flop_s
    traffic = layer_traffic(m, e=e, stack=o.kernels, dropout=_dropout(ctx))
    ew_fwd = tokens * (traffic.replicated_bytes / sp + traffic.sharded_bytes / tp)
    if o.attention == "math":  # two score matmuls (full square, masked under a sliding window) and the s² scores
        square = F.attention_flops(m, batch=layout.micro_batch, q_len=seq, kv_len=seq, windowed=False)
        attention = square / m.num_layers / (tp * cp) * (3 + (1 if selective else full)) / flop_s
        ew_fwd += tokens * math_attention_bytes(m, seq=seq, e=e, dropout=_dropout(ctx)) / tp
    else:
        useful = _flash_attention_flops(m, layout.micro_batch, seq, causal=_is_causal(ctx)) / m.num_layers / (tp * cp)
        attention = useful * (1 + FLASH_BACKWARD + full) / model_attention_flop_s(ctx, seq, int(seq / cp))
    memory = ew_fwd * (1 + traffic.backward_factor + (1 if op else full)) / bw
    if o.autocast_fp32_params:  # every forward (and recompute) casts each fp32 weight to the compute dtype
        memory += (1 + full) * 6.0 * (ctx.layer_params + ctx.layer_expert_params / layout.ep) / tp / bw
    kernels = traffic.forward_kernels + traffic.backward_kernels + traffic.forward_kernels * (1 if op else full)
    gpu = gemm + attention + memory
    host = kernels * ctx.efficiency.launch_s if o.kernels == "eager" else kernels * ctx.efficiency.launch_s / 2
    return gemm, attention, memory, max(0.0, host - gpu), matmul_fwd


def _layer_comm_s(ctx: PlanContext, layout: Layout, tokens: float, gemm: float, attention: float,
                  matmul_fwd: float) -> tuple[float, float, float]:
    """One layer, one micro-batch: the exposed seconds of its tensor-, context- and expert-parallel collectives."""
    m, o, e = ctx.model, ctx.options, ctx.e
    tp, cp = layout.tp, layout.cp
    full = stage_recompute_share(ctx, layout)  # recomputed blocks run their forward collectives again
    tp_one = links(ctx, tp, 1).all_reduce_s(e * tokens * m.hidden_size)  # or its all-gather + reduce-scatter under sp
    tp_comm = (4 + 2 * full) * tp_one
    if o.tp_comm_overlap:
        tp_comm = overlapped(tp_comm, gemm)
    elif o.tp_backward_overlap and tp > 1:  # the 2 backward collectives hide behind the column-parallel dW matmuls
        tp_comm = (2 + 2 * full) * tp_one + overlapped(2 * tp_one,
                                                                 ctx.column_share * matmul_fwd / tensor_flop_s(ctx))
    cp_comm = 0.0
    if cp > 1:
        kv_local = max(m.kv_heads / tp, 1) * m.head_size
        hop = tokens * 2 * kv_local * e  # this rank's K and V chunk
        ring = (cp - 1) * links(ctx, cp, tp).p2p_s(hop) * (1 + 2 + full)  # fwd; bwd: K,V and dK,dV
        cp_comm = overlapped(ring, attention)
    ep_comm = 0.0
    if layout.ep > 1:
        routed = e * tokens * (m.experts_per_token or 1) * m.hidden_size / tp
        ep_comm = 4 * links(ctx, layout.ep, tp * cp).all_to_all_s(routed)
    return tp_comm, cp_comm, ep_comm


def _head_s(ctx: PlanContext, layout: Layout, tokens: float) -> tuple[float, float]:
    """The LM head and loss of one micro-batch on the last stage: (matmul seconds, memory-bound seconds)."""
    m, o, e, tp = ctx.model, ctx.options, ctx.e, layout.tp
    sp = tp if layout.sequence_parallel else 1
    head_gemm = (4.0 if o.frozen_weights else 6.0) * tokens * F.head_matmul_params(m) / tp / tensor_flop_s(ctx)
    fused_loss = o.kernels == "fused" if o.fused_loss is None else o.fused_loss
    head_mem = tokens * (loss_bytes_per_token(m, e=e, stack="fused" if fused_loss else "eager") / tp
                         + 4 * e * m.hidden_size / sp) / byte_s(ctx)
    return head_gemm, head_mem


def _stage_send_s(ctx: PlanContext, layout: Layout, tokens: float) -> float:
    """One micro-batch's activations sent to the next pipeline stage (scattered over tp and gathered again when the
    stages span nodes and ``pp_scatter_gather``)."""
    tp, sp = layout.tp, layout.tp if layout.sequence_parallel else 1
    pp_links = links(ctx, layout.pp, tp * layout.cp * layout.dp)
    act = ctx.e * tokens * ctx.model.hidden_size / sp
    if ctx.options.pp_scatter_gather and sp == 1 and tp > 1 and pp_links.spans_nodes:
        return pp_links.p2p_s(act / tp) + links(ctx, tp, 1).all_gather_s(act)
    return pp_links.p2p_s(act)


def dp_reduction(ctx: PlanContext, layout: Layout, params: float, split: PowerSGDSplit | None) -> GradReduction | None:
    """What the data-parallel gradient reduction sends (grad_comm.py); None without data parallelism."""
    return grad_reduction(ctx, layout, params, split) if layout.dp * layout.cp > 1 else None


def reduce_s(dp_links: Links, red: GradReduction) -> float:
    """Seconds of the gradient collective(s): one all-reduce or reduce-scatter of the buffer; PowerSGD's three
    all-reduces (uncompressed, P, Q) one after another, three latencies per DDP bucket."""
    if red.powersgd is None:
        return dp_links.all_reduce_s(red.sent_bytes) if red.collective == "all-reduce" \
            else dp_links.reduce_scatter_s(red.sent_bytes)
    latency = dp_links.all_reduce_s(1.0)  # one all-reduce of nothing but its start-up
    return sum(dp_links.all_reduce_s(b) for b in red.phases) + 3 * (buckets(red) - 1) * latency


def reductions_per_step(layout: Layout) -> int:
    """How often a step reduces the gradients over data parallelism: every micro-batch under ZeRO 2 and 3 (the
    gradients are sharded, so the full ones cannot be accumulated: DeepSpeed stage 2/3, FSDP SHARD_GRAD_OP and
    FULL_SHARD reduce-scatter after each backward), else once (ZeRO 0-1 accumulate locally, then reduce)."""
    return layout.grad_accum if layout.zero >= 2 else 1


def compression_s(ctx: PlanContext, layout: Layout, red: GradReduction | None) -> float:
    """Compression compute per step: once per reduction."""
    if red is None:
        return 0.0
    return compress_s(ctx, red) * reductions_per_step(layout)


def dp_groups(ctx: PlanContext, layout: Layout, dense: float, expert: float) -> list[tuple[Links, float]]:
    """The data-parallel groups one device's parameters are replicated over, each with its links and the parameters
    it reduces (and, under ZeRO 3, gathers): the dense part over the dp·cp ranks that hold the same shard
    (context-parallel ranks hold the same weights), the experts over the expert-data-parallel group
    (``expert_dp``: every ep-th of those ranks, stride tp·ep), none when ep spans all of dp·cp."""
    group, edp = layout.shard_ranks, expert_dp(layout)
    if edp == group:  # no expert parallelism: one group holds everything (hybrid sharding: the shard group)
        return [(links(ctx, group, layout.tp), dense + expert)] if group > 1 else []
    out = [(links(ctx, group, layout.tp), dense)] if group > 1 else []
    if edp > 1 and expert > 0:
        out.append((links(ctx, edp, layout.tp * layout.ep), expert))
    return out


def _dp_exposed(ctx: PlanContext, layout: Layout, dense: float, expert: float, split: PowerSGDSplit | None,
                layers: int, stage: float, st_compute: float) -> float:
    """Exposed data-parallel time per step (the overlap model in the module docstring): the collectives of every
    group in ``dp_groups``, one after another, each in the bytes ``grad_reduction`` says."""
    groups = dp_groups(ctx, layout, dense, expert)
    # hybrid sharding: the all-reduce of each rank's gradient shard across the groups follows its reduce-scatter
    cross = replica_reduce_s(ctx, layout, grad_reduction(ctx, layout, dense + expert, split)) \
        if layout.replicas > 1 else 0.0
    if not groups and not cross:
        return 0.0
    scatter = sum(reduce_s(g, grad_reduction(ctx, layout, p, split)) for g, p in groups) + cross
    if layout.zero >= 3:  # per micro-batch: gather for forward and backward, reduce-scatter the gradients
        wb = 4.0 if ctx.options.autocast_fp32_params else ctx.weight_bytes
        gather = sum(g.all_gather_s(p * wb) for g, p in groups)
        units = max(1, layers)
        edges = (gather + scatter) / units  # the first gather and the last scatter: nothing to hide behind
        if ctx.options.fsdp_backward_prefetch == "post":
            # BACKWARD_POST: a layer's backward gather is issued after the next layer's gradient computation and
            # queues on the one NCCL stream behind its reduce-scatter: every backward gather waits in the open
            exposed = gather + overlapped(gather + scatter, stage) + edges
        else:
            exposed = overlapped(2 * gather + scatter, stage) + edges
        return layout.grad_accum * exposed
    backward = BACKWARD_SHARE * st_compute if ctx.options.grad_reduce_overlap else 0.0
    if layout.zero == 0:
        return overlapped(scatter, backward)
    # ZeRO 1: reduce-scatter during the last backward; ZeRO 2: during every micro-batch's backward
    # (reductions_per_step); then one all-gather of the updated weights before the next forward
    forward = st_compute - BACKWARD_SHARE * st_compute if ctx.options.grad_reduce_overlap else 0.0
    gather = sum(g.all_gather_s(p * ctx.weight_bytes) for g, p in groups)
    return reductions_per_step(layout) * overlapped(scatter, backward) + overlapped(gather, forward)


def _optimizer_s(ctx: PlanContext, layout: Layout, dense: float, expert: float, bw: float) -> float:
    """One pass of the optimizer over this device's share: ZeRO 1+ updates the dense part ÷ dp·cp and the
    experts ÷ the expert-data-parallel group. Offloaded: only the PCIe copies of that share (gradients to the host,
    updated weights back); the CPU Adam step is not modelled, as the plan's assumptions say."""
    recipe = ctx.workload.recipe
    local = dense / layout.shard_ranks + expert / expert_dp(layout) if layout.zero >= 1 else dense + expert
    wb = TRAIN_WEIGHT_BYTES[recipe.precision]
    if recipe.offload:  # gradients to the host, updated weights back
        return local * 2 * wb / OFFLOAD_BANDWIDTH
    states = optimizer_bytes_per_param(ctx.workload.optimizer, recipe.precision, ctx.options.optimizer_states)
    return local * (2 * (states + wb) + wb) / bw  # read+write states and weights, read gradients


#: kernels a CNN training micro-batch launches per conv/linear layer, at least: its forward, and the input- and
#: weight-gradient kernels of its backward (batch norms, activations and residual adds come on top: a lower bound)
CNN_KERNELS_PER_LAYER = 3


def _cnn_train_time(ctx: PlanContext, layout: Layout, split: PowerSGDSplit | None) -> dict[str, float]:
    cnn = ctx.cnn
    assert cnn is not None
    n = layout.micro_batch
    flops = 3.0 * cnn["forward_flops"] * n + (cnn["forward_flops"] * n if layout.recompute == "full" else 0.0)
    compute = flops / tensor_flop_s(ctx)
    saved = cnn["saved_bytes"] * n
    bw = byte_s(ctx)
    memory = 6.0 * saved / bw  # each saved byte: written, read forward and backward, gradient written and read
    params = float(ctx.model.num_params())
    # the host launches at least one kernel per conv/linear forward and two backward (input and weight gradients;
    # the norms, activations and adds not counted): a micro-batch whose kernels run shorter waits for it — without
    # this floor micro-batch 1 timed as fast per image as 256, and the search chose it
    kernels = CNN_KERNELS_PER_LAYER * len(cnn["layers"]) * (1 + (1 / 3 if layout.recompute == "full" else 0.0))
    launch = max(0.0, kernels * ctx.efficiency.launch_s - (compute + memory))
    stage = compute + memory + launch
    red = dp_reduction(ctx, layout, params, split)
    dp_exposed = _dp_exposed(ctx, layout, params, 0.0, split, 1, stage, compute)
    opt = _optimizer_s(ctx, layout, params, 0.0, bw) + compression_s(ctx, layout, red)
    return {"compute": layout.grad_accum * compute, "memory": layout.grad_accum * memory + opt,
            "communication": dp_exposed, "bubble": 0.0, "launch": layout.grad_accum * launch}


# ---- inference ------------------------------------------------------------------------------------------
def infer_time(ctx: PlanContext, layout: Layout, batch: int) -> dict[str, float]:
    """Prefill (of all ``batch`` prompts together: one request's TTFT only when all arrive at once) and
    decode-per-token seconds for ``batch`` sequences on one model replica, each split
    into compute (matmuls, attention), memory (weights, KV, memory-bound kernels) and communication."""
    m, w, o = ctx.model, ctx.workload, ctx.options
    tp, pp, e = layout.tp, layout.pp, ctx.e
    attained = ctx.serving_attained  # fitted.SERVING_ATTAINED: what the family's serving engines reach of the priors
    flop_s, bw = tensor_flop_s(ctx) * attained, byte_s(ctx) * attained
    tp_links = links(ctx, tp, 1)
    pp_links = links(ctx, max(pp, 1), tp * layout.dp)
    ends = ctx.embedding_params + ctx.head_params  # (16-bit where the rest is quantized: end_weight_bytes)
    weights = ((m.num_params() - ends) * ctx.weight_bytes + ends * ctx.end_weight_bytes) / tp  # every stage in turn
    if ctx.cnn is not None:
        fl = ctx.cnn["forward_flops"] * batch
        compute = fl / flop_s
        mem = (weights + ctx.cnn["saved_bytes"] * batch * 2) / bw
        return {"prefill": compute + mem, "decode": 0.0, "prefill_compute": compute, "prefill_memory": mem,
                "prefill_comm": 0.0, "decode_compute": 0.0, "decode_memory": 0.0, "decode_comm": 0.0}
    is_lm = _is_causal(ctx)
    prompt = w.prompt_len if is_lm else w.seq_len
    tokens = batch * prompt
    chunks = math.ceil(tokens / o.prefill_chunk_tokens)
    traffic = layer_traffic(m, e=e, stack="fused", dropout=False)
    # K/V bytes a token writes (prefill) and each decode step reads, per layer: codes and scales (fp8/int8)
    kv_tok = kv_layer_token_bytes(m, kv_cache_dtype=w.recipe.kv_cache_dtype, dtype_bytes=e, tp=tp,
                                  kv_scales=o.kv_cache_scales) if is_lm else 0.0
    ep = layout.ep
    layer_w = (ctx.layer_params + ctx.layer_expert_params / ep) * ctx.weight_bytes / tp  # this device's experts
    # expert parallelism: per MoE layer each rank sends its tokens' k routed copies to the experts' ranks and gets
    # the outputs back (dispatch + combine), as training does forward (ep of the dp replicas, placed tp apart)
    ep_links = links(ctx, ep, tp)
    moe_layers = m.num_layers if m.num_experts else 0
    k_routed = m.experts_per_token or 1

    # prefill, per layer: matmuls (or the weight reads of every chunk, whichever is longer), attention,
    # memory-bound kernels and the KV-cache write
    gemm = 2.0 * tokens * ctx.layer_matmul_active / tp / flop_s
    if o.attention == "math":  # the full square of scores, masked under a sliding window
        attention = F.attention_flops(m, batch=batch, q_len=prompt, kv_len=prompt, windowed=False) / m.num_layers \
            / tp / flop_s
    else:  # causal: query i attends to min(i, window) keys
        attention = _flash_attention_flops(m, batch, prompt, causal=is_lm) / m.num_layers / tp \
            / (model_attention_flop_s(ctx, prompt, prompt) * attained)
    head = 2.0 * batch * F.head_matmul_params(m) / tp / flop_s  # logits of the last position only
    mm_c, mm_m = _roofline(gemm, chunks * layer_w / bw)
    p_compute = m.num_layers * (mm_c + attention) + head
    p_memory = m.num_layers * (mm_m + tokens * (traffic.replicated_bytes + traffic.sharded_bytes / tp + kv_tok) / bw)
    h_bytes = e * m.hidden_size
    p_comm = 2 * m.num_layers * tp_links.all_reduce_s(h_bytes * tokens)
    p_comm += (pp - 1) * pp_links.p2p_s(h_bytes * tokens / tp)
    p_comm += 2 * moe_layers * ep_links.all_to_all_s(h_bytes * tokens * k_routed / tp)
    out = {"prefill": p_compute + p_memory + p_comm, "prefill_compute": p_compute, "prefill_memory": p_memory,
           "prefill_comm": p_comm, "decode": 0.0, "decode_compute": 0.0, "decode_memory": 0.0, "decode_comm": 0.0}
    if not is_lm or w.output_len == 0:
        return out

    # decode, per layer: matmuls against the weight reads, attention FLOPs against the KV reads (each pair
    # a roofline), plus the memory-bound kernels of `batch` tokens
    context = prompt + w.output_len / 2
    read = layer_w
    if m.num_experts:  # a decode step touches only the experts its tokens are routed to: this device's E/ep
        # experts receive the routed tokens of all ep replicas; under uniform routing an expert is missed by each of
        # those batch·ep tokens with probability 1 − k/E, so the share touched is 1 − (1 − k/E)^(batch·ep) — the
        # expected tokens per expert, batch·k·ep/E, overstated it until the batch saturated them (found in review)
        experts = ctx.layer_expert_params / ep * ctx.weight_bytes / tp
        read -= experts * (1 - experts_read_share(batch * ep, k_routed, m.num_experts))
    mm_c, mm_m = _roofline(2.0 * batch * ctx.layer_matmul_active / tp / flop_s, read / bw)
    kept = m.kv_cache_tokens(context)  # cached tokens a layer reads (mean over layers): min(context, window)
    at_c, at_m = _roofline(F.attention_flops(m, batch=batch, q_len=1, kv_len=int(context)) / m.num_layers / tp / flop_s,
                           batch * kept * kv_tok / bw)
    ew = batch * (traffic.replicated_bytes + traffic.sharded_bytes / tp + kv_tok) / bw
    hd_c, hd_m = _roofline(2.0 * batch * F.head_matmul_params(m) / tp / flop_s,
                           F.head_matmul_params(m) * ctx.end_weight_bytes / tp / bw)
    d_compute = m.num_layers * (mm_c + at_c) + hd_c
    d_memory = m.num_layers * (mm_m + at_m + ew) + hd_m
    d_comm = 2 * m.num_layers * tp_links.all_reduce_s(h_bytes * batch)
    d_comm += (pp - 1) * pp_links.p2p_s(h_bytes * batch / tp)
    d_comm += 2 * moe_layers * ep_links.all_to_all_s(h_bytes * batch * k_routed / tp)
    out.update(decode=d_compute + d_memory + d_comm, decode_compute=d_compute, decode_memory=d_memory,
               decode_comm=d_comm)
    if o.inflight_batching:
        # in-flight batching: each decode step also runs 1/output_len of the batch's prefill (every request is
        # prefilled once per output_len steps); per layer one GEMM over the decode rows and the prefill share reads
        # the weights once, a roofline of the two together, while attention, the memory-bound kernels, the head and
        # the collectives of the two parts add
        share = 1.0 / w.output_len
        d_gemm = 2.0 * batch * ctx.layer_matmul_active / tp / flop_s
        p_ew = tokens * (traffic.replicated_bytes + traffic.sharded_bytes / tp + kv_tok) / bw
        mixed = m.num_layers * (max(d_gemm + share * gemm, read / bw) + at_c + at_m + ew + share * (attention + p_ew))
        out["mixed_step"] = mixed + hd_c + hd_m + share * head + d_comm + share * p_comm
    return out


def _roofline(compute_s: float, memory_s: float) -> tuple[float, float]:
    """A kernel bound by the larger of its compute and memory time: (compute part, memory part)."""
    return (compute_s, 0.0) if compute_s >= memory_s else (0.0, memory_s)
