"""Text-to-image pipelines: their architecture (DiffusionSpec: the components' diffusers/transformers configs), presets
of SD3-medium, FLUX.1-dev and SDXL-base (and tiny versions), a diffusers directory reader, closed-form parameter and
FLOP counts that equal FlopCounterMode's, and — importing torch and diffusers only when called — the builders."""

from accelkit.models.diffusion.pipeline import Generation, PipelineCount, default_generation, pipeline_count
from accelkit.models.diffusion.presets import (
    DIFFUSION_PRESETS,
    get_diffusion_preset,
    is_diffusion_model,
    resolve_diffusion,
)
from accelkit.models.diffusion.spec import DiffusionSpec, TextEncoder

__all__ = [
    "DIFFUSION_PRESETS", "DiffusionSpec", "Generation", "PipelineCount", "TextEncoder", "default_generation",
    "get_diffusion_preset", "is_diffusion_model", "pipeline_count", "resolve_diffusion",
]
