"""Closed-form counts of the text encoders: CLIP text towers and the T5 encoder (transformers' modules), one prompt
of ``encoder.max_length`` tokens per call."""

from __future__ import annotations

from accelkit.models.diffusion.arith import Count, attention, linear, norm, total
from accelkit.models.diffusion.spec import TextEncoder


def clip(encoder: TextEncoder) -> Count:
    """CLIPTextModel[WithProjection]: token and position embeddings, L pre-norm blocks (q, k, v, out with bias; an MLP
    h → I → h), a final LayerNorm, and — with a projection — a bias-free h → projection_dim on the pooled token."""
    c = encoder.config
    h, inner, layers, tokens = int(c["hidden_size"]), int(c["intermediate_size"]), int(c["num_hidden_layers"]), \
        encoder.max_length
    embeddings = Count(params=(int(c["vocab_size"]) + int(c.get("max_position_embeddings", tokens))) * h)
    block = total([linear(tokens, h, h) * 4, attention(tokens, tokens, h), linear(tokens, h, inner),
                   linear(tokens, inner, h), norm(h) * 2])
    head = norm(h) + (linear(1, h, c["projection_dim"], bias=False) if encoder.kind == "clip-projection" else Count())
    return embeddings + block * layers + head


def t5(encoder: TextEncoder) -> Count:
    """T5EncoderModel: a shared embedding, L blocks (bias-free q, k, v, o of heads × d_kv; the first block's relative
    position bias table; a gated-GELU FFN d → d_ff (×2) → d; RMS norms with weights only), a final norm."""
    c = encoder.config
    d, d_ff, layers, tokens = int(c["d_model"]), int(c["d_ff"]), int(c["num_layers"]), encoder.max_length
    inner = int(c["num_heads"]) * int(c["d_kv"])
    gated = str(c.get("feed_forward_proj", "relu")).startswith("gated")
    ffn = linear(tokens, d, d_ff, bias=False) * (2 if gated else 1) + linear(tokens, d_ff, d, bias=False)
    block = total([linear(tokens, d, inner, bias=False) * 3, attention(tokens, tokens, inner),
                   linear(tokens, inner, d, bias=False), ffn, norm(d, bias=False) * 2])
    position_bias = Count(params=int(c.get("relative_attention_num_buckets", 32)) * int(c["num_heads"]))
    return Count(params=int(c["vocab_size"]) * d) + block * layers + position_bias + norm(d, bias=False)


def encoder_count(encoder: TextEncoder) -> Count:
    """Parameters and FLOPs per prompt of one text encoder."""
    return t5(encoder) if encoder.kind == "t5" else clip(encoder)
