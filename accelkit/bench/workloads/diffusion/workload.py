"""`diffusion`: text-to-image generation through diffusers' own pipelines — an MMDiT (SD3-medium), a flow
transformer (FLUX.1-dev) or a UNet (SDXL base) — with random weights at the real shapes or a tiny version, or a local
diffusers directory.

One measured step, ``generate``: one pipeline call (prompts → text encoders → ``steps`` denoiser calls → VAE decode →
images), so images/s is the whole pipeline's. Inside each call the phases are timed by hooks
(``phases.PhaseRecorder``) and, on the fp32 reference count, their FLOPs, so the result also says where the time goes
and the denoiser's own MFU. The variant's transforms reach the denoiser only (fp8 Linear layers, compile,
channels-last); the whole pipeline runs in the variant's dtype, as ``from_pretrained(torch_dtype=…)`` runs it.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from accelkit.bench.metrics import flop_counter
from accelkit.bench.variants import Variant
from accelkit.bench.workloads.base import (
    ACT_BYTES,
    EVAL_ROWS,
    MAX_SIZE,
    BenchWorkload,
    Prepared,
    Step,
    free_bytes,
    gb,
)
from accelkit.bench.workloads.diffusion.gate import image_gate
from accelkit.bench.workloads.diffusion.phases import DENOISER, TEXT, VAE, PhaseRecorder
from accelkit.core import UserError
from accelkit.core.spec import Spec, spec_field
from accelkit.models.diffusion import DiffusionSpec, Generation, default_generation, pipeline_count, resolve_diffusion
from accelkit.models.diffusion.build import denoiser_of, prompt
from accelkit.models.diffusion.pipeline import check_generation
from accelkit.models.diffusion.spec import ENCODER_SLOTS
from accelkit.plan.diffusion import estimate_variant

Attention = Literal["default", "flash", "efficient", "cudnn", "math"]
#: --arch × --size → preset
ARCHS = {("sd3", "tiny"): "tiny-sd3", ("sd3", "full"): "sd3-medium", ("flux", "tiny"): "tiny-flux",
         ("flux", "full"): "flux-dev", ("sdxl", "tiny"): "tiny-sdxl", ("sdxl", "full"): "sdxl-base"}
#: the pipeline dtype of each precision: fp8 runs a bf16 pipeline whose denoiser Linear layers are fp8
PIPELINE_DTYPE = {"fp32": "fp32", "tf32": "fp32", "bf16": "bf16", "fp16": "fp16", "fp8": "bf16"}
CUDA_ONLY_ATTENTION = ("efficient", "cudnn")
#: denoising steps of the call whose FLOPs are counted (each step's count is the same; the rest are multiplied out)
COUNTED_STEPS = 2
FORMULA = ("text encoders (prompt, and the empty negative with CFG) + steps × denoiser (two images' worth per step "
           "with CFG) + VAE decode, closed form (accelkit.models.diffusion.pipeline)")


@dataclass(frozen=True, slots=True, kw_only=True)
class DiffusionConfig(Spec):
    """Text-to-image generation (prompts → images) through a diffusers pipeline."""

    arch: Literal["sd3", "flux", "sdxl"] = spec_field(
        "sd3", doc="sd3 (MMDiT, SD3-medium), flux (flow transformer, FLUX.1-dev) or sdxl (UNet, SDXL base).")
    size: Literal["tiny", "full"] = spec_field(
        "full", doc="full: the architecture's real shapes with random weights; tiny: a miniature for tests and CPUs.")
    model: str | None = spec_field(
        None, doc="A text-to-image preset (`accelkit models list`) or a local diffusers pipeline directory (its "
                  "weights when it has them) instead of --arch/--size.")
    height: int | None = spec_field(None, min=8, max=MAX_SIZE, doc="Image height in pixels; None = the model's.")
    width: int | None = spec_field(None, min=8, max=MAX_SIZE, doc="Image width in pixels; None = the model's.")
    steps: int | None = spec_field(None, min=1, max=100_000, doc="Denoising steps; None = the model's (tiny: 4).")
    guidance: float | None = spec_field(
        None, min=0.0, max=1000.0, doc="Guidance scale (CFG above 1; FLUX: the embedded scale); None = the model's.")
    batch_size: int = spec_field(1, min=1, max=MAX_SIZE, doc="Images per call, one prompt each.")
    attention: tuple[Attention, ...] = spec_field(
        ("default",), doc="SDPA backends to run each variant with, comma list of default, flash, efficient, cudnn, "
                          "math (efficient and cudnn: CUDA only); each other than default is its own variant.")


class Diffusion(BenchWorkload):
    name = "diffusion"
    config_cls = DiffusionConfig
    task = "infer"
    summary = "text-to-image generation (SD3 MMDiT, FLUX, SDXL UNet through diffusers), images/s and J/image"
    output_is_logits = False

    def __init__(self, config: Spec):
        super().__init__(config)
        #: FLOPs of each phase per call, counted with the step's on the fp32 reference (the meta device, usually)
        #: and shared by every variant, as the step's own count is
        self.phase_flops: dict[str, float] = {}

    @functools.cached_property
    def model_spec(self) -> DiffusionSpec:
        c = self.config
        return resolve_diffusion(c.model or ARCHS[(c.arch, c.size)])

    @functools.cached_property
    def generation(self) -> Generation:
        c, spec = self.config, self.model_spec
        gen = default_generation(spec, height=c.height, width=c.width, steps=c.steps, guidance=c.guidance,
                                 batch_size=c.batch_size)
        why = check_generation(spec, gen, {"height": "--height", "width": "--width", "guidance": "--guidance"})
        if why:
            raise UserError(why)
        return gen

    @property
    def label(self) -> str:
        g = self.generation
        return (f"diffusion {self.model_spec.name} {g.width}x{g.height} {g.steps} steps guidance {g.guidance:g} "
                f"b{g.batch_size}")

    @property
    def latent_numel(self) -> int:
        """Values of one image's final latents (FLUX packs them 2×2 into tokens: the same count)."""
        spec, g = self.model_spec, self.generation
        f = spec.vae_scale_factor
        return int(spec.vae["latent_channels"]) * (g.height // f) * (g.width // f)

    # ---- what can run ----------------------------------------------------------------------------------------
    def variants(self, requested: list[Variant]) -> list[Variant]:
        """Each requested variant once per SDPA backend of ``--attention`` (default: as requested); a backend listed
        twice is one variant (``--attention math,math`` ran and printed two identical rows: found in review)."""
        out = []
        for v in requested:
            for backend in dict.fromkeys(self.config.attention):
                out.append(v if backend == "default" else
                           v.replace(settings={**v.settings, "attention": backend}, label=f"{v.name}+sdpa-{backend}"))
        return out

    def refusal(self, variant: Variant, device: str) -> str | None:
        precision = variant.effective_precision
        if precision == "int8":
            return ("int8 is not in the text-to-image matrix (no int8 recipe here is gated on image quality); use fp8 "
                    "on an FP8 GPU (SM89+, MI300-class), or bf16")
        if variant.channels_last and self.model_spec.family != "sdxl":
            return (f"channels_last is a layout for the UNet's convolutions; {self.model_spec.name} is a transformer "
                    "(its convolutions are the patch embedding and the VAE) — use --arch sdxl")
        backend = variant.settings.get("attention")
        if backend in CUDA_ONLY_ATTENTION and not device.startswith("cuda"):
            return f"SDPA's {backend} backend is a CUDA kernel; on a CPU use --attention flash or math"
        if variant.channels_last:  # the UNet is a CNN: the base class's check does not apply
            variant = variant.replace(channels_last=False)
        return super().refusal(variant, device)

    def check(self, device: str) -> None:
        """Refuse up front what cannot fit: the fp32 weights (the reference, and every component is built in fp32
        before its cast), beside one full-resolution VAE activation and the images — lower bounds, named with the
        flags that lower them."""
        spec, g = self.model_spec, self.generation
        weights = pipeline_count(spec, g).total_params * 4
        pixels = g.batch_size * g.height * g.width
        data = pixels * 3 * 4 + pixels * int(spec.vae["block_out_channels"][0]) * ACT_BYTES
        free, where = free_bytes(device)
        if weights * 6 > free * 5:  # 20% headroom, as check_fits; integers: a fuzzed size can exceed a float
            raise UserError(f"{spec.name} needs {gb(weights)} for fp32 weights alone and {where}; use --size tiny, "
                            "a smaller --model or a bigger device")
        if (weights + data) * 6 > free * 5:
            raise UserError(f"{spec.name} at --batch-size {g.batch_size} --height {g.height} --width {g.width} needs "
                            f"at least {gb(data)} for the images and the VAE's full-resolution activations (beside "
                            f"{gb(weights)} of fp32 weights) and {where}; lower --batch-size, --height or --width")

    # ---- the run ---------------------------------------------------------------------------------------------
    def build(self, variant: Variant, device: str, *, seed: int, notes: list[str]) -> Any:
        """The diffusers pipeline ``variant`` runs (``transforms.build_variant``)."""
        # transforms applies the recipes, which import torch at their top: only a run pays for that
        from accelkit.bench.workloads.diffusion.transforms import build_variant

        return build_variant(self.model_spec, variant, device, seed=seed, model_dir=self.config.model, notes=notes,
                             dtype=PIPELINE_DTYPE[variant.effective_precision])

    def prepare(self, variant: Variant, device: str, *, seed: int) -> Prepared:
        import torch

        spec, g = self.model_spec, self.generation
        notes: list[str] = []
        pipe = self.build(variant, device, seed=seed, notes=notes)
        recorder = phase_recorder(pipe, device)
        # SD3 and FLUX: T5's tokens, passed on every call — SD3 without its T5 feeds the MMDiT that many zeros
        extra = {"max_sequence_length": spec.t5_tokens} if spec.family != "sdxl" else {}
        generator_device = device if device.startswith("cuda") else "cpu"

        def generate(batch: int, steps: int = g.steps, **kwargs: Any) -> Any:
            # a fresh generator each call: every call starts from the same noise (a seeded run is repeatable)
            generator = torch.Generator(generator_device).manual_seed(seed)
            with math_mode(variant, device):
                return pipe([prompt(i) for i in range(batch)], height=g.height, width=g.width,
                            num_inference_steps=steps, guidance_scale=g.guidance, output_type="pt",
                            generator=generator, **extra, **kwargs).images

        def evaluate() -> torch.Tensor:
            """[final latents | decoded image] of the first rows, one row per image, fp32 on the CPU."""
            kept: dict[str, torch.Tensor] = {}

            def keep(pipe: Any, step: int, t: Any, tensors: dict[str, Any]) -> dict[str, Any]:
                kept["latents"] = tensors["latents"]
                return tensors

            images = generate(min(g.batch_size, EVAL_ROWS), callback_on_step_end=keep,
                              callback_on_step_end_tensor_inputs=["latents"])
            rows = images.shape[0]
            return torch.cat([kept["latents"].reshape(rows, -1).float(), images.reshape(rows, -1).float()], 1).cpu()

        def count() -> float:
            """The call's FLOPs, counted on a call of at most COUNTED_STEPS steps: every step runs the denoiser on
            the same shapes, so its count per step times --steps is the whole call's, exactly — counting every step
            on the meta device took ~0.3 s a step for tiny-sdxl (--steps 1001: minutes before the first timed call;
            found in a hunt)."""
            counted = min(g.steps, COUNTED_STEPS)
            total = recorder.count(lambda: generate(g.batch_size, counted), flop_counter())
            flops = dict(recorder.flops)
            if DENOISER in flops and counted < g.steps:
                rest = flops[DENOISER] / counted * (g.steps - counted)
                flops[DENOISER] += rest
                total += rest
            self.phase_flops = flops
            return total

        def phases(measured: int) -> list[dict[str, Any]]:
            rows = recorder.summary(measured=measured)
            for row in rows:
                row["flops"] = self.phase_flops.get(row["phase"])
            return rows

        counted = pipeline_count(spec, g)
        step = Step("generate", recorder.wrap(lambda: generate(g.batch_size)), g.batch_size, "images",
                    latency_name="generation call", flops_per_call=count, phases=phases,
                    analytic_flops_per_item=float(counted.image_flops), analytic_formula=FORMULA)
        notes.append(f"{spec.name}: {g.steps} steps, guidance {g.guidance:g}"
                     + (" (CFG: the denoiser runs a doubled batch)" if spec.uses_cfg(g.guidance) else "")
                     + f", {g.width}×{g.height}, {g.batch_size} image(s) per call")

        return Prepared(steps=[step], evaluate=evaluate, close=recorder.close, notes=notes)

    def output_gate(self, reference: Any, output: Any) -> Any:
        return image_gate(reference, output, self.latent_numel)

    def estimate(self, variant: Variant, device: str, catalog: str | None) -> tuple[Any, str | None]:
        return estimate_variant(self.model_spec, self.generation, variant.effective_precision, device, catalog)


def phase_recorder(pipe: Any, device: str) -> PhaseRecorder:
    """Hooks on the pipeline's text encoders, its denoiser and its VAE decode (post_quant_conv, if the VAE has one,
    through the decoder)."""
    recorder = PhaseRecorder(device)
    for slot in ENCODER_SLOTS:
        encoder = getattr(pipe, slot, None)
        if encoder is not None:
            recorder.add(TEXT, encoder)
    recorder.add(DENOISER, denoiser_of(pipe))
    vae = pipe.vae
    recorder.add(VAE, vae.post_quant_conv if getattr(vae, "post_quant_conv", None) is not None else vae.decoder,
                 end=vae.decoder)
    return recorder


@contextlib.contextmanager
def math_mode(variant: Variant, device: str) -> Iterator[None]:
    """What a generation call runs under: inference mode, the variant's SDPA backend, and on CUDA its TF32 setting
    (on for tf32, off otherwise: fp32 means fp32). The dtype is the pipeline's own (no autocast)."""
    import torch

    with contextlib.ExitStack() as stack:
        stack.enter_context(torch.inference_mode())
        backend = variant.settings.get("attention")
        if backend is not None:
            from torch.nn.attention import SDPBackend, sdpa_kernel

            kernel = {"flash": SDPBackend.FLASH_ATTENTION, "efficient": SDPBackend.EFFICIENT_ATTENTION,
                      "cudnn": SDPBackend.CUDNN_ATTENTION, "math": SDPBackend.MATH}[backend]
            stack.enter_context(sdpa_kernel([kernel]))
        if device.startswith("cuda"):
            from accelkit.recipes.precision import tf32_enabled  # it imports torch at its top: CUDA runs only

            stack.enter_context(tf32_enabled(variant.effective_precision == "tf32"))
        yield


