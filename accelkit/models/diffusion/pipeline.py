"""What one text-to-image call costs, in closed form: parameters per component, and model FLOPs of the text
encoders, of one denoising step and of the VAE decode, per image — the figures ``plan`` uses and that the bench's
FlopCounterMode count of the same pipeline call equals (the tests check every preset).

Per image: text encoders (each over its padded prompt; with CFG also over the empty negative prompt, except SDXL,
whose empty negative is zeros) + steps × denoiser (twice per step with CFG: one call on a doubled batch) + one VAE
decode. FLUX.1-dev is guidance-distilled: one denoiser pass per step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accelkit.core.spec import Spec, spec_field
from accelkit.models.diffusion.arith import Count, total
from accelkit.models.diffusion.dit import flux, sd3
from accelkit.models.diffusion.spec import DiffusionSpec
from accelkit.models.diffusion.text import encoder_count
from accelkit.models.diffusion.unet import unet, vae_decoder, vae_params


@dataclass(frozen=True, slots=True, kw_only=True)
class Generation(Spec):
    """The shape of one generation call: image size, steps, guidance, images per call."""

    height: int = spec_field(1024, min=8, doc="Image height in pixels.")
    width: int = spec_field(1024, min=8, doc="Image width in pixels.")
    steps: int = spec_field(28, min=1, doc="Denoising steps.")
    guidance: float = spec_field(7.0, min=0.0, doc="Guidance scale (CFG above 1; FLUX: the embedded scale).")
    batch_size: int = spec_field(1, min=1, doc="Images per call (one prompt each).")


def default_generation(spec: DiffusionSpec, **overrides: Any) -> Generation:
    """The pipeline's defaults (resolution, steps, guidance), with ``overrides`` (None values ignored)."""
    base: dict[str, Any] = {"height": spec.resolution, "width": spec.resolution, "steps": spec.steps, "guidance": spec.guidance}
    base.update({k: v for k, v in overrides.items() if v is not None})
    return Generation.from_dict(base)


def check_generation(spec: DiffusionSpec, gen: Generation, names: dict[str, str] | None = None) -> str | None:
    """Why ``spec`` cannot generate at ``gen``'s size (None if it can), naming the sizes that work, or with its
    guidance (a guidance scale for a pipeline that has no use for one); ``names`` spells the height, width and
    guidance as the caller's user gave them (``{"height": "--resolution", …}``)."""
    multiple = spec.side_multiple
    names = names or {}
    for key, side in (("height", gen.height), ("width", gen.width)):
        flag = names.get(key, key)
        if side % multiple:
            why = f"the VAE's {spec.vae_scale_factor}×" + ("" if spec.family == "sdxl" else " and the latent patching")
            below = side // multiple * multiple
            sizes = f"{below} or {below + multiple}" if below else f"{multiple}"  # (below one multiple: only up)
            return f"{flag} {side} is not a multiple of {multiple} ({spec.name}: {why}); use {sizes}"
    if gen.guidance and not spec.takes_guidance:  # diffusers' FluxPipeline drops it without a word (a hunt)
        flag = names.get("guidance", "--guidance")  # every command spells it so
        return (f"{flag} {gen.guidance:g} has no effect on {spec.name}: its transformer has no guidance embedding "
                "(guidance_embeds false, as FLUX.1-schnell's) and FluxPipeline runs no CFG; leave out " + flag)
    if spec.family == "sd3":
        max_side = spec.denoiser.get("pos_embed_max_size", 96) * spec.side_multiple
        if max(gen.height, gen.width) > max_side:
            key = "height" if gen.height >= gen.width else "width"  # (the side past the table, named as given)
            return (f"{names.get(key, key)} {getattr(gen, key)} is past {spec.name}'s position embeddings, which hold "
                    f"images up to {max_side} pixels a side (pos_embed_max_size "
                    f"{spec.denoiser.get('pos_embed_max_size', 96)}); use {max_side} or less")
    return _steps_past_schedule(spec, gen.steps, names.get("steps", "--steps"))


def _leading_fits(train: int, steps: int) -> bool:
    """Whether "leading" spacing starts ``steps`` steps near the top of ``train`` training timesteps: it spaces them
    train // steps apart from timestep 0 and so leaves out the top train % steps timesteps (beyond one spacing);
    up to a tenth of the schedule is what the usual counts leave (30 steps: 10; the first step at 958)."""
    return steps <= train and train % steps <= train // 10


def _steps_past_schedule(spec: DiffusionSpec, steps: int, flag: str) -> str | None:
    """Why ``steps`` denoise nothing, or start far below the noisiest timestep, on ``spec``'s scheduler (None if they
    are fine): SDXL's EulerDiscreteScheduler with "leading" timestep spacing (sdxl-base's, as the published
    scheduler_config.json) spaces its timesteps num_train_timesteps // steps apart from timestep 0 — 0 past
    num_train_timesteps, so every step runs at the same last timestep and the image stays noise; and from 501 to
    999 steps (and e.g. 334, 400: wherever num_train_timesteps % steps is large) the steps stop short of the top:
    `--steps 600` runs timesteps 600 … 1 from pure noise, so the image comes out noisy — diffusers says nothing of
    either (hunts). "linspace" and "trailing" spacing and SD3's and FLUX's flow-matching scheduler (a linspace of
    sigmas) space any number of steps."""
    if spec.family != "sdxl" or spec.scheduler.get("timestep_spacing", "linspace") != "leading":
        return None
    train = spec.scheduler.get("num_train_timesteps", 1000)
    offset = spec.scheduler.get("steps_offset", 0)
    if not isinstance(train, int) or isinstance(train, bool) or train < 1 or not isinstance(offset, int):
        return None  # (a scheduler config no diffusers scheduler takes: its own error, where it is built)
    if steps > train:
        return (f"{flag} {steps} is more than {spec.name}'s scheduler can space: its \"leading\" timestep spacing puts "
                f"the steps num_train_timesteps // steps = {train} // {steps} = 0 timesteps apart, so every step runs "
                f"at timestep {offset} and the image stays noise; use {train} or less")
    if _leading_fits(train, steps):
        return None
    ratio = train // steps
    first = (steps - 1) * ratio + offset
    below = next(n for n in range(steps - 1, 0, -1) if _leading_fits(train, n))  # (every n up to train // 10 fits)
    above = next((n for n in range(steps + 1, train + 1) if _leading_fits(train, n)), None)
    use = f"{below} or {above}" if above is not None else f"{below}"
    return (f"{flag} {steps} stops short of the noisiest timesteps on {spec.name}: its \"leading\" timestep spacing "
            f"puts the steps {train} // {steps} = {ratio} apart from timestep {offset}, so the first runs at timestep "
            f"{first}, not near {train - 1}, and the image, started from pure noise, comes out noisy; use {use} (the first step "
            "then within the top tenth of the schedule)")


def text_tokens(spec: DiffusionSpec) -> int:
    """Prompt tokens the denoiser attends to: SD3 joins the CLIP tokens (77) and T5's — max_sequence_length of them
    even without its T5, whose tokens are then zeros (counting 77 alone put its FLOPs 3.2× low on tiny-sd3; found in
    review); FLUX takes T5's; SDXL's UNet cross-attends to the CLIP tokens (77)."""
    clip = max((e.max_length for e in spec.text_encoders if e.kind != "t5"), default=0)
    if spec.family == "sd3":
        return clip + spec.t5_tokens
    if spec.family == "flux":
        return spec.t5_tokens
    return clip


def denoiser_count(spec: DiffusionSpec, height: int, width: int) -> Count:
    """The denoiser's parameters and the FLOPs of one call on one image (no CFG doubling)."""
    lat_h, lat_w = height // spec.vae_scale_factor, width // spec.vae_scale_factor
    if spec.family == "sdxl":
        return unet(spec.denoiser, lat_h, lat_w, text_tokens(spec))
    if spec.family == "flux":  # 2×2 latent pixels packed into one token
        return flux(spec.denoiser, (lat_h // 2) * (lat_w // 2), text_tokens(spec))
    patch = spec.denoiser.get("patch_size", 2)
    return sd3(spec.denoiser, (lat_h // patch) * (lat_w // patch), text_tokens(spec))


@dataclass(frozen=True, slots=True, kw_only=True)
class PipelineCount:
    """Parameters per component and model FLOPs per image of one generation shape (each phase a :class:`Count`,
    its FLOPs split into Linear, convolution and attention)."""

    params: dict[str, int]  # text_encoders, denoiser, vae
    linear_params: dict[str, int]  # the same, nn.Linear weights only
    text: Count  # every text encoder call for one image's prompt (and negative prompt)
    step: Count  # one denoising step for one image (both CFG halves)
    denoiser_calls_per_step: int  # 2 with CFG (one call on a doubled batch), else 1
    steps: int
    vae: Count  # one decode of one image

    @property
    def text_flops(self) -> int:
        return self.text.flops

    @property
    def step_flops(self) -> int:
        return self.step.flops

    @property
    def vae_flops(self) -> int:
        return self.vae.flops

    @property
    def denoise_flops(self) -> int:
        return self.steps * self.step_flops

    @property
    def image_flops(self) -> int:
        """Model FLOPs per image: text encoders + steps × denoiser + VAE decode."""
        return self.text_flops + self.denoise_flops + self.vae_flops

    @property
    def total_params(self) -> int:
        return sum(self.params.values())


def pipeline_count(spec: DiffusionSpec, gen: Generation) -> PipelineCount:
    """:class:`PipelineCount` of ``spec`` generating at ``gen``."""
    encoders = total([encoder_count(e) for e in spec.text_encoders])
    denoiser = denoiser_count(spec, gen.height, gen.width)
    calls = 2 if spec.uses_cfg(gen.guidance) else 1
    factor = spec.vae_scale_factor
    vae = vae_decoder(spec.vae, gen.height // factor, gen.width // factor)
    # the VAE's Linear weights: its mid-block attention's four projections, once in the decoder, once in the encoder
    vae_linear = vae_decoder(spec.vae, 1, 1).linear_params
    return PipelineCount(
        params={"text_encoders": encoders.params, "denoiser": denoiser.params, "vae": vae_params(spec.vae)},
        linear_params={"text_encoders": encoders.linear_params, "denoiser": denoiser.linear_params,
                       "vae": 2 * vae_linear},
        text=encoders.calls(2 if spec.encodes_negative(gen.guidance) else 1), step=denoiser.calls(calls),
        denoiser_calls_per_step=calls, steps=gen.steps, vae=vae,
    )
