"""A text-to-image pipeline as one bench variant runs it, built in this order:

1. the pipeline — random weights from the seed (or a local directory's), every component in the variant's dtype
   (fp32, bf16, fp16; fp8 and tf32 start from bf16 and fp32), as ``from_pretrained(torch_dtype=…)`` runs it;
2. the denoiser through ``accelkit.recipes.apply`` in the recipes' own order — channels-last (the UNet), fp8 Linear
   layers (torchao's dynamic float8, on FP8 GPUs), torch.compile — with no autocast wrapper, the weights being in
   the dtype already; the text encoders and the VAE are left as built (the denoiser is where the FLOPs are);
3. on the meta device (the FLOP count), a scheduler that keeps its timesteps' arithmetic on the CPU.
"""

from __future__ import annotations

import functools
from typing import Any

from accelkit.bench.variants import Variant, single_device
from accelkit.models.diffusion.build import build_pipeline, denoiser_of, load_pipeline
from accelkit.models.diffusion.local import has_weights, is_pipeline_dir
from accelkit.models.diffusion.spec import DiffusionSpec
from accelkit.recipes import apply


def meta_scheduler(scheduler: Any) -> Any:
    """``scheduler``'s class, with ``set_timesteps`` computing on the CPU (its schedule, sigmas and the step index
    read data; the meta device has none) and moving only the timesteps to the pipeline's device; it then starts at
    index 0, as the FLUX and SDXL pipelines tell it themselves. A scheduler does no model FLOPs, so the count is the
    pipeline's. ``functools.wraps`` keeps the signature diffusers inspects for ``sigmas`` / ``timesteps``."""
    cls = type(scheduler)

    @functools.wraps(cls.set_timesteps)
    def set_timesteps(self: Any, *args: Any, device: Any = None, **kwargs: Any) -> None:
        cls.set_timesteps(self, *args, device="cpu", **kwargs)
        self.timesteps = self.timesteps.to(device)
        self.set_begin_index(0)

    meta_cls: Any = type(f"Meta{cls.__name__}", (cls,), {"set_timesteps": set_timesteps})
    return meta_cls.from_config(scheduler.config)


def build_variant(spec: DiffusionSpec, variant: Variant, device: str, *, seed: int, dtype: str,
                  model_dir: str | None = None, notes: list[str] | None = None) -> Any:
    """The pipeline of ``spec`` as ``variant`` runs it on ``device`` (module docstring)."""
    notes = notes if notes is not None else []
    if model_dir and is_pipeline_dir(model_dir) and has_weights(model_dir) and device != "meta":
        pipe = load_pipeline(spec, model_dir, dtype=dtype)
        if device != "cpu":  # (it loads there; diffusers' .to("cpu") of a fp16 pipeline warns that it cannot run)
            pipe = pipe.to(device)
        notes.append(f"weights from {model_dir}, in {dtype}")
    else:
        pipe = build_pipeline(spec, device=device, dtype=dtype, seed=seed)
        notes.append(f"random weights (seed {seed}), every component in {dtype}")
    if device == "meta":
        pipe.scheduler = meta_scheduler(pipe.scheduler)
    recipe = single_device(variant.recipe(training=False))
    if recipe.quantization or recipe.compile or recipe.channels_last:
        denoiser = apply(denoiser_of(pipe), recipe, device=device, training=False, fp8_scaling=variant.fp8_scaling,
                         notes=notes, without=("mixed-precision",))
        setattr(pipe, "unet" if spec.family == "sdxl" else "transformer", denoiser)
    return pipe
