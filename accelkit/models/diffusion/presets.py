"""Text-to-image presets: the three architectures people run, with the dimensions of their published diffusers
configs (random weights when built: nothing is downloaded), and tiny versions of each that build in a second for
tests and CPUs. Named functions derived from each other; ``DIFFUSION_PRESETS`` maps the CLI names to them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelkit.core import UnknownNameError
from accelkit.models.diffusion.local import is_pipeline_dir, load_dir
from accelkit.models.diffusion.spec import CLIP_TOKENS, DiffusionSpec, TextEncoder

HF = "https://huggingface.co/"
SD3_SOURCE = HF + "stabilityai/stable-diffusion-3-medium-diffusers (transformer/, vae/, text_encoder*/ config.json)"
FLUX_SOURCE = HF + "black-forest-labs/FLUX.1-dev (transformer/, vae/, text_encoder*/ config.json)"
SDXL_SOURCE = HF + "stabilityai/stable-diffusion-xl-base-1.0 (unet/, vae/, text_encoder*/ config.json)"
TINY_SOURCE = "accelkit tiny preset (random weights, for tests and CPUs)"

# ---- text encoders -------------------------------------------------------------------------------------------
def clip_l(*, projection: bool) -> TextEncoder:
    """OpenAI CLIP ViT-L/14's text tower: 12 layers, h 768, 12 heads, quick-GELU MLP 3072, vocab 49408."""
    config = {"hidden_size": 768, "intermediate_size": 3072, "num_attention_heads": 12, "num_hidden_layers": 12,
              "max_position_embeddings": CLIP_TOKENS, "vocab_size": 49408, "hidden_act": "quick_gelu",
              "projection_dim": 768, "layer_norm_eps": 1e-5, "bos_token_id": 0, "eos_token_id": 2, "pad_token_id": 1}
    return TextEncoder(kind="clip-projection" if projection else "clip", config=config, max_length=CLIP_TOKENS)


def clip_g() -> TextEncoder:
    """OpenCLIP ViT-bigG/14's text tower with its projection: 32 layers, h 1280, 20 heads, GELU MLP 5120."""
    config = {**clip_l(projection=True).config, "hidden_size": 1280, "intermediate_size": 5120,
              "num_attention_heads": 20, "num_hidden_layers": 32, "hidden_act": "gelu", "projection_dim": 1280}
    return TextEncoder(kind="clip-projection", config=config, max_length=CLIP_TOKENS)


def t5_xxl(tokens: int) -> TextEncoder:
    """T5 v1.1 XXL's encoder: 24 layers, d_model 4096, 64 heads of 64, gated-GELU FFN 10240, vocab 32128."""
    config = {"d_model": 4096, "d_ff": 10240, "d_kv": 64, "num_heads": 64, "num_layers": 24, "vocab_size": 32128,
              "feed_forward_proj": "gated-gelu", "relative_attention_num_buckets": 32,
              "relative_attention_max_distance": 128, "layer_norm_epsilon": 1e-6}
    return TextEncoder(kind="t5", config=config, max_length=tokens)


def _vae(**overrides: Any) -> dict[str, Any]:
    """The AutoencoderKL of SD3 and FLUX: 4 blocks 128-256-512-512, 16 latent channels (8× down)."""
    return {"in_channels": 3, "out_channels": 3, "down_block_types": ["DownEncoderBlock2D"] * 4,
            "up_block_types": ["UpDecoderBlock2D"] * 4, "block_out_channels": [128, 256, 512, 512],
            "layers_per_block": 2, "act_fn": "silu", "latent_channels": 16, "norm_num_groups": 32,
            "sample_size": 1024, "force_upcast": True, "use_quant_conv": False, "use_post_quant_conv": False,
            **overrides}


# ---- the three architectures -----------------------------------------------------------------------------------
def sd3_medium() -> DiffusionSpec:
    """Stable Diffusion 3 Medium: a 2B MMDiT (24 joint blocks, 24 heads of 64, 2×2 patches of 16 latent channels)
    over CLIP-L, CLIP-G and T5-XXL (256 tokens); 28 flow-matching steps, CFG 7.0, 1024²."""
    return DiffusionSpec(
        name="sd3-medium", family="sd3",
        denoiser={"sample_size": 128, "patch_size": 2, "in_channels": 16, "num_layers": 24, "attention_head_dim": 64,
                  "num_attention_heads": 24, "joint_attention_dim": 4096, "caption_projection_dim": 1536,
                  "pooled_projection_dim": 2048, "out_channels": 16, "pos_embed_max_size": 192},
        vae=_vae(scaling_factor=1.5305, shift_factor=0.0609),
        text_encoders=(clip_l(projection=True), clip_g(), t5_xxl(256)),
        scheduler={"num_train_timesteps": 1000, "shift": 3.0},
        resolution=1024, steps=28, guidance=7.0, source=SD3_SOURCE,
    )


def flux_dev() -> DiffusionSpec:
    """FLUX.1-dev: a 12B flow transformer (19 double-stream and 38 single-stream blocks, 24 heads of 128, 2×2-packed
    latents) over CLIP-L and T5-XXL (512 tokens); guidance-distilled (one pass per step), 28 steps at 3.5, 1024²."""
    return DiffusionSpec(
        name="flux-dev", family="flux",
        denoiser={"patch_size": 1, "in_channels": 64, "num_layers": 19, "num_single_layers": 38,
                  "attention_head_dim": 128, "num_attention_heads": 24, "joint_attention_dim": 4096,
                  "pooled_projection_dim": 768, "guidance_embeds": True, "axes_dims_rope": [16, 56, 56]},
        vae=_vae(scaling_factor=0.3611, shift_factor=0.1159),
        text_encoders=(clip_l(projection=False), t5_xxl(512)),
        scheduler={"num_train_timesteps": 1000, "shift": 3.0, "use_dynamic_shifting": True, "base_shift": 0.5,
                   "max_shift": 1.15, "base_image_seq_len": 256, "max_image_seq_len": 4096},
        resolution=1024, steps=28, guidance=3.5, source=FLUX_SOURCE,
    )


def sdxl_base() -> DiffusionSpec:
    """Stable Diffusion XL base 1.0: a 2.6B UNet (320-640-1280 channels, 1/2/10 transformer layers) over CLIP-L and
    CLIP-G; 50 Euler steps, CFG 5.0, 1024² (MLPerf Inference's text-to-image model)."""
    return DiffusionSpec(
        name="sdxl-base", family="sdxl",
        denoiser={"sample_size": 128, "in_channels": 4, "out_channels": 4, "layers_per_block": 2,
                  "block_out_channels": [320, 640, 1280],
                  "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D", "CrossAttnDownBlock2D"],
                  "up_block_types": ["CrossAttnUpBlock2D", "CrossAttnUpBlock2D", "UpBlock2D"],
                  "transformer_layers_per_block": [1, 2, 10], "attention_head_dim": [5, 10, 20],
                  "cross_attention_dim": 2048, "use_linear_projection": True, "norm_num_groups": 32,
                  "addition_embed_type": "text_time", "addition_time_embed_dim": 256,
                  "projection_class_embeddings_input_dim": 2816},
        vae=_vae(latent_channels=4, scaling_factor=0.13025, use_quant_conv=True, use_post_quant_conv=True),
        text_encoders=(clip_l(projection=False), clip_g()),
        scheduler={"num_train_timesteps": 1000, "beta_start": 0.00085, "beta_end": 0.012,
                   "beta_schedule": "scaled_linear", "prediction_type": "epsilon", "steps_offset": 1,
                   "timestep_spacing": "leading"},
        resolution=1024, steps=50, guidance=5.0, force_zeros_for_empty_prompt=True, source=SDXL_SOURCE,
    )


# ---- tiny versions: the same classes and structure, widths in the tens ----------------------------------------
TINY_VOCAB = 512


def _tiny_clip(kind: str) -> TextEncoder:
    config = {**clip_l(projection=False).config, "hidden_size": 32, "intermediate_size": 64, "num_attention_heads": 2,
              "num_hidden_layers": 2, "projection_dim": 32, "vocab_size": TINY_VOCAB}
    return TextEncoder(kind=kind, config=config, max_length=CLIP_TOKENS)  # type: ignore[arg-type]  # a TextEncoderKind


def _tiny_t5(tokens: int) -> TextEncoder:
    config = {**t5_xxl(tokens).config, "d_model": 64, "d_ff": 128, "d_kv": 16, "num_heads": 4, "num_layers": 2,
              "vocab_size": TINY_VOCAB}
    return TextEncoder(kind="t5", config=config, max_length=tokens)


def _tiny_vae(latent_channels: int, **overrides: Any) -> dict[str, Any]:
    """Four blocks as the real VAE (8× down), 4-8-16-16 channels, one resnet per block."""
    return _vae(block_out_channels=[4, 8, 16, 16], layers_per_block=1, norm_num_groups=4,
                latent_channels=latent_channels, sample_size=128, **overrides)


def tiny_sd3() -> DiffusionSpec:
    """sd3-medium's structure: 2 joint blocks of 4 heads × 16, CLIP ×2 (h 32) and T5 (d 64, 32 tokens); 128²."""
    spec = sd3_medium()
    return spec.replace(
        name="tiny-sd3",
        denoiser={**spec.denoiser, "sample_size": 16, "num_layers": 2, "attention_head_dim": 16,
                  "num_attention_heads": 4, "joint_attention_dim": 64, "caption_projection_dim": 64,
                  "pooled_projection_dim": 64, "pos_embed_max_size": 32},
        vae=_tiny_vae(16, scaling_factor=1.5305, shift_factor=0.0609),
        text_encoders=(_tiny_clip("clip-projection"), _tiny_clip("clip-projection"), _tiny_t5(32)),
        resolution=128, steps=4, source=TINY_SOURCE,
    )


def tiny_flux() -> DiffusionSpec:
    """flux-dev's structure: 1 double- and 2 single-stream blocks of 4 heads × 16, CLIP (h 32), T5 (32 tokens)."""
    spec = flux_dev()
    return spec.replace(
        name="tiny-flux",
        denoiser={**spec.denoiser, "num_layers": 1, "num_single_layers": 2, "attention_head_dim": 16,
                  "num_attention_heads": 4, "joint_attention_dim": 64, "pooled_projection_dim": 32,
                  "axes_dims_rope": [4, 6, 6]},
        vae=_tiny_vae(16, scaling_factor=0.3611, shift_factor=0.1159),
        text_encoders=(_tiny_clip("clip"), _tiny_t5(32)),
        resolution=128, steps=4, source=TINY_SOURCE,
    )


def tiny_sdxl() -> DiffusionSpec:
    """sdxl-base's structure: 2 levels (16, 32 channels; 0 and 2 transformer layers), CLIP ×2 (h 32)."""
    spec = sdxl_base()
    return spec.replace(
        name="tiny-sdxl",
        denoiser={**spec.denoiser, "sample_size": 16, "layers_per_block": 1, "block_out_channels": [16, 32],
                  "down_block_types": ["DownBlock2D", "CrossAttnDownBlock2D"],
                  "up_block_types": ["CrossAttnUpBlock2D", "UpBlock2D"], "transformer_layers_per_block": [1, 2],
                  "attention_head_dim": [2, 4], "cross_attention_dim": 64, "norm_num_groups": 4,
                  "addition_time_embed_dim": 8, "projection_class_embeddings_input_dim": 6 * 8 + 32},
        vae=_tiny_vae(4, scaling_factor=0.13025, use_quant_conv=True, use_post_quant_conv=True),
        text_encoders=(_tiny_clip("clip"), _tiny_clip("clip-projection")),
        resolution=128, steps=4, source=TINY_SOURCE,
    )


DIFFUSION_PRESETS: dict[str, Callable[[], DiffusionSpec]] = {
    "sd3-medium": sd3_medium, "flux-dev": flux_dev, "sdxl-base": sdxl_base,
    "tiny-sd3": tiny_sd3, "tiny-flux": tiny_flux, "tiny-sdxl": tiny_sdxl,
}


def get_diffusion_preset(name: str) -> DiffusionSpec:
    """A text-to-image preset by name; unknown names suggest the closest."""
    if name not in DIFFUSION_PRESETS:
        raise UnknownNameError("text-to-image model", name, DIFFUSION_PRESETS)
    return DIFFUSION_PRESETS[name]()


def resolve_diffusion(name_or_path: str) -> DiffusionSpec:
    """A text-to-image preset name, or a local diffusers pipeline directory (model_index.json)."""
    if name_or_path not in DIFFUSION_PRESETS and is_pipeline_dir(name_or_path):
        return load_dir(name_or_path, get_diffusion_preset)
    return get_diffusion_preset(name_or_path)


def is_diffusion_model(name_or_path: str) -> bool:
    """Whether ``name_or_path`` names a text-to-image preset or a diffusers pipeline directory."""
    return name_or_path in DIFFUSION_PRESETS or is_pipeline_dir(name_or_path)
