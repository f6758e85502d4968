"""Memory per device: model states (weights, gradients, optimizer; ZeRO 0-3, offload), activations
(Korthikanti et al. 2022 accounting, term by term), KV cache, and the framework allowance.

Byte counts are per element of what is really stored. The transformer activation terms follow the
tensors autograd saves for backward in the modules accelkit builds (checked against
``saved_tensors_hooks`` on a tiny Llama, a tiny Mixtral and tiny GPT-2s in fp32 and bf16) and reduce to Korthikanti's
``s·b·h·(34 + 5·a·s/h)`` for a 16-bit GPT layer with fused LayerNorm and unfused attention.
"""

from __future__ import annotations

from accelkit.core import ModelSpec
from accelkit.core.serving_memory import KVCacheDtype, KVScales, kv_bytes_per_token

GiB = 2**30

#: activation element size for a compute precision (fp8 training keeps bf16 activations: torchao.float8)
ACT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2}
#: training weight copy (mixed precision keeps an fp32 master copy in the optimizer states)
TRAIN_WEIGHT_BYTES = {"fp32": 4, "tf32": 4, "bf16": 2, "fp16": 2, "fp8": 2}
#: families whose HF modules use dropout in training (BERT/GPT-2/ViT configs default to 0.1)
DROPOUT_FAMILIES = ("gpt2", "bert", "vit")


def uses_dropout(model: ModelSpec, option: bool | None) -> bool:
    """Whether training runs dropout: ``option`` when given, else the family's HF default."""
    return model.family in DROPOUT_FAMILIES if option is None else option


def _is_hf_gpt2(model: ModelSpec) -> bool:
    """Whether the layers are transformers' GPT2Block, the only builder of family gpt2 (always with biases: Conv1D);
    a gpt2-layout spec without biases is another codebase's modules (MPT as benchmarks/plan_validation_runs.py
    models it: llm-foundry's nn.GELU and fused Wqkv, no KV cache in training), which keeps what the defaults count.

    Two things GPT2Block keeps that the defaults do not: its ``gelu_new`` is the tanh formula in Python ops,
    0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), whose autograd keeps x (pow), the tanh output, 0.5·x and 1 + tanh
    (the last product) — four ffn-sized tensors where one GELU kernel keeps x; and its q, k, v are views of one
    c_attn output (see ``layer_activation_parts``)."""
    return model.family == "gpt2" and model.linear_bias


def is_mixed(precision: str) -> bool:
    return precision not in ("fp32", "tf32")


def optimizer_bytes_per_param(optimizer: str, precision: str, states: str = "fp32") -> int:
    """Adam: m and v in fp32 (8), plus an fp32 master copy when mixed (ZeRO paper K = 12).
    SGD is taken with momentum: one fp32 buffer (4), plus the master copy when mixed.
    ``states="bf16"`` (``PlanOptions.optimizer_states``): every state in bf16, 2 B each — Apex
    DistributedFusedAdam with ``dtype=torch.bfloat16`` keeps m, v and (store_params, its default) a bf16 copy of
    the weights: 6 B per parameter for Adam."""
    size = 2 if states == "bf16" else 4
    buffers = 2 if optimizer == "adam" else 1
    return size * (buffers + (1 if is_mixed(precision) else 0))


def model_state_bytes(
    params: float, *, precision: str, optimizer: str, zero: int, dp: int, offload: bool = False,
    expert_params: float = 0.0, expert_dp: int = 1, fp32_params: bool = False, optimizer_states: str = "fp32",
    frozen: bool = False, grad_fp32: bool = False,
) -> dict[str, float]:
    """Weights, gradients and optimizer states per device for ``params`` parameters on this device's
    model-parallel shard, ZeRO stage ``zero`` over ``dp`` ranks (Rajbhandari et al. 2020, Figure 1).

    ``expert_params`` (this device's experts, already ÷ ep) are replicated only over the ``expert_dp`` ranks that
    hold the same experts (dp·cp/ep), so ZeRO shards their states over that group, not over ``dp``
    (DeepSpeed-MoE's expert-data-parallel group, Megatron-Core's expert data-parallel group).

    ``fp32_params``: autocast over fp32 parameters (``PlanOptions.autocast_fp32_params``, accelkit's bench) — the
    weights and their gradients are fp32 and are the master copy, so the optimizer keeps no second one.
    ``optimizer_states``: fp32 or bf16 (``optimizer_bytes_per_param``). ``frozen``: the weights do not train (LoRA),
    so there are neither gradients nor optimizer states for them.

    ``grad_fp32`` (``PlanOptions.grad_reduce_fp32``): the gradients are kept — and reduced — in fp32 under mixed
    precision, 4 B each, sharded as the ZeRO stage shards them: Megatron's fp32 main-grad buffer, 6 + 12/d bytes per
    parameter with the distributed optimizer (ZeRO 1). Under ZeRO 3 that is FSDP2 with ``reduce_dtype=float32``: the
    sharded parameters stay fp32 and are the master copy the optimizer steps (``param_dtype`` bf16 only for the
    gathered copies), so weights 4/d, gradients 4/d, Adam's m and v 8/d — the 16/d of the ZeRO paper, with no
    second master copy (with ZeRO-Offload or bf16 optimizer states the master copy stays where it was). Before, the
    gradients stayed 2 B while the reduction moved 4 B per element (found in review)."""
    def per_device(bytes_per_param: float, sharded: bool) -> float:
        if not sharded:
            return bytes_per_param * (params + expert_params)
        return bytes_per_param * (params / dp + expert_params / expert_dp)

    if grad_fp32 and zero >= 3 and not offload and optimizer_states == "fp32":
        fp32_params = True  # FSDP2: the fp32 shards are the master weights
    wb = 4 if fp32_params else TRAIN_WEIGHT_BYTES[precision]
    w = per_device(wb, zero >= 3)
    # gradients in the weight dtype, as the ZeRO paper counts them, or fp32 when they are reduced in fp32
    g = 0.0 if frozen else per_device(4 if grad_fp32 else wb, zero >= 2)
    o = 0.0 if frozen else per_device(
        optimizer_bytes_per_param(optimizer, "fp32" if fp32_params else precision, optimizer_states), zero >= 1)
    return {"weights": w, "gradients": g, "optimizer": 0.0 if offload else o, "optimizer_offloaded": o if offload else 0.0}


def _norm_bytes(model: ModelSpec, e: int, kernels: str) -> float:
    """Per token, one normalisation and the matmul input it feeds: input + output (+ stats). HF's
    RMSNorm upcasts to fp32 and keeps that copy too (``kernels='eager'``)."""
    h = model.hidden_size
    stats = 4 if model.norm == "rmsnorm" else 8
    upcast = 4 * h if (kernels == "eager" and model.norm == "rmsnorm") else 0
    return 2 * e * h + stats + upcast


def _qk_norm_bytes(model: ModelSpec, *, e: int, tp: int, kernels: str) -> float:
    """Per token, what the per-head RMSNorms on q and k (Qwen3's q_norm, k_norm) keep for backward on one tp rank.

    HF's eager RMSNorm keeps its fp32 upcast of q and k (4 B an element; under fp32 that is the projection's output
    itself) and the normalised output cast back to the activation dtype, which the weight multiply saves (e B);
    a fused norm (TE, Megatron) keeps only its input (e B). Both keep one fp32 rsqrt per head and token. RoPE keeps
    nothing of its input (cos and sin are counted with the embedding), so the q and k the attention keeps are
    counted once, as before. Per element of q and k: 4 + e eager, e fused; + 4 B per head. Left out, a Qwen3 layer
    planned 15-17% fewer bytes than autograd saves and a plan said it fits when it did not (found in review;
    tests/integration/test_plan_torch.py measures it on tiny-qwen3 and tiny-qwen3-moe)."""
    heads = model.num_heads / tp + max(model.kv_heads / tp, 1)  # a rank holds at least one KV head
    kept = (4 if kernels == "eager" else 0) + e
    return heads * (kept * model.head_size + 4)


def layer_activation_parts(
    model: ModelSpec, *, seq: int, e: int, tp: int = 1, kernels: str = "eager", attention: str = "flash",
    training_dropout: bool | None = None, fp8_te: bool = False,
) -> dict[str, float]:
    """Bytes per token per layer saved for backward, split by what tensor parallelism shards.

    ``replicated``: norms, their outputs (the q/k/v and fc1 inputs), dropout masks and a MoE's routed copies of the
    hidden state — split only by sequence parallelism; ``sharded``: everything inside the tensor-parallel regions,
    already ÷ tp;
    ``scores``: the s-proportional softmax/dropout terms of unfused attention (dropped by selective
    recompute), ÷ tp.

    The kernel stack decides what the pointwise kernels keep, as kernels.py's traffic table does: ``eager`` (HF)
    RMSNorm keeps its fp32 upcast and SwiGLU keeps gate, up, silu(gate) and their product (4 ffn-sized tensors);
    ``fused`` (Megatron, TE, compile) keeps no upcast and one SwiGLU kernel keeps its [gate|up] input, fc2 its input
    (3). A GELU MLP keeps the fc1 output and the fc2 input (2) either way, except GPT-2's eager ``gelu_new`` (5).
    Qwen3's per-head RMSNorms on q and k keep what ``_qk_norm_bytes`` counts.

    Dropout masks are 1 byte an element: CUDA's fused ``native_dropout`` keeps a bool mask. Two CPU-only effects
    are not modelled (checked in tests/integration/test_plan_torch.py): on a CPU ``torch.dropout`` keeps its mask
    in the activation dtype (e bytes), and SDPA with dropout > 0 leaves the CPU flash kernel (it has no dropout)
    for the math path, which keeps the s² terms of ``attention='math'``. On CUDA the flash kernels take dropout.

    ``fp8_te``: Transformer Engine's FP8 modules (``PlanOptions.fp8_activations="te"``, fused kernels) keep the GEMM
    inputs they quantize, 1 byte an element, in place of the bf16 tensors (TransformerEngine @d0067d0,
    transformer_engine/pytorch/module/): LayerNormLinear (QKV) keeps its norm output column-wise only, both copies
    under ``sequence_parallel`` (vanilla FP8 gathers row-wise data); LayerNormMLP keeps its norm output row- and
    column-wise, one copy under sequence parallelism, its fc1 output in bf16 and its fc2 input row-wise; Linear
    (the attention projection) keeps an FP8 copy of its input column-wise — beside the bf16 output the attention
    kernel keeps, which in bf16 is the same tensor. The norm inputs, q, k and v stay bf16. The two norm outputs
    take 3 bytes an element together with or without sequence parallelism.
    """
    h, q_dim, a = model.hidden_size, model.num_heads * model.head_size, model.num_heads
    kv_dim = max(model.kv_heads / tp, 1) * model.head_size  # a rank holds at least one KV head
    dropout = uses_dropout(model, training_dropout)
    f = model.ffn_hidden_size
    k = model.experts_per_token or 1
    replicated = 2 * _norm_bytes(model, e, kernels) + (2 * h if dropout else 0)  # + masks after proj / MLP
    attn = e * (q_dim / tp + 2 * kv_dim) + e * q_dim / tp  # q, k, v for the attention; its output
    if model.qk_norm:
        attn += _qk_norm_bytes(model, e=e, tp=tp, kernels=kernels)
    if fp8_te:  # the two norm outputs as FP8 GEMM inputs; the projection's FP8 copy of the attention output
        replicated -= 2 * e * h - 3 * h  # QKV input 1 B (2 B under sp) + fc1 input 2 B (1 B): 3 B either way
        attn += q_dim / tp
    if attention != "math":  # flash kernels
        attn += 4 * a / tp  # logsumexp, fp32
        if kernels == "eager" and _is_hf_gpt2(model):
            # the flash kernel keeps q as a view, so the whole q/k/v output stays, and HF's DynamicCache (filled in
            # training unless use_cache=False) hands it k and v as torch.cat copies. The math path reshapes q, k and
            # v into bmm operands (copies) and frees the fused output.
            attn += 2 * e * kv_dim
        scores = 0.0
    else:  # softmax output (+ dropout mask and output): Korthikanti's 5·a·s with e = 2
        scores = (e + ((1 + e) if dropout else 0)) * a * seq / tp
    if fp8_te:  # LayerNormMLP: the fc1 output in bf16 ([gate|up] when gated), the fc2 input in FP8
        mlp = ((2 if model.gated_mlp else 1) * e + 1) * f * k / tp
    elif model.gated_mlp and kernels == "eager":  # gate and up outputs, act(gate), their product (the fc2 input)
        mlp = 4 * e * f * k / tp
    elif model.gated_mlp:  # one fused SwiGLU keeps its [gate|up] input (Megatron's SwiGLUFunction), fc2 its input
        mlp = 3 * e * f * k / tp
    elif kernels == "eager" and _is_hf_gpt2(model):  # fc1 output, 3 more for gelu_new, fc2 input
        mlp = 5 * e * f * k / tp
    else:  # fc1 output (the GELU input), fc2 input
        mlp = 2 * e * f * k / tp
    if model.num_experts:
        mlp += 4 * model.num_experts  # router probabilities, fp32
        # each of the k routed copies of a token: the gathered expert input (the fc1 input; the norm output the router
        # reads is counted above) and the expert output before it is scaled by its routing weight — HF's loop over
        # experts and Megatron's permute / unpermute keep both, at the full hidden size
        replicated += 2 * e * h * k
    return {"replicated": replicated, "sharded": attn + mlp, "scores": scores}


def layer_activation_bytes(
    model: ModelSpec, *, tokens: int, seq: int, e: int, tp: int = 1, sequence_parallel: bool = False,
    recompute: str = "none", kernels: str = "eager", attention: str = "flash", dropout: bool | None = None,
    selective: str = "attention", fp8_te: bool = False,
) -> float:
    """Bytes one layer keeps for backward for ``tokens`` = micro-batch × seq tokens on one tp rank (÷ cp when
    the sequence is split: pass the tokens this rank holds)."""
    sp = tp if sequence_parallel else 1
    if recompute == "full":  # only the layer input (Korthikanti: 2·s·b·h at 16 bit)
        return tokens * e * model.hidden_size / sp
    if recompute == "selective" and selective == "op":
        # torchtitan's op-level policy keeps the block input and the outputs of the saved matmuls (q, v, gate or
        # fc1, down or fc2) and of the attention kernel (output, fp32 logsumexp); the rest is recomputed
        h, q, kv = model.hidden_size, model.num_heads * model.head_size, max(model.kv_heads / tp, 1) * model.head_size
        f = model.ffn_hidden_size
        return tokens * (e * 2 * h / sp + e * (2 * q / tp + kv + f / tp) + 4 * model.num_heads / tp)
    parts = layer_activation_parts(model, seq=seq, e=e, tp=tp, kernels=kernels, attention=attention,
                                   training_dropout=dropout, fp8_te=fp8_te)
    per_token = parts["replicated"] / sp + parts["sharded"]
    if recompute != "selective":
        per_token += parts["scores"]
    return tokens * per_token


def head_activation_bytes(model: ModelSpec, *, tokens: int, seq: int, e: int, tp: int = 1, kernels: str = "eager",
                          sequence_parallel: bool = False, dropout: bool | None = None) -> dict[str, float]:
    """Per micro-batch: token ids, RoPE tables and the embedding dropout's 1-byte mask (first stage); final norm,
    fp32 log-softmax of the logits and labels (last stage). Logits are vocab-parallel (÷ tp)."""
    sp = tp if sequence_parallel else 1
    first = 8.0 * tokens  # int64 ids kept by the embedding backward
    if model.position == "rope" and model.kind != "cnn":
        first += 2 * seq * model.head_size * e  # cos, sin
    if uses_dropout(model, dropout) and model.kind != "cnn":
        first += tokens * model.hidden_size / sp
    last = 0.0
    if model.kind in ("decoder", "moe"):
        last = tokens * (_norm_bytes(model, e, kernels) / sp + 4 * model.vocab_size / tp + 8)
    return {"first": first, "last": last}


def kv_heads_per_rank(model: ModelSpec, tp: int) -> int:
    """KV heads one tensor-parallel rank holds: kv_heads/tp, at least one (a head replicated when tp > kv_heads)."""
    return max(model.kv_heads // tp, 1)


def kv_layer_token_bytes(model: ModelSpec, *, kv_cache_dtype: KVCacheDtype, dtype_bytes: int, tp: int = 1,
                         kv_scales: KVScales = "per-token-head") -> int:
    """K/V bytes one token occupies in one layer on one rank, scales included, as the serving engine stores it
    (``serving_memory.kv_bytes_per_token``; fp8/int8: ``2·heads·(head_dim + 2)`` in accelkit serve,
    ``2·heads·head_dim`` with ``kv_scales="per-tensor"`` as vLLM keeps them)."""
    return kv_bytes_per_token(num_layers=1, num_kv_heads=kv_heads_per_rank(model, tp), head_dim=model.head_size,
                              kv_cache_dtype=kv_cache_dtype, dtype_bytes=dtype_bytes, kv_scales=kv_scales)


def kv_cache_bytes(model: ModelSpec, *, batch: int, seq: int, kv_cache_dtype: KVCacheDtype, dtype_bytes: int,
                   tp: int = 1, pp: int = 1, kv_scales: KVScales = "per-token-head") -> float:
    """Σ_layers tokens kept · ``kv_layer_token_bytes`` · batch, per rank: max(kv_heads/tp, 1) heads, the
    ceil(layers/pp) of the heaviest stage; a layer keeps seq tokens, or min(seq, window) under a sliding window
    (``ModelSpec.kv_cache_layer_tokens``: Mistral's ring buffer, vLLM's freed out-of-window blocks)."""
    if model.kind not in ("decoder", "moe"):
        return 0.0
    layers = -(-model.num_layers // pp)
    per_token = kv_layer_token_bytes(model, kv_cache_dtype=kv_cache_dtype, dtype_bytes=dtype_bytes, tp=tp,
                                     kv_scales=kv_scales)
    return model.kv_cache_layer_tokens(seq, layers) * per_token * batch
