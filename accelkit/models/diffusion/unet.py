"""Closed-form counts of the SDXL-class UNet (diffusers UNet2DConditionModel with text-time added conditioning and
linear-projection transformers) and of the AutoencoderKL, one call on one image at a latent of ``height × width``.

The channel bookkeeping (skip connections, which blocks down- or up-sample) follows UNet2DConditionModel's
constructor; the tests check the parameter count and the FLOPs against the real modules for every preset."""

from __future__ import annotations

from typing import Any

from accelkit.models.diffusion.arith import Count, attention, conv, linear, norm, total

TEXT_TIME_IDS = 6  # SDXL's added time ids: original size, crop top-left, target size


def resnet(pixels: int, c_in: int, c_out: int, temb: int | None) -> Count:
    """ResnetBlock2D: GroupNorm → 3×3 conv → (+ time embedding projection) → GroupNorm → 3×3 conv, with a 1×1
    shortcut when the channels change."""
    parts = [norm(c_in), conv(pixels, c_in, c_out, 3), norm(c_out), conv(pixels, c_out, c_out, 3)]
    if temb is not None:
        parts.append(linear(1, temb, c_out))
    if c_in != c_out:
        parts.append(conv(pixels, c_in, c_out, 1))
    return total(parts)


def spatial_transformer(pixels: int, dim: int, layers: int, cross_dim: int, text_tokens: int) -> Count:
    """Transformer2DModel with linear projections: GroupNorm, proj_in, ``layers`` BasicTransformerBlocks (self-
    attention, cross-attention to the text, a GEGLU feed-forward dim → 2·4dim → dim), proj_out."""
    block = total([
        norm(dim) * 3,
        linear(pixels, dim, dim, bias=False) * 3, attention(pixels, pixels, dim), linear(pixels, dim, dim),
        linear(pixels, dim, dim, bias=False), linear(text_tokens, cross_dim, dim, bias=False) * 2,
        attention(pixels, text_tokens, dim), linear(pixels, dim, dim),
        linear(pixels, dim, 8 * dim), linear(pixels, 4 * dim, dim),
    ])
    return norm(dim) + linear(pixels, dim, dim) + block * layers + linear(pixels, dim, dim)


def per_block(value: Any, blocks: int) -> list[int]:
    """A per-level UNet setting as a list: diffusers' configs give one int for every level, or a list."""
    return list(value) if isinstance(value, (list, tuple)) else [value] * blocks


def unet(config: dict[str, Any], height: int, width: int, text_tokens: int) -> Count:
    """UNet2DConditionModel (SDXL: DownBlock2D / CrossAttn*Block2D, text-time added embedding)."""
    widths = list(config["block_out_channels"])
    levels = len(widths)
    layers = config.get("layers_per_block", 2)
    depth = per_block(config.get("transformer_layers_per_block", 1), levels)
    cross_dim = config["cross_attention_dim"]
    groups_temb = 4 * widths[0]
    parts = [conv(height * width, config["in_channels"], widths[0], 3),
             linear(1, widths[0], groups_temb) + linear(1, groups_temb, groups_temb)]
    if config.get("addition_embed_type") == "text_time":  # the time ids' sinusoidal features have no weights
        parts.append(linear(1, config["projection_class_embeddings_input_dim"], groups_temb)
                     + linear(1, groups_temb, groups_temb))
    skips = [widths[0]]  # channels each down step leaves for the up path
    sizes = []  # the latent's size before each down-sample, which the up path returns to
    h, w, c_prev = height, width, widths[0]
    for i, kind in enumerate(config["down_block_types"]):
        for _ in range(layers):
            parts.append(resnet(h * w, c_prev, widths[i], groups_temb))
            if kind.startswith("CrossAttn"):
                parts.append(spatial_transformer(h * w, widths[i], depth[i], cross_dim, text_tokens))
            c_prev = widths[i]
            skips.append(c_prev)
        if i < levels - 1:
            sizes.append((h, w))
            h, w = (h + 1) // 2, (w + 1) // 2
            parts.append(conv(h * w, c_prev, c_prev, 3))  # Downsample2D: 3×3, stride 2
            skips.append(c_prev)
    mid = widths[-1]
    parts += [resnet(h * w, mid, mid, groups_temb),
              spatial_transformer(h * w, mid, depth[-1], cross_dim, text_tokens), resnet(h * w, mid, mid, groups_temb)]
    rev_widths, rev_depth = widths[::-1], depth[::-1]
    c_prev = mid
    for i, kind in enumerate(config["up_block_types"]):
        for _ in range(layers + 1):
            skip = skips.pop()
            parts.append(resnet(h * w, c_prev + skip, rev_widths[i], groups_temb))
            if kind.startswith("CrossAttn"):
                parts.append(spatial_transformer(h * w, rev_widths[i], rev_depth[i], cross_dim, text_tokens))
            c_prev = rev_widths[i]
        if i < levels - 1:
            # Upsample2D: nearest to the skip's size (2× but for an odd side, which the UNet passes it as
            # upsample_size; doubling counted 36.4 M FLOPs for 35.1 M at a 9×13 latent; found in review), a 3×3 conv
            h, w = sizes.pop()
            parts.append(conv(h * w, c_prev, c_prev, 3))
    parts += [norm(widths[0]), conv(height * width, widths[0], config.get("out_channels", 4), 3)]
    return total(parts)


def _vae_mid(pixels: int, dim: int) -> Count:
    """UNetMidBlock2D of the VAE: resnet, one single-head self-attention over every latent pixel, resnet."""
    attn = norm(dim) + linear(pixels, dim, dim) * 4 + attention(pixels, pixels, dim)
    return resnet(pixels, dim, dim, None) + attn + resnet(pixels, dim, dim, None)


def vae_decoder(config: dict[str, Any], height: int, width: int) -> Count:
    """AutoencoderKL.decode of a ``height × width`` latent: post_quant_conv (SDXL's VAE), the Decoder's conv_in, mid
    block, up blocks (layers_per_block + 1 resnets, an upsampling 3×3 conv but for the last), conv_out."""
    widths = list(config["block_out_channels"])
    latent, layers = config["latent_channels"], config.get("layers_per_block", 2)
    h, w = height, width
    parts = [conv(h * w, latent, latent, 1)] if config.get("use_post_quant_conv", True) else []
    parts += [conv(h * w, latent, widths[-1], 3), _vae_mid(h * w, widths[-1])]
    c_prev = widths[-1]
    for i, c_out in enumerate(widths[::-1]):
        for j in range(layers + 1):
            parts.append(resnet(h * w, c_prev if j == 0 else c_out, c_out, None))
        c_prev = c_out
        if i < len(widths) - 1:
            h, w = 2 * h, 2 * w
            parts.append(conv(h * w, c_out, c_out, 3))
    parts += [norm(widths[0]), conv(h * w, widths[0], config.get("out_channels", 3), 3)]
    return total(parts)


def vae_encoder_params(config: dict[str, Any]) -> int:
    """Parameters of the encoder half (held in memory, never run by text-to-image): conv_in, down blocks of
    layers_per_block resnets and a stride-2 conv but for the last, mid block, conv_out to 2 × latent (mean and
    log-variance), and quant_conv where the VAE has one."""
    widths = list(config["block_out_channels"])
    latent, layers = config["latent_channels"], config.get("layers_per_block", 2)
    parts = [conv(1, config.get("in_channels", 3), widths[0], 3)]
    c_prev = widths[0]
    for i, c_out in enumerate(widths):
        parts += [resnet(1, c_prev if j == 0 else c_out, c_out, None) for j in range(layers)]
        c_prev = c_out
        if i < len(widths) - 1:
            parts.append(conv(1, c_out, c_out, 3))
    parts += [_vae_mid(1, widths[-1]), norm(widths[-1]), conv(1, widths[-1], 2 * latent, 3)]
    if config.get("use_quant_conv", True):
        parts.append(conv(1, 2 * latent, 2 * latent, 1))
    return total(parts).params


def vae_params(config: dict[str, Any]) -> int:
    """Every AutoencoderKL parameter (encoder and decoder)."""
    return vae_encoder_params(config) + vae_decoder(config, 1, 1).params
