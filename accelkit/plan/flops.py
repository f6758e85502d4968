"""FLOPs: model FLOPs (what MFU divides, PaLM Appendix B / Megatron convention) and the hardware FLOPs
a layout really executes (recomputation, causal attention kernels).

Model FLOPs count every matmul at 2 FLOPs per multiply-add — the same rule as
``torch.utils.flop_counter.FlopCounterMode`` — so for a GPT they reduce exactly to Megatron's
``72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h))`` per training step:

* forward  = 2 · tokens · (matmul weights) + 4 · b · s² · H · Q · L   (attention scores and values, full
  square as PaLM and FlopCounterMode count it; no causal halving)
* training = 3 × forward (backward: gradients of inputs and of weights).

A sliding-window layer (Mistral's ``sliding_window``) lets a query see at most ``window`` keys, so its rectangle is
q · min(k, window); ``causal_attention_flops`` is what a causal (windowed) flash kernel executes.
"""

from __future__ import annotations

from accelkit.core import ModelSpec


def layer_matmul_params(model: ModelSpec, *, active: bool = True) -> int:
    """Weights one layer multiplies per token (biases and norms excluded: they are not matmuls).
    MoE: the router plus ``experts_per_token`` experts (``active``) or all of them."""
    h, q, kv, f = model.hidden_size, model.num_heads * model.head_size, model.kv_heads * model.head_size, model.ffn_hidden_size
    attn = h * q + 2 * h * kv + q * h
    expert = (3 if model.gated_mlp else 2) * h * f
    if model.num_experts is None:
        return attn + expert
    experts = model.experts_per_token if active else model.num_experts
    return attn + expert * experts + h * model.num_experts  # type: ignore[operator]


def column_parallel_params(model: ModelSpec) -> int:
    """Weights of the layers Megatron splits by columns (Q, K, V and the MLP's input projections): in backward
    their weight-gradient matmuls run while the input gradient is all-reduced."""
    h, q, kv, f = model.hidden_size, model.num_heads * model.head_size, model.kv_heads * model.head_size, model.ffn_hidden_size
    return h * q + 2 * h * kv + (2 if model.gated_mlp else 1) * h * f * (model.experts_per_token or 1)


def head_matmul_params(model: ModelSpec) -> int:
    """The output projection to the vocabulary (tied or not, the matmul happens)."""
    return model.vocab_size * model.hidden_size if model.kind in ("decoder", "moe") else 0


def attention_flops(model: ModelSpec, *, batch: int, q_len: int, kv_len: float, windowed: bool = True) -> float:
    """QKᵀ and A·V over all layers, forward: 2·2·b·q·k·H·Q per layer (full rectangle), k = min(kv_len, window) on a
    sliding-window layer. ``windowed=False``: every layer over all kv_len keys (unfused attention computes the
    whole s² score matrix and masks it, window or not)."""
    keys = model.kv_cache_layer_tokens(kv_len) if windowed else model.num_layers * kv_len
    return 4.0 * batch * q_len * keys * model.num_heads * model.head_size


def causal_attention_flops(model: ModelSpec, *, batch: int, seq: int) -> float:
    """What a causal flash kernel executes over ``seq`` tokens, forward, all layers: query i sees min(i, window)
    keys, Σ = s²/2 on a full layer (half the counted square) and s·w − w²/2 on a layer with a window w < s."""
    w = model.sliding_window
    windowed = model.num_window_layers if w is not None and w < seq else 0
    pairs = (model.num_layers - windowed) * seq * seq / 2 + (windowed * (seq * w - w * w / 2) if w else 0.0)
    return 4.0 * batch * pairs * model.num_heads * model.head_size


def _extra_forward(model: ModelSpec, batch: int) -> float:
    """Per-sequence matmuls outside the blocks: the encoder pooler (first token) and ViT patch embedding."""
    h = model.hidden_size
    extra = 2.0 * batch * h * h if model.pooler else 0.0
    if model.family == "vit":
        extra += 2.0 * batch * model.num_patches * model.num_channels * model.patch_size**2 * h  # type: ignore[operator]
    return extra


def forward_flops(model: ModelSpec, *, batch: int, seq: int, logits: bool = True) -> float:
    """Model FLOPs of one forward pass over ``batch`` sequences of ``seq`` tokens."""
    tokens = batch * seq
    weights = model.num_layers * layer_matmul_params(model) + (head_matmul_params(model) if logits else 0)
    return 2.0 * tokens * weights + attention_flops(model, batch=batch, q_len=seq, kv_len=seq) + _extra_forward(model, batch)


def training_flops(model: ModelSpec, *, batch: int, seq: int) -> float:
    """Model FLOPs of one training step (forward + backward = 3 × forward)."""
    return 3.0 * forward_flops(model, batch=batch, seq=seq)


def op_recompute_share(model: ModelSpec) -> float:
    """The share of a block's forward matmul FLOPs torchtitan's op-level selective recompute runs again: its policy
    saves every second ``mm`` of a block in execution order (q, k, v, o, then gate, up, down — or fc1, fc2) and
    recomputes the others (k, o, up; or k, o, fc2)."""
    h, q, kv, f = model.hidden_size, model.num_heads * model.head_size, model.kv_heads * model.head_size, \
        model.ffn_hidden_size
    mms = [h * q, h * kv, h * kv, q * h] + ([h * f, h * f, f * h] if model.gated_mlp else [h * f, f * h])
    return sum(mms[1::2]) / sum(mms)


def prefill_flops(model: ModelSpec, *, batch: int, prompt_len: int) -> float:
    """Forward over the prompt, logits for the last position only (what serving engines compute)."""
    body = forward_flops(model, batch=batch, seq=prompt_len, logits=False)
    return body + 2.0 * batch * head_matmul_params(model)


def decode_flops(model: ModelSpec, *, batch: int, context: int) -> float:
    """One generated token for ``batch`` sequences that attend to ``context`` cached tokens."""
    weights = model.num_layers * layer_matmul_params(model) + head_matmul_params(model)
    return 2.0 * batch * weights + attention_flops(model, batch=batch, q_len=1, kv_len=context)
