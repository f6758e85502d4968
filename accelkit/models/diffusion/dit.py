"""Closed-form counts of the diffusion transformers: SD3's MMDiT (diffusers SD3Transformer2DModel) and FLUX
(FluxTransformer2DModel), one call on one image: ``image_tokens`` latent patches beside ``text_tokens`` prompt
tokens. Both attend jointly over image and text tokens (a joint block keeps a weight set per stream)."""

from __future__ import annotations

from typing import Any

from accelkit.models.diffusion.arith import Count, attention, conv, linear, norm, total

#: the sinusoidal timestep features diffusers' TimestepEmbedding takes (Timesteps(256))
TIMESTEP_FEATURES = 256


def _mlp_embedder(d_in: int, dim: int) -> Count:
    """TimestepEmbedding / PixArtAlphaTextProjection: d_in → dim → dim, with biases, on one vector per image."""
    return linear(1, d_in, dim) + linear(1, dim, dim)


def _feed_forward(tokens: int, dim: int) -> Count:
    """diffusers FeedForward with a GELU(tanh): dim → 4·dim → dim."""
    return linear(tokens, dim, 4 * dim) + linear(tokens, 4 * dim, dim)


def _joint_block(image: int, text: int, dim: int, head_dim: int, *, qk_norm: bool, text_out: bool) -> Count:
    """A joint (double-stream) block: each stream's adaptive norm (D → 6D from the conditioning vector; SD3's last
    block norms the text with D → 2D instead, ``text_out`` False), q/k/v per stream, attention over both streams, and
    — for a stream whose output is kept — its output projection and feed-forward."""
    qk = norm(head_dim, bias=False) * 4 if qk_norm else Count()  # q, k, added q, added k (RMSNorm weights)
    parts = [linear(1, dim, 6 * dim), linear(1, dim, 6 * dim if text_out else 2 * dim),
             linear(image, dim, dim) * 3, linear(text, dim, dim) * 3, qk, attention(image + text, image + text, dim),
             linear(image, dim, dim), _feed_forward(image, dim)]
    if text_out:
        parts += [linear(text, dim, dim), _feed_forward(text, dim)]
    return total(parts)


def sd3(config: dict[str, Any], image_tokens: int, text_tokens: int) -> Count:
    """SD3Transformer2DModel: a p×p patch convolution, timestep + pooled-text embedders, the caption projection, L
    joint blocks (the last one keeps no text output), the final adaptive norm and the unpatchify projection."""
    dim = config["num_attention_heads"] * config["attention_head_dim"]
    patch, channels = config["patch_size"], config["in_channels"]
    out = config.get("out_channels") or channels
    layers = config["num_layers"]
    qk_norm = config.get("qk_norm") is not None
    block = _joint_block(image_tokens, text_tokens, dim, config["attention_head_dim"], qk_norm=qk_norm, text_out=True)
    last = _joint_block(image_tokens, text_tokens, dim, config["attention_head_dim"], qk_norm=qk_norm, text_out=False)
    return total([
        conv(image_tokens, channels, dim, patch),
        _mlp_embedder(TIMESTEP_FEATURES, dim), _mlp_embedder(config["pooled_projection_dim"], dim),
        linear(text_tokens, config["joint_attention_dim"], config["caption_projection_dim"]),
        block * (layers - 1), last,
        linear(1, dim, 2 * dim), linear(image_tokens, dim, patch * patch * out),
    ])


def _single_block(tokens: int, dim: int, head_dim: int) -> Count:
    """FLUX's single-stream block over image and text tokens together: adaptive norm (D → 3D), an MLP branch D → 4D
    in parallel with q/k/v, attention, and one output projection of both branches (5D → D)."""
    return total([linear(1, dim, 3 * dim), linear(tokens, dim, 4 * dim), linear(tokens, dim, dim) * 3,
                  norm(head_dim, bias=False) * 2, attention(tokens, tokens, dim), linear(tokens, 5 * dim, dim)])


def flux(config: dict[str, Any], image_tokens: int, text_tokens: int) -> Count:
    """FluxTransformer2DModel: the packed-latent embedding, timestep (+ guidance) + pooled-text embedders, the context
    projection, L double-stream and L' single-stream blocks, the final adaptive norm and projection. Rotary position
    tables are outer products, no model FLOPs."""
    dim = config["num_attention_heads"] * config["attention_head_dim"]
    head_dim, channels = config["attention_head_dim"], config["in_channels"]
    patch = config.get("patch_size", 1)
    out = config.get("out_channels") or channels
    embedders = [_mlp_embedder(TIMESTEP_FEATURES, dim), _mlp_embedder(config["pooled_projection_dim"], dim)]
    if config.get("guidance_embeds"):
        embedders.append(_mlp_embedder(TIMESTEP_FEATURES, dim))
    both = image_tokens + text_tokens
    return total([
        linear(image_tokens, channels, dim), *embedders,
        linear(text_tokens, config["joint_attention_dim"], dim),
        _joint_block(image_tokens, text_tokens, dim, head_dim, qk_norm=True, text_out=True) * config["num_layers"],
        _single_block(both, dim, head_dim) * config["num_single_layers"],
        linear(1, dim, 2 * dim), linear(image_tokens, dim, patch * patch * out),
    ])
