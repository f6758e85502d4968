"""Step time: a roofline per phase (compute at peak × efficiency, memory traffic at bandwidth ×
efficiency, the larger one bounds a kernel), plus communication and the pipeline bubble.

Training, per pipeline stage and micro-batch (Narayanan et al. 2021 1F1B schedule):
``step = (m + p − 1) · t_stage + exposed data-parallel time + optimizer step``, bubble ``(p−1)/(m+p−1)``.
Inference: prefill (TTFT) and one decode step at the mean context; decode reads every weight and the
KV cache once per token, so it is bandwidth-bound at small batch.
"""

from __future__ import annotations

import math

from accelkit.plan import comm
from accelkit.plan import flops as F
from accelkit.plan.context import PlanContext, kv_element_bytes
from accelkit.plan.layout import Layout
from accelkit.plan.memory import TRAIN_WEIGHT_BYTES, layer_activation_bytes, optimizer_bytes_per_param
from accelkit.plan.priors import COLLECTIVE_LATENCY_S

#: each byte a layer saves for backward is touched ~6 times by non-matmul kernels: written and read
#: once in forward, read in backward, its gradient written and read, and the input gradient written
TRAFFIC_PER_SAVED_BYTE = 6.0
#: host link for optimizer offload (PCIe 4.0 x16 ≈ 25 GB/s effective per direction): assumed
OFFLOAD_BANDWIDTH = 25e9


def stage_params(ctx: PlanContext, layout: Layout) -> float:
    """Parameters on one device of the heaviest pipeline stage."""
    if ctx.cnn is not None:
        return float(ctx.model.num_params())
    layers = -(-ctx.model.num_layers // layout.pp)  # uneven stages: the heaviest has ceil(L/pp)
    per_layer = ctx.layer_params + ctx.layer_expert_params / layout.ep
    ends = ctx.embedding_params + ctx.head_params if layout.pp == 1 else max(ctx.embedding_params, ctx.head_params)
    return (layers * per_layer + ends) / layout.tp


def train_time(ctx: PlanContext, layout: Layout) -> dict[str, float]:
    """Seconds per optimizer step, split into compute, memory, communication and bubble."""
    if ctx.cnn is not None:
        return _cnn_train_time(ctx, layout)
    m, w, o, eff = ctx.model, ctx.workload, ctx.options, ctx.efficiency
    tp, pp, e, seq = layout.tp, layout.pp, ctx.e, w.seq_len
    flop_s = ctx.peak * eff.compute
    byte_s = ctx.device.memory_bandwidth_bytes_per_s * eff.memory
    tokens = layout.micro_batch * seq

    # ---- one layer, one micro-batch, one tp rank
    att = F.attention_flops(m, batch=layout.micro_batch, q_len=seq, kv_len=seq) / m.num_layers
    factor = F.executed_attention_factor(m, o.attention)
    layer_flops = 6.0 * tokens * ctx.layer_matmul_active + 3.0 * att * factor
    if layout.recompute == "full":
        layer_flops += 2.0 * tokens * ctx.layer_matmul_active + att * factor
    elif layout.recompute == "selective" and o.attention == "math":
        layer_flops += att
    compute = layer_flops / tp / flop_s
    weight_bytes = 3.0 * (ctx.layer_params + ctx.layer_expert_params / layout.ep) / tp * e  # fwd, dgrad, wgrad
    weight_s = weight_bytes / byte_s
    saved = layer_activation_bytes(m, tokens=tokens, seq=seq, e=e, tp=tp, sequence_parallel=layout.sequence_parallel,
                                   kernels=o.kernels, attention=o.attention)
    traffic = TRAFFIC_PER_SAVED_BYTE * saved
    if layout.recompute == "full":
        traffic += 2.0 * saved  # the forward's traffic once more
    elif layout.recompute == "selective":
        kept = layer_activation_bytes(m, tokens=tokens, seq=seq, e=e, tp=tp, sequence_parallel=layout.sequence_parallel,
                                      recompute="selective", kernels=o.kernels, attention=o.attention)
        traffic += 2.0 * (saved - kept)
    memory = traffic / byte_s + max(0.0, weight_s - compute)
    lat = COLLECTIVE_LATENCY_S
    tp_bw, _ = comm.group_bandwidth(ctx.cluster, tp)
    n_tp = 4 + (2 if layout.recompute == "full" else 0)  # 2 in forward, 2 in backward (AG+RS under SP)
    communication = n_tp * comm.all_reduce_s(e * tokens * m.hidden_size, tp, tp_bw * eff.comm, lat)
    if layout.ep > 1:
        ep_bw, _ = comm.group_bandwidth(ctx.cluster, layout.ep, tp)
        routed = e * tokens * (m.experts_per_token or 1) * m.hidden_size / tp
        communication += 4 * comm.all_to_all_s(routed, layout.ep, ep_bw * eff.comm, lat)

    # ---- one stage (the last one carries the LM head), one micro-batch
    layers = -(-m.num_layers // pp)
    head_flops = 6.0 * tokens * F.head_matmul_params(m) / tp
    head_traffic = 4.0 * 4 * tokens * m.vocab_size / tp if m.kind in ("decoder", "moe") else 0.0  # fp32 logits
    st_compute = layers * compute + head_flops / flop_s
    st_memory = layers * memory + head_traffic / byte_s
    st_comm = layers * communication
    if pp > 1:
        pp_bw, _ = comm.group_bandwidth(ctx.cluster, 2, tp * layout.dp)
        st_comm += 2 * comm.p2p_s(e * tokens * m.hidden_size / tp, pp_bw * eff.comm, lat)
    stage = st_compute + st_memory + st_comm
    mb = layout.grad_accum

    # ---- data parallel and the optimizer
    params = stage_params(ctx, layout)
    dp_exposed = _dp_exposed(ctx, layout, params, st_compute, stage)
    optimizer = _optimizer_s(ctx, layout, params, byte_s)
    return {
        "compute": mb * st_compute,
        "memory": mb * st_memory + optimizer,
        "communication": mb * st_comm + dp_exposed,
        "bubble": (pp - 1) * stage,
    }


def _dp_exposed(ctx: PlanContext, layout: Layout, params: float, st_compute: float, stage: float) -> float:
    dp = layout.dp
    if dp <= 1:
        return 0.0
    eff, lat = ctx.efficiency, COLLECTIVE_LATENCY_S
    bw, _ = comm.group_bandwidth(ctx.cluster, dp, layout.tp)
    bw *= eff.comm
    gbytes = params * TRAIN_WEIGHT_BYTES[ctx.workload.recipe.precision]
    if layout.zero >= 3:  # every micro-batch: gather weights for forward and backward, reduce-scatter grads
        per_mb = 2 * comm.all_gather_s(params * ctx.weight_bytes, dp, bw, lat) + comm.reduce_scatter_s(gbytes, dp, bw, lat)
        return layout.grad_accum * max(0.0, per_mb - stage)
    # ZeRO 0/1: all-reduce; ZeRO 2: reduce-scatter + all-gather of updated weights — the same volume
    return max(0.0, comm.all_reduce_s(gbytes, dp, bw, lat) - 2.0 / 3.0 * st_compute)


def _optimizer_s(ctx: PlanContext, layout: Layout, params: float, byte_s: float) -> float:
    recipe = ctx.workload.recipe
    local = params / layout.dp if layout.zero >= 1 else params
    wb = TRAIN_WEIGHT_BYTES[recipe.precision]
    if recipe.offload:  # gradients to the host, updated weights back
        return local * 2 * wb / OFFLOAD_BANDWIDTH
    states = optimizer_bytes_per_param(ctx.workload.optimizer, recipe.precision)
    return local * (2 * (states + wb) + wb) / byte_s  # read+write states and weights, read gradients


def _cnn_train_time(ctx: PlanContext, layout: Layout) -> dict[str, float]:
    cnn, eff = ctx.cnn, ctx.efficiency
    assert cnn is not None
    n = layout.micro_batch
    flops = 3.0 * cnn["forward_flops"] * n + (cnn["forward_flops"] * n if layout.recompute == "full" else 0.0)
    compute = flops / (ctx.peak * eff.compute)
    saved = cnn["saved_bytes"] * n
    memory = TRAFFIC_PER_SAVED_BYTE * saved / (ctx.device.memory_bandwidth_bytes_per_s * eff.memory)
    params = float(ctx.model.num_params())
    stage = compute + memory
    dp_exposed = _dp_exposed(ctx, layout, params, compute, stage)
    opt = _optimizer_s(ctx, layout, params, ctx.device.memory_bandwidth_bytes_per_s * eff.memory)
    return {"compute": layout.grad_accum * compute, "memory": layout.grad_accum * memory + opt,
            "communication": dp_exposed, "bubble": 0.0}


def infer_time(ctx: PlanContext, layout: Layout, batch: int) -> dict[str, float]:
    """Prefill (TTFT) and decode-per-token seconds for ``batch`` sequences on one model replica."""
    m, w, eff = ctx.model, ctx.workload, ctx.efficiency
    tp, pp = layout.tp, layout.pp
    flop_s = ctx.peak * eff.compute
    byte_s = ctx.device.memory_bandwidth_bytes_per_s * eff.memory
    lat = COLLECTIVE_LATENCY_S
    tp_bw, _ = comm.group_bandwidth(ctx.cluster, tp)
    tp_bw *= eff.comm
    pp_bw, _ = comm.group_bandwidth(ctx.cluster, 2, tp * layout.dp)
    pp_bw *= eff.comm
    weights = (m.num_params() * ctx.weight_bytes) / tp  # a batch passes every stage in turn
    if ctx.cnn is not None:
        fl = ctx.cnn["forward_flops"] * batch
        mem = weights + ctx.cnn["saved_bytes"] * batch * 2
        t = max(fl / flop_s, mem / byte_s)
        return {"prefill": t, "decode": 0.0, "prefill_compute": fl / flop_s, "prefill_memory": mem / byte_s,
                "prefill_comm": 0.0, "decode_compute": 0.0, "decode_memory": 0.0, "decode_comm": 0.0}
    is_lm = m.kind in ("decoder", "moe")
    prompt = w.prompt_len if is_lm else w.seq_len
    tokens = batch * prompt
    chunks = math.ceil(tokens / ctx.options.prefill_chunk_tokens)
    fl = F.prefill_flops(m, batch=batch, prompt_len=prompt) if is_lm else F.forward_flops(m, batch=batch, seq=prompt)
    att = F.attention_flops(m, batch=batch, q_len=prompt, kv_len=prompt)
    causal = 0.5 if (is_lm and ctx.options.attention == "flash") else 1.0
    fl_exec = fl - att * (1 - causal)
    kv_tok_rank = 2 * m.num_layers * max(m.kv_heads / tp, 1) * m.head_size * kv_element_bytes(w) if is_lm else 0.0
    p_compute = fl_exec / tp / flop_s
    p_memory = (chunks * weights + tokens * kv_tok_rank) / byte_s
    h_bytes = ctx.e * m.hidden_size
    p_comm = 2 * m.num_layers * comm.all_reduce_s(h_bytes * tokens, tp, tp_bw, lat)
    p_comm += (pp - 1) * comm.p2p_s(h_bytes * tokens / tp, pp_bw, lat)
    out = {"prefill": max(p_compute, p_memory) + p_comm, "prefill_compute": p_compute, "prefill_memory": p_memory,
           "prefill_comm": p_comm, "decode": 0.0, "decode_compute": 0.0, "decode_memory": 0.0, "decode_comm": 0.0}
    if not is_lm or w.output_len == 0:
        return out
    context = prompt + w.output_len / 2
    d_compute = F.decode_flops(m, batch=batch, context=int(context)) / tp / flop_s
    read = weights
    if m.num_experts:  # a decode step touches only the experts its tokens are routed to
        experts = ctx.layer_expert_params * m.num_layers * ctx.weight_bytes / tp
        read -= experts * (1 - min(1.0, batch * (m.experts_per_token or 1) / m.num_experts))
    d_memory = (read + batch * context * kv_tok_rank) / byte_s
    d_comm = 2 * m.num_layers * comm.all_reduce_s(h_bytes * batch, tp, tp_bw, lat)
    d_comm += (pp - 1) * comm.p2p_s(h_bytes * batch / tp, pp_bw, lat)
    out.update(decode=max(d_compute, d_memory) + d_comm, decode_compute=d_compute, decode_memory=d_memory,
               decode_comm=d_comm)
    return out
