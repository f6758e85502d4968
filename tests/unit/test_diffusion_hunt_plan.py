"""`accelkit plan` of a text-to-image model: SDXL's fp16 VAE decodes in fp32 (diffusers upcasts it), so its time
and weights are an fp32 decode's; the hardware flags left empty or out, and a refused flag named as it is typed."""

from __future__ import annotations

import pytest

from accelkit.models.diffusion import default_generation, get_diffusion_preset
from accelkit.plan.calibrate import resolve_hardware
from accelkit.plan.diffusion import plan_image
from tests.conftest import accelkit


@pytest.mark.parametrize("name", ["sdxl-base", "sd3-medium"])
def test_an_upcast_fp16_vae_decodes_at_the_fp32_rate_and_holds_fp32_weights(name):
    """StableDiffusionXLPipeline moves a fp16 VAE with force_upcast to fp32 for the decode; the plan timed it at the
    fp16 peak (SDXL 1024² fp16 on an H100: 18 ms of decode instead of 293 ms, s/image 1.20 instead of 1.48).
    SD3 decodes in fp16 (its pipeline has no upcast): its fp16 decode is its bf16 one."""
    spec = get_diffusion_preset(name)
    gen = default_generation(spec)
    h100 = resolve_hardware("h100")
    fp16, bf16, fp32 = (plan_image(spec, gen, h100, precision=p) for p in ("fp16", "bf16", "fp32"))
    upcast = name == "sdxl-base"
    reference = fp32 if upcast else bf16
    for key in ("time_breakdown_s", "bottleneck_by_phase", "weights_by_component_bytes"):
        phase = "vae" if key == "weights_by_component_bytes" else "vae_decode"
        assert fp16[key][phase] == pytest.approx(reference[key][phase]), key
    # the denoiser and text encoders stay 16-bit either way
    assert fp16["time_breakdown_s"]["denoiser"] == pytest.approx(bf16["time_breakdown_s"]["denoiser"])
    assert any("VAE decode in fp32" in a for a in fp16["assumptions"]) == upcast


@pytest.mark.parametrize("flags", [("--compare", ","), ("--compare", ""), ()])
def test_no_hardware_is_one_line_naming_the_flags_not_hardware_none(flags):
    proc = accelkit("plan", "--model", "tiny-sdxl", "--task", "infer", *flags)
    assert proc.returncode == 2
    assert "None" not in proc.stderr and ("names no hardware" in proc.stderr or "give --hardware" in proc.stderr)
    assert len(proc.stderr.strip().splitlines()) == 1


def test_kv_cache_memory_is_refused_in_the_flag_the_user_typed():
    proc = accelkit("plan", "--model", "tiny-sdxl", "--task", "infer", "--hardware", "h100",
                    "--kv-cache-memory", "512MiB")
    assert proc.returncode == 2
    assert "--kv-cache-memory 512" in proc.stderr and "--kv-cache-memory-bytes" not in proc.stderr
