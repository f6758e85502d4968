"""Planning a text-to-image pipeline on one device: memory, model FLOPs per image and per denoising step, time per
image, images/s and joules per image — and the same for several devices (``--compare``). Pure Python: the FLOPs are
the closed-form counts of ``accelkit.models.diffusion`` (equal to the bench's FlopCounterMode count of the same
pipeline call), the efficiencies the planner's priors or this machine's calibration (``plan.calibrate``).

Time model (each phase a roofline of its own): a phase's time is the larger of its compute time — Linear FLOPs at
the matmul dtype's dense peak × compute efficiency, convolution FLOPs at the pipeline dtype's (implicit-GEMM
kernels, ASSUMED the GEMM efficiency), attention FLOPs at the fused-attention efficiency, all × the sustained
tensor-core factor — and its weight-read time (every weight read once per call at HBM bandwidth × memory
efficiency). A call is the text encoders, ``steps`` denoiser calls (one on a doubled batch with CFG) and the VAE
decode. Host overhead (Python, kernel launches, the scheduler's update) is not modelled: the time is the device's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from accelkit.core import DeviceSpec, Estimate, UserError
from accelkit.core.serving_memory import weight_bytes_per_param
from accelkit.core.spec import Spec, spec_field
from accelkit.models.diffusion import DiffusionSpec, Generation, PipelineCount, pipeline_count
from accelkit.models.diffusion.arith import Count
from accelkit.models.diffusion.pipeline import check_generation, text_tokens
from accelkit.models.diffusion.spec import PIPELINE_CLASS
from accelkit.plan.calibrate import efficiency, missing_cpu_peak, resolve_hardware
from accelkit.plan.energy import energy_j
from accelkit.plan.fitted import FIT_SOURCE, sustained_tensor
from accelkit.plan.options import PlanOptions
from accelkit.plan.priors import Efficiency, family
from accelkit.plan.recommend import drop_from_compare

#: the dtype every component but the fp8 Linear layers computes in, per precision
PIPELINE_DTYPE = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16", "fp8": "bf16"}
#: values live at once in one transformer block per token (residual, its norm, q, k, v, the attention output, the
#: 4×-wide MLP intermediate and its activation): ASSUMED, from the block's structure
BLOCK_VALUES_PER_WIDTH = 10
PHASES = ("text_encoders", "denoiser", "vae_decode")


@dataclass(frozen=True, slots=True, kw_only=True)
class ImageRequest(Spec):
    """What `accelkit plan` takes for a text-to-image model beyond the hardware and --batch (images per call)."""

    resolution: int | None = spec_field(None, min=8, max=1 << 16, doc="Text-to-image: square image side in pixels; "
                                                                      "default the model's.")
    height: int | None = spec_field(None, min=8, max=1 << 16, doc="Text-to-image: image height (overrides "
                                                                  "--resolution).")
    width: int | None = spec_field(None, min=8, max=1 << 16, doc="Text-to-image: image width (overrides --resolution).")
    steps: int | None = spec_field(None, min=1, max=100_000, doc="Text-to-image: denoising steps; default the "
                                                                 "model's.")
    guidance: float | None = spec_field(None, min=0.0, max=1000.0, doc="Text-to-image: guidance scale (CFG above 1); "
                                                                       "default the model's.")


def vae_upcast(spec: DiffusionSpec, precision: str) -> bool:
    """Whether the pipeline decodes in fp32 a VAE built in fp16: SDXL's does (``needs_upcasting``: a fp16 VAE whose
    config sets force_upcast is moved to fp32 for the decode, diffusers 0.42); SD3's and FLUX's decode in fp16,
    though their VAE configs set force_upcast too."""
    return precision == "fp16" and spec.family == "sdxl" and bool(spec.vae.get("force_upcast"))


def _weights(spec: DiffusionSpec, count: PipelineCount, precision: str) -> dict[str, float]:
    """Bytes of each component's weights: the pipeline dtype; fp8: the denoiser's Linear weights as torchao's
    fp8-dynamic stores them; an upcast VAE (``vae_upcast``): fp32, as it is held while it decodes."""
    size = weight_bytes_per_param(PIPELINE_DTYPE[precision])
    out = {k: float(v * size) for k, v in count.params.items()}
    if vae_upcast(spec, precision):
        out["vae"] = float(count.params["vae"] * weight_bytes_per_param("fp32"))
    if precision == "fp8":
        linear = count.linear_params["denoiser"]
        out["denoiser"] = float((count.params["denoiser"] - linear) * size + linear * weight_bytes_per_param(
            "fp8-dynamic"))
    return out


def _activations(spec: DiffusionSpec, gen: Generation, precision: str) -> dict[str, float]:
    """The largest working set of each phase, bytes (ASSUMED shapes, see ``assumptions``)."""
    e = weight_bytes_per_param(PIPELINE_DTYPE[precision])  # an activation value's bytes
    batch = gen.batch_size * (2 if spec.uses_cfg(gen.guidance) else 1)
    f = spec.vae_scale_factor
    lat = (gen.height // f) * (gen.width // f)
    d = spec.denoiser
    if spec.family == "sdxl":
        widths = list(d["block_out_channels"])
        den = max(lat // 4**i * w for i, w in enumerate(widths)) * BLOCK_VALUES_PER_WIDTH
        den += sum(lat // 4**i * w for i, w in enumerate(widths)) * (d.get("layers_per_block", 2) + 1)  # the skips
    else:
        tokens = lat // 4 + text_tokens(spec)  # 2×2 patches (SD3) or packed latents (FLUX)
        den = tokens * d["num_attention_heads"] * d["attention_head_dim"] * BLOCK_VALUES_PER_WIDTH
    text = max((e_.max_length * e_.config.get("d_model", e_.config.get("hidden_size", 0)) for e_ in
                spec.text_encoders), default=0) * BLOCK_VALUES_PER_WIDTH
    widths = list(spec.vae["block_out_channels"])
    # only SDXL's pipeline upcasts a fp16 VAE (``vae_upcast``); 4 bytes for SD3's and FLUX's added 1.5 GiB to
    # sd3-medium's fp16 plan (found in review)
    vae_e = 4 if vae_upcast(spec, precision) else e
    vae = gen.height * gen.width * 2 * (widths[0] + widths[min(1, len(widths) - 1)]) * gen.batch_size * vae_e
    return {"text_encoders": float(text * gen.batch_size * 2 * e), "denoiser": float(den * batch * e),
            "vae_decode": float(vae)}


def _peaks(device: DeviceSpec, precision: str) -> tuple[float, float]:
    """(the denoiser Linear layers' peak, every other kernel's peak), dense FLOP/s."""
    main = PIPELINE_DTYPE[precision]
    lin, rest = device.peak("fp8" if precision == "fp8" else main), device.peak(main)
    for dtype, peak in (("fp8" if precision == "fp8" else main, lin), (main, rest)):
        if peak is None:
            if device.vendor == "cpu":
                raise UserError(missing_cpu_peak(device, dtype))
            raise UserError(f"{device.name} has no {dtype} peak in the catalog (it has: "
                            f"{', '.join(device.peak_flops) or 'none'}); choose another --precision")
    return lin, rest  # type: ignore[return-value]


def _phase_time(count: Count, calls: int, weight_bytes: float, rates: tuple[float, float, float],
                bandwidth: float) -> tuple[float, str]:
    """(seconds, bottleneck) of one call of a phase doing ``calls`` images' worth of work; ``rates``: the achieved
    FLOP/s of its Linear layers, its convolutions and its attention core; ``bandwidth``: achieved bytes/s."""
    linear, conv, attn = rates
    compute = calls * (count.linear_flops / linear + count.conv_flops / conv + count.attention_flops / attn)
    memory = weight_bytes / bandwidth
    return (compute, "compute") if compute >= memory else (memory, "memory (weights)")


def plan_image(spec: DiffusionSpec, gen: Generation, device: DeviceSpec, *, precision: str = "bf16",
               options: PlanOptions | None = None, num_devices: int = 1) -> dict[str, Any]:
    """The plan document of ``spec`` generating at ``gen`` on ``num_devices`` × ``device`` (one pipeline replica per
    device, each generating its own batch)."""
    options = options or PlanOptions()
    if why := check_generation(spec, gen):
        raise UserError(why)
    if precision not in PIPELINE_DTYPE:
        raise UserError(f"--precision {precision} is not a text-to-image precision; use one of "
                        f"{', '.join(PIPELINE_DTYPE)}")
    count = pipeline_count(spec, gen)
    lin_peak, peak = _peaks(device, precision)
    eff = efficiency(device, PIPELINE_DTYPE[precision], use_calibration=options.use_calibration)
    lin_eff = efficiency(device, "fp8", use_calibration=options.use_calibration) if precision == "fp8" else eff
    sustained, sustained_source = (1.0, "a CPU's peak is its measured matmul") if device.vendor == "cpu" \
        else sustained_tensor(family(device))
    weights, acts = _weights(spec, count, precision), _activations(spec, gen, precision)
    bw = device.memory_bandwidth_bytes_per_s * eff.memory
    b = gen.batch_size
    gemm, attn = peak * eff.compute * sustained, peak * eff.attention * sustained
    # the denoiser's Linear layers at their own dtype's peak and efficiency (fp8: its MAMF figure)
    den_linear = lin_peak * lin_eff.compute * sustained
    text_s, text_by = _phase_time(count.text, b, weights["text_encoders"], (gemm, gemm, attn), bw)
    step_s, step_by = _phase_time(count.step, b, weights["denoiser"], (den_linear, gemm, attn), bw)
    if vae_upcast(spec, precision):
        # SDXL decodes a fp16 VAE in fp32: the fp32 peak and efficiencies, as an fp32 plan's decode (the 16-bit
        # peak put the decode 16× fast on an H100; the bench runs fp32 with TF32 off)
        peak32 = _peaks(device, "fp32")[1]
        eff32 = efficiency(device, "fp32", use_calibration=options.use_calibration)
        vae_rates = (peak32 * eff32.compute * sustained,) * 2 + (peak32 * eff32.attention * sustained,)
        vae_bw = device.memory_bandwidth_bytes_per_s * eff32.memory
    else:
        vae_rates, vae_bw = (gemm, gemm, attn), bw
    vae_s, vae_by = _phase_time(count.vae, b, weights["vae"], vae_rates, vae_bw)
    call_s = text_s + gen.steps * step_s + vae_s
    breakdown = {"text_encoders": text_s, "denoiser": gen.steps * step_s, "vae_decode": vae_s}
    bound = {"text_encoders": text_by, "denoiser": step_by, "vae_decode": vae_by}
    slowest = max(breakdown, key=lambda k: breakdown[k])
    memory = {"weights": sum(weights.values()), "activations": max(acts.values()),
              "overhead": float(options.overhead_bytes)}
    memory["total"] = sum(memory.values())
    image_flops = count.image_flops
    energy = energy_j(device, num_devices=1, seconds=call_s / b, activity_factor=options.activity_factor)
    doc: dict[str, Any] = {
        "model": {"name": spec.name, "family": spec.family, "params": count.total_params,
                  "params_by_component": dict(count.params)},
        "task": "infer", "kind": "text-to-image",
        "hardware": {"name": device.name, "num_devices": num_devices},
        "generation": {**gen.to_dict(), "cfg": spec.uses_cfg(gen.guidance)},
        "precision": precision,
        "flops_per_image": image_flops, "flops_per_step": count.step_flops,
        "flops_per_image_by_phase": {"text_encoders": count.text_flops, "denoiser": count.denoise_flops,
                                     "vae_decode": count.vae_flops},
        # what an fp8 recipe of the denoiser's Linear layers reaches, and what it leaves in 16 bits
        "denoiser_flops_per_image_by_kind": {"linear": gen.steps * count.step.linear_flops,
                                             "convolution": gen.steps * count.step.conv_flops,
                                             "attention": gen.steps * count.step.attention_flops},
        "memory_per_device_bytes": {k: round(v) for k, v in memory.items()},
        "weights_by_component_bytes": {k: round(v) for k, v in weights.items()},
        "activations_by_phase_bytes": {k: round(v) for k, v in acts.items()},
        "memory_capacity_bytes": device.memory_bytes,
        "fits": memory["total"] <= device.memory_bytes,
        "generate_time_s": call_s, "time_per_image_s": call_s / b, "step_time_s": step_s,
        "time_breakdown_s": breakdown, "bottleneck_by_phase": bound,
        "bottleneck": f"{slowest.replace('_', ' ')}: {bound[slowest]}",
        "images_per_s": num_devices * b / call_s, "images_per_s_per_device": b / call_s,
        "mfu": image_flops * b / call_s / lin_peak,  # the variant's matmul dtype's peak, as the bench divides by
        "energy_j_per_image": energy,
        "assumptions": _assumptions(spec, gen, device, precision, eff, lin_eff, sustained, sustained_source, options),
        "warnings": [] if memory["total"] <= device.memory_bytes else [
            f"{spec.name} needs about {memory['total'] / 1e9:.1f} GB per device and {device.name} has "
            f"{device.memory_bytes / 1e9:.1f} GB: " + _fit_advice(gen, precision)],
    }
    return doc


def _fit_advice(gen: Generation, precision: str) -> str:
    """What would shrink a plan that does not fit: only the levers it has (--batch 1 cannot be lowered; found in
    review)."""
    levers = (["lower --batch"] if gen.batch_size > 1 else []) + (
        ["a 16-bit --precision (bf16)"] if precision in ("fp32", "tf32") else []) + [
        "a lower resolution", "offload the text encoders"]
    return ", ".join(levers[:-1]) + " or " + levers[-1]


def _assumptions(spec: DiffusionSpec, gen: Generation, device: DeviceSpec, precision: str, eff: Efficiency,
                 lin_eff: Efficiency, sustained: float, sustained_source: str, options: PlanOptions) -> list[str]:
    main = PIPELINE_DTYPE[precision]
    out = [
        f"model: {spec.name} ({spec.source}); FLOPs in closed form from its configs "
        "(accelkit.models.diffusion), equal to FlopCounterMode's count of the same diffusers pipeline call",
        f"peak: {device.name} dense {main} {device.peak(main) / 1e12:g} TFLOP/s"  # type: ignore[operator]
        + (f", fp8 {device.peak('fp8') / 1e12:g} TFLOP/s for the denoiser's Linear layers"  # type: ignore[operator]
           if precision == "fp8" else "")
        + f", memory {device.memory_bytes / 1e9:g} GB, bandwidth {device.memory_bandwidth_bytes_per_s / 1e12:g} TB/s "
        f"(catalog status {device.status or '-'}: {device.source})",
        *eff.sources[:3],
        *([s for s in lin_eff.sources[:1]] if precision == "fp8" else []),
        "attention: a fused (flash) kernel at the attention efficiency above, which is a forward + backward "
        "figure applied to the forward: ASSUMED (conservative: FlashAttention-3's forward reaches up to 75% of H100); "
        "a diffusion model's attention is not causal, so no causal factor applies",
        "convolutions (the VAE, the UNet) run as implicit GEMMs at the matmul efficiency above: ASSUMED",
        f"sustained tensor-core factor {sustained:.3f} ({sustained_source}: {FIT_SOURCE}) — fitted on LLM training, "
        "carried over to image generation: ASSUMED",
        "each phase is the larger of its compute time and its weight reads (each weight read once per call); "
        "norms, activations, the scheduler update, Python and kernel launches are not modelled: ASSUMED negligible "
        "(the time is a device-bound estimate: an eager pipeline at batch 1 adds host time on top)",
        f"memory: weights in {main}" + (" with the denoiser's Linear weights in fp8 (1 B; torchao's per-tensor "
                                         "scales negligible)" if precision == "fp8" else "")
        + f"; activations ≈ {BLOCK_VALUES_PER_WIDTH} values per token per width in a transformer block (SDXL: per "
        "pixel per channel at the widest level, plus the skip connections) and the VAE decoder's full-resolution "
        "working set: ASSUMED from the blocks' structure",
        *(["fp32 is IEEE fp32: the Linear layers, the convolutions and the attention core at the fp32 peak"
           + (", TF32 off for matmuls and cuDNN convolutions (torch.backends.cuda.matmul.allow_tf32 and "
              "torch.backends.cudnn.allow_tf32 False) as `accelkit bench` runs fp32 — PyTorch's own default runs cuDNN "
              "convolutions in TF32, so a pipeline left at its defaults runs its convolutions faster than this plan"
              if device.vendor == "nvidia" and device.peak("tf32") is not None else "")
           + "; flash attention has no fp32 kernel, so the attention efficiency above is applied to the fp32 peak"]
          if precision == "fp32" else []),
        *([f"VAE decode in fp32: {PIPELINE_CLASS[spec.family]} moves a fp16 VAE whose config sets force_upcast to "
           "fp32 for the decode (diffusers), so the decode runs at the fp32 peak (TF32 off) and its weights are "
           "held in fp32"] if vae_upcast(spec, precision) else []),
        f"framework allowance {options.overhead_bytes / 2**30:g} GiB per device: assumed",
        f"CFG (diffusers' {PIPELINE_CLASS[spec.family]}): "
        + ("yes — the denoiser runs the conditional and unconditional batch in one call" if spec.uses_cfg(gen.guidance)
           else "no (guidance ≤ 1, or a guidance-distilled model)")
        + "; text encoders run " + ("on the prompt and the empty negative prompt" if spec.encodes_negative(gen.guidance)
                                    else "on the prompt only"),
        f"energy = TDP × activity factor {options.activity_factor:g} × time: ESTIMATED, not measured",
    ]
    return out


def to_estimate(doc: dict[str, Any]) -> Estimate:
    """A plan document as the results store keeps it."""
    hw = doc["hardware"]
    return Estimate(
        kind="plan", name=f"{doc['model']['name']} text-to-image on {hw['num_devices']}×{hw['name']}",
        hardware=hw["name"], num_devices=hw["num_devices"], throughput=doc["images_per_s"], throughput_unit="images/s",
        memory_bytes={k: int(v) for k, v in doc["memory_per_device_bytes"].items()}, mfu=doc["mfu"],
        energy_j_per_item=doc["energy_j_per_image"], details=doc,
    )


def compare_image(spec: DiffusionSpec, gen: Generation, hardware: Sequence[str], *, precision: str = "bf16",
                  options: PlanOptions | None = None, num_devices: int = 1) -> list[dict[str, Any]]:
    """One plan document per hardware name, in the order given."""
    if not hardware:
        raise UserError("compare needs at least one hardware name, e.g. h100,b200")
    docs = []
    for name in hardware:
        device = resolve_hardware(name)
        try:
            docs.append(plan_image(spec, gen, device, precision=precision, options=options, num_devices=num_devices))
        except UserError as exc:  # one device's: no peak for the --precision, no CPU probe
            raise UserError(drop_from_compare(exc, name, device.name, len(hardware))) from None
    return docs


def estimate_variant(spec: DiffusionSpec, gen: Generation, precision: str, device: str,
                     catalog: str | None) -> tuple[Estimate | None, str | None]:
    """The bench's prediction of one variant (``Workload.estimate``): the plan on this device, or why there is none."""
    try:
        hw = resolve_hardware(catalog or ("cpu" if device == "cpu" else device))
        return to_estimate(plan_image(spec, gen, hw, precision=precision)), None
    except Exception as exc:  # a planner gap must not lose a measurement
        return None, f"the planner could not estimate this workload ({type(exc).__name__}: {exc})"
