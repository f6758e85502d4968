"""The memory-bound kernels of a transformer layer: the bytes each reads and writes per token, forward and
backward, and how many kernels that takes (the host launches each one).

Two kernel stacks:

* ``eager`` — PyTorch eager modules as Hugging Face and torchtitan write them: RMSNorm upcasts to fp32 in
  five kernels, rotary embeddings use rotate_half (slice, neg, cat, two muls, an add), SwiGLU is silu then
  mul, attention outputs are transposed back with a copy, GQA keys/values are repeated to the query heads;
* ``fused`` — Megatron / Transformer Engine / compiled kernels: one kernel per norm, per rotary, per
  activation, and bias-dropout-add in one pass.

Counts are elements per token (× the activation element size unless a term says fp32). A kernel reads
its inputs once and writes its outputs once; backward reads the upstream gradient and the saved inputs
and writes one gradient per input, and autograd adds the gradients of a residual branch: ~2× the forward
bytes for eager kernels, 1.5× for fused ones (one kernel produces every input gradient).

``sharded`` elements live inside the tensor-parallel region (÷ tp); ``replicated`` ones (norms, residual
adds, dropout on the hidden state) are split only by sequence parallelism.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelkit.core import ModelSpec

BACKWARD_FACTOR = {"eager": 2.0, "fused": 1.5}


@dataclass(frozen=True, slots=True)
class LayerTraffic:
    """Bytes per token of one layer's memory-bound kernels and the kernels launched per micro-batch."""

    replicated_bytes: float  # forward, per token, before the sp split
    sharded_bytes: float  # forward, per token, before the tp split
    backward_factor: float
    forward_kernels: int
    backward_kernels: int


def _norm_elements(model: ModelSpec, e: int, stack: str) -> tuple[float, int]:
    """(bytes per hidden element, kernels) of one normalisation."""
    if stack == "eager" and model.norm == "rmsnorm":
        # to(fp32) r e w 4; pow r 4 w 4; mean r 4; x·rsqrt r 4 w 4; to(dtype) r 4 w e; ·weight r e w e
        return 3 * e + 24 + e, 6
    return 2 * e, 1  # one kernel: read x, write y (LayerNorm is a single native kernel even in eager)


def layer_traffic(model: ModelSpec, *, e: int, stack: str, dropout: bool) -> LayerTraffic:
    """Memory-bound traffic of one transformer block (attention core and GEMMs excluded: they are timed
    as tensor-core work)."""
    h, a, q_dim = model.hidden_size, model.num_heads, model.num_heads * model.head_size
    kv_dim = model.kv_heads * model.head_size
    f = model.ffn_hidden_size * (model.experts_per_token or 1)
    norm_b, norm_k = _norm_elements(model, e, stack)
    replicated = 2 * norm_b * h + 2 * 3 * e * h  # two norms; two residual adds (read 2h, write h)
    fwd_k = 2 * norm_k + 2
    sharded = 0.0
    if model.qk_norm:  # Qwen3: an RMSNorm over head_dim on every q and k head (found in review: not counted)
        sharded += norm_b * (q_dim + kv_dim)
        fwd_k += 2 * norm_k
    if model.position == "rope":
        if stack == "eager":  # rotate_half: 2 muls, neg, cat, add on q and k — ~10 passes of r/w
            sharded += 10 * e * (q_dim + kv_dim)
            fwd_k += 10
        else:
            sharded += 2 * e * (q_dim + kv_dim)
            fwd_k += 2
    if stack == "eager":
        sharded += 2 * e * q_dim  # attention output transpose(1, 2).contiguous()
        fwd_k += 1
        if kv_dim < q_dim:  # repeat_kv expands k and v to the query heads (read kv, write q, twice)
            sharded += 2 * e * (kv_dim + q_dim)
            fwd_k += 2
    if model.gated_mlp:
        sharded += (5 if stack == "eager" else 3) * e * f  # silu(gate) then ·up, or one fused swiglu
        fwd_k += 2 if stack == "eager" else 1
    else:
        sharded += 2 * e * f  # gelu (bias is fused into the matmul epilogue)
        fwd_k += 1
    if model.num_experts:  # token permutation to experts and back, router softmax/top-k
        k = model.experts_per_token or 1
        replicated += 4 * e * h * k + 8 * model.num_experts
        fwd_k += 6
    if dropout:  # two dropout sites on the hidden state: write a 1-byte mask, read x, write y
        replicated += 2 * (2 * e + 1) * h
        fwd_k += 0 if stack == "fused" else 2
    del a
    fwd_k += 7  # q, k, v, o and the MLP matmuls are launched too (their time is tensor-core time)
    return LayerTraffic(replicated_bytes=replicated, sharded_bytes=sharded, backward_factor=BACKWARD_FACTOR[stack],
                        forward_kernels=fwd_k, backward_kernels=2 * fwd_k)


def loss_bytes_per_token(model: ModelSpec, *, e: int, stack: str) -> float:
    """Bytes per token of the language-model loss over the logits (forward + backward), before the tp split.

    Eager: logits cast to fp32 (r e, w 4), log-softmax (r 4, w 4), NLL; backward softmax gradient (r 4, w 4)
    and the cast back (r 4, w e). Fused (vocab-parallel cross-entropy): read the logits, write their gradient.
    """
    if model.kind not in ("decoder", "moe"):
        return 0.0
    per_logit = (2 * e + 24) if stack == "eager" else 3 * e
    return per_logit * model.vocab_size


def math_attention_bytes(model: ModelSpec, *, seq: int, e: int, dropout: bool) -> float:
    """Unfused attention's s² traffic per token (forward): scores written by QKᵀ, softmax read and written,
    probabilities read by A·V (+ dropout mask and output)."""
    per_score = 4 * e + ((2 * e + 1) if dropout else 0)
    return per_score * model.num_heads * seq
