"""DiffusionSpec: a text-to-image pipeline as its components' configs — the diffusers denoiser (an MMDiT, a FLUX
transformer or a UNet), the VAE, the text encoders and the scheduler — in the same dictionaries the components'
``config.json`` files hold, so one spec builds the torch modules (``accelkit.models.diffusion.build``) and feeds the
closed-form counts (``accelkit.models.diffusion.pipeline``) without either copying the other.

Pure Python: ``models show`` and ``plan`` read it without torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from accelkit.core.spec import Spec, spec_field

#: sd3: an MMDiT (SD3Transformer2DModel, FlowMatchEuler, CFG); flux: a FLUX transformer (double- and single-stream
#: blocks, guidance-distilled: no CFG); sdxl: a UNet (UNet2DConditionModel, EulerDiscrete, CFG)
DiffusionFamily = Literal["sd3", "flux", "sdxl"]
TextEncoderKind = Literal["clip", "clip-projection", "t5"]

#: the diffusers class of each family's denoiser and pipeline
DENOISER_CLASS = {"sd3": "SD3Transformer2DModel", "flux": "FluxTransformer2DModel", "sdxl": "UNet2DConditionModel"}
PIPELINE_CLASS = {"sd3": "StableDiffusion3Pipeline", "flux": "FluxPipeline", "sdxl": "StableDiffusionXLPipeline"}
SCHEDULER_CLASS = {"sd3": "FlowMatchEulerDiscreteScheduler", "flux": "FlowMatchEulerDiscreteScheduler",
                   "sdxl": "EulerDiscreteScheduler"}
#: CLIP pads every prompt to its 77 positions
CLIP_TOKENS = 77
#: the pipeline attribute each text encoder slot fills, in order
ENCODER_SLOTS = ("text_encoder", "text_encoder_2", "text_encoder_3")


@dataclass(frozen=True, slots=True, kw_only=True)
class TextEncoder(Spec):
    """One text encoder of the pipeline: a transformers CLIP text model or T5 encoder, by its config."""

    kind: TextEncoderKind = spec_field(
        doc="clip (CLIPTextModel), clip-projection (CLIPTextModelWithProjection: a pooled projection) or t5 "
            "(T5EncoderModel).")
    config: dict[str, Any] = spec_field(doc="The transformers config (CLIPTextConfig / T5Config fields).")
    max_length: int = spec_field(min=1, doc="Tokens per prompt it encodes (CLIP pads to 77; T5 to the pipeline's "
                                            "max_sequence_length).")


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffusionSpec(Spec):
    """A text-to-image pipeline's architecture and its default generation settings."""

    name: str = spec_field(doc="Preset or directory name, e.g. 'sd3-medium'.")
    family: DiffusionFamily = spec_field(doc="sd3 (MMDiT), flux (FLUX transformer) or sdxl (UNet).")
    denoiser: dict[str, Any] = spec_field(doc="The denoiser's diffusers config (transformer/ or unet/ config.json).")
    vae: dict[str, Any] = spec_field(doc="The AutoencoderKL config (vae/config.json).")
    text_encoders: tuple[TextEncoder, ...] = spec_field(doc="The text encoders, in the pipeline's slot order.")
    scheduler: dict[str, Any] = spec_field(default_factory=dict, doc="The scheduler's config (scheduler/).")
    resolution: int = spec_field(1024, min=8, doc="Default image side in pixels.")
    steps: int = spec_field(28, min=1, doc="Default denoising steps (the pipeline's num_inference_steps).")
    guidance: float = spec_field(7.0, min=0.0, doc="Default guidance scale (CFG above 1; FLUX: the embedded scale).")
    force_zeros_for_empty_prompt: bool = spec_field(
        False, doc="SDXL: an empty negative prompt is zeros, not encoded (the pipeline's config).")
    max_sequence_length: int = spec_field(
        0, min=0, doc="SD3 without its T5 (text_encoder_3 null in model_index.json, diffusers' way to save its memory): "
                      "the pipeline's max_sequence_length, the zero T5 tokens it still feeds the MMDiT beside CLIP's "
                      "77. 0 otherwise (a T5 encoder's max_length gives them).")
    source: str = spec_field("", doc="Where the configs come from.")

    def validate(self) -> None:
        if not self.text_encoders:
            raise ValueError("text_encoders needs at least one encoder")
        if len(self.text_encoders) > len(ENCODER_SLOTS):
            raise ValueError(f"text_encoders has {len(self.text_encoders)} encoders; a pipeline has at most "
                             f"{len(ENCODER_SLOTS)}")
        has_t5 = any(e.kind == "t5" for e in self.text_encoders)
        if has_t5 and self.max_sequence_length:
            raise ValueError("max_sequence_length is for an SD3 pipeline without its T5; give the T5 encoder's "
                             "tokens as its max_length")
        if self.family == "sd3" and not has_t5 and not self.max_sequence_length:
            raise ValueError("an SD3 pipeline without its T5 still feeds the MMDiT max_sequence_length zero T5 tokens "
                             "(diffusers' default 256); set max_sequence_length")
        if self.family == "flux" and not has_t5:
            raise ValueError("FLUX's pipeline needs its T5 encoder (text_encoder_2)")
        if self.family == "sd3" and self.denoiser.get("dual_attention_layers"):
            raise ValueError("dual_attention_layers (SD3.5's MMDiT-X) is not modelled; give an SD3-medium-style "
                             "transformer config")

    @property
    def vae_scale_factor(self) -> int:
        """Pixels per latent pixel: 2 ** (VAE blocks - 1), as the pipelines compute it."""
        return 1 << (len(self.vae.get("block_out_channels", (128, 256, 512, 512))) - 1)

    @property
    def t5_tokens(self) -> int:
        """T5 tokens per prompt, the pipeline's max_sequence_length: the T5 encoder's max_length, or
        ``max_sequence_length`` where SD3 runs without its T5; 0 without T5 (SDXL)."""
        return next((e.max_length for e in self.text_encoders if e.kind == "t5"), self.max_sequence_length)

    @property
    def side_multiple(self) -> int:
        """Image sides must be multiples of this: the VAE's factor times the latent patch (FLUX packs 2×2; SD3
        patchifies by patch_size). The SDXL UNet takes any latent size — it halves odd sides rounding up and
        up-samples back to each skip's size, as StableDiffusionXLPipeline checks only for multiples of 8 (an
        earlier 8·2^(levels−1) refused sizes it runs, 1080 among them; found in review)."""
        if self.family == "flux":
            return self.vae_scale_factor * 2
        if self.family == "sd3":
            return self.vae_scale_factor * int(self.denoiser.get("patch_size", 2))
        return self.vae_scale_factor

    @property
    def takes_guidance(self) -> bool:
        """Whether a guidance scale changes the call: CFG (SD3, SDXL) or FLUX's guidance embedding; a FLUX transformer
        without ``guidance_embeds`` (FLUX.1-schnell, timestep-distilled) has neither — FluxPipeline ignores the
        scale (diffusers' FluxTransformer2DModel defaults the key to False)."""
        return self.family != "flux" or bool(self.denoiser.get("guidance_embeds", False))

    def uses_cfg(self, guidance: float) -> bool:
        """Whether the denoiser runs twice per step (classifier-free guidance: a conditional and an unconditional
        batch in one call). FLUX.1-dev is guidance-distilled: the scale is an input, one pass per step."""
        return self.family != "flux" and guidance > 1.0

    def encodes_negative(self, guidance: float) -> bool:
        """Whether the text encoders also run on the (empty) negative prompt: with CFG, unless SDXL's
        force_zeros_for_empty_prompt makes the unconditional embeddings zeros."""
        return self.uses_cfg(guidance) and not self.force_zeros_for_empty_prompt
