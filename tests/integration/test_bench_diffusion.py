"""`accelkit bench diffusion` on tiny pipelines (64², 2 steps): FLOPs against FlopCounterMode on the real modules
and against the planner's closed form, a seeded run that repeats, the image accuracy gate (bf16 passes, a broken
variant fails), the phases inside a call, the refusals, a local diffusers directory, and one real CLI run whose
results land in the store and the report."""

from __future__ import annotations

import json
import sys

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from accelkit.bench.runner import BenchConfig, Reporter, plan_variants, run_benchmark
from accelkit.bench.variants import Variant, matrix
from accelkit.bench.workloads import make_workload
from accelkit.bench.workloads.diffusion import Diffusion, DiffusionConfig
from accelkit.models.diffusion import pipeline_count
from accelkit.models.diffusion.build import build_denoiser, denoiser_of
from accelkit.models.diffusion.pipeline import text_tokens
from accelkit.timing import LoopConfig
from tests.conftest import REPO, accelkit
from tests.integration.test_bench_cli import SHORT, stored_bench

SMALL = {"size": "tiny", "steps": 2, "height": 64, "width": 64}
QUICK = BenchConfig(device="cpu", loop=LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=2,
                                                  min_time_s=0), auto_probe=False, predict=False, save=False)


def workload(arch: str = "sd3", **extra: object) -> Diffusion:
    return make_workload("diffusion", {**SMALL, "arch": arch, **extra})  # type: ignore[return-value]


def one_step_count(w: Diffusion) -> float:
    """FlopCounterMode, torch's own formulas, on the denoiser alone (built on the meta device from the same config)
    called with one denoising step's inputs — independent of the pipeline, its hooks and our custom formulas."""
    spec, g = w.model_spec, w.generation
    with torch.device("meta"):
        den = build_denoiser(spec)
    batch = g.batch_size * (2 if spec.uses_cfg(g.guidance) else 1)
    lat = (g.height // spec.vae_scale_factor, g.width // spec.vae_scale_factor)
    t = text_tokens(spec)
    d = spec.denoiser
    z = lambda *shape: torch.zeros(*shape, device="meta")  # noqa: E731
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        if spec.family == "sd3":
            den(hidden_states=z(batch, d["in_channels"], *lat), encoder_hidden_states=z(batch, t, d["joint_attention_dim"]),
                pooled_projections=z(batch, d["pooled_projection_dim"]), timestep=z(batch))
        elif spec.family == "flux":
            n = (lat[0] // 2) * (lat[1] // 2)
            den(hidden_states=z(batch, n, d["in_channels"]), encoder_hidden_states=z(batch, t, d["joint_attention_dim"]),
                pooled_projections=z(batch, d["pooled_projection_dim"]), timestep=z(batch), guidance=z(batch),
                img_ids=z(n, 3), txt_ids=z(t, 3))
        else:
            proj = spec.text_encoders[-1].config["projection_dim"]
            den(z(batch, d["in_channels"], *lat), z(batch), encoder_hidden_states=z(batch, t, d["cross_attention_dim"]),
                added_cond_kwargs={"text_embeds": z(batch, proj), "time_ids": z(batch, 6)})
    return float(counter.get_total_flops())


def bench_count(w: Diffusion) -> float:
    """The bench's own count: the step's FLOPs as the fp32 reference counts them (the meta device), which also
    fills ``w.phase_flops``."""
    prepared = w.prepare(Variant(), "meta", seed=0)
    try:
        return prepared.steps[0].flops_per_call()  # type: ignore[misc]
    finally:
        prepared.close()


@pytest.mark.parametrize("arch", ["sd3", "flux", "sdxl"])
def test_flops_per_step_equal_flop_counter_on_the_denoiser_and_the_planner_per_image(arch):
    w = workload(arch)
    total = bench_count(w)
    per_step = w.phase_flops["denoiser"] / w.generation.steps
    assert per_step == pytest.approx(one_step_count(w), rel=0.02)
    # the planner's closed form, per image, equals the bench's count of the whole call
    count = pipeline_count(w.model_spec, w.generation)
    assert total / w.generation.batch_size == count.image_flops
    assert w.phase_flops["denoiser"] == count.denoise_flops and w.phase_flops["vae decode"] == pytest.approx(
        count.vae_flops, rel=1e-3)  # SDXL's post_quant_conv (a 1×1 conv before the decoder) is all that differs


@pytest.mark.slow  # builds the full pipelines (T5-XXL, CLIP-G …) on the meta device and runs one call: seconds each
@pytest.mark.parametrize("arch", ["sd3", "flux", "sdxl"])
def test_planner_flops_equal_the_bench_count_at_the_real_shapes(arch):
    """SD3-medium, FLUX.1-dev, SDXL base (their T5-XXL, CLIP-G, VAE …) on the meta device: no memory, any size."""
    w = make_workload("diffusion", {"arch": arch, "size": "full", "steps": 1, "height": 256, "width": 256})
    assert bench_count(w) == pipeline_count(w.model_spec, w.generation).image_flops  # type: ignore[attr-defined]


def test_a_seeded_fp32_run_repeats_exactly():
    w = workload("sd3")
    first = w.prepare(Variant(), "cpu", seed=0).evaluate()  # type: ignore[misc]
    again = w.prepare(Variant(), "cpu", seed=0).evaluate()  # type: ignore[misc]
    assert first.shape == (1, w.latent_numel + 3 * 64 * 64)
    assert torch.isfinite(first).all() and first[:, : w.latent_numel].abs().sum() > 0
    assert torch.equal(first, again)  # same weights, same noise: the same latents and image, bit for bit
    other = w.prepare(Variant(), "cpu", seed=1).evaluate()  # type: ignore[misc]
    assert not torch.equal(first, other)


class Broken(Diffusion):
    """A deliberately broken bf16 variant: its denoiser's output projection has the wrong sign."""

    def build(self, variant, device, *, seed, notes):
        pipe = super().build(variant, device, seed=seed, notes=notes)
        if variant.precision == "bf16":
            with torch.no_grad():
                denoiser_of(pipe).proj_out.weight.neg_()
        return pipe


def test_the_image_gate_passes_bf16_and_fails_a_broken_variant():
    w = workload("sd3")
    reference = w.prepare(Variant(), "cpu", seed=0).evaluate()  # type: ignore[misc]
    assert w.output_gate(reference, reference).passed  # identical: PSNR infinite, said in the note
    bf16 = w.output_gate(reference, w.prepare(Variant(precision="bf16"), "cpu", seed=0).evaluate())  # type: ignore[misc]
    assert bf16.passed, bf16
    assert bf16.figures["latent_cosine"] > 0.99 and bf16.figures["image_psnr_db"] > 30  # type: ignore[operator]
    broken = Broken(DiffusionConfig.from_dict({**SMALL, "arch": "sd3"}))
    gate = broken.output_gate(reference, broken.prepare(Variant(precision="bf16"), "cpu", seed=0).evaluate())  # type: ignore[misc]
    assert gate.passed is False and gate.figures["latent_cosine"] < 0.99  # type: ignore[operator]


def test_phases_are_timed_inside_the_call():
    run = run_benchmark(workload("sdxl", steps=3), matrix(["fp32"]), QUICK)
    (entry,) = run.variants
    assert entry.throughput.unit == "images/s" and entry.step == "generate"
    phases = {p.phase: p for p in entry.phase_breakdown or []}
    assert list(phases) == ["text encoders", "denoiser", "vae decode", "other"]
    assert phases["denoiser"].calls == 3 and len(phases["denoiser"].per_step_s or []) == 3
    assert phases["text encoders"].calls == 2  # SDXL: two CLIPs, its empty negative prompt is zeros
    # each share is the phase's time over the measured calls' time, the rest 'other': they add up to 1
    assert all(0 < (p.share or 0) <= 1 for p in phases.values())
    assert abs(sum(p.share or 0 for p in phases.values()) - 1) < 1e-9


def test_what_cannot_run_is_refused_in_one_line():
    w = workload("sd3", attention=("default", "efficient"))
    runnable, refused = plan_variants(w, matrix(["fp32", "fp8", "int8"], channels_last=True), "cpu", Reporter())
    reasons = {r["name"]: r["reason"] for r in refused}
    assert [v.name for v in runnable] == ["fp32"]
    assert "SM89" in reasons["fp8"] and "int8 is not in the text-to-image matrix" in reasons["int8"]
    assert "channels_last is a layout for the UNet" in reasons["fp32+channels_last"]
    assert "CUDA kernel" in reasons["fp32+sdpa-efficient"]
    assert all("\n" not in r for r in reasons.values())
    sdxl = workload("sdxl", attention=("default", "math"))
    runnable, _ = plan_variants(sdxl, matrix(["fp32"], channels_last=True), "cpu", Reporter())
    assert [v.name for v in runnable] == ["fp32", "fp32+sdpa-math", "fp32+channels_last", "fp32+channels_last+sdpa-math"]


def test_a_local_diffusers_directory_is_read_and_its_weights_used(tmp_path):
    from accelkit.models.diffusion import resolve_diffusion
    from accelkit.models.diffusion.build import build_pipeline

    w = workload("sd3")
    saved = build_pipeline(w.model_spec, seed=3)
    saved.save_pretrained(tmp_path)
    spec = resolve_diffusion(str(tmp_path))
    assert spec.family == "sd3" and all(spec.denoiser[k] == w.model_spec.denoiser[k] for k in w.model_spec.denoiser)
    local = make_workload("diffusion", {**SMALL, "model": str(tmp_path)})
    assert pipeline_count(local.model_spec, local.generation).total_params == pipeline_count(  # type: ignore[attr-defined]
        w.model_spec, w.generation).total_params
    notes: list[str] = []
    pipe = local.build(Variant(precision="bf16"), "cpu", seed=0, notes=notes)  # type: ignore[attr-defined]
    assert notes == [f"weights from {tmp_path}, in bf16"]
    for name, value in saved.transformer.state_dict().items():  # the directory's weights, not the run seed's
        assert torch.equal(pipe.transformer.state_dict()[name], value.to(torch.bfloat16)), name
    out = local.prepare(Variant(), "cpu", seed=0).evaluate()  # type: ignore[misc]
    assert torch.isfinite(out).all()


def test_cli_bench_diffusion_table_json_store_and_report(probed):
    proc = accelkit("bench", "diffusion", "--size", "tiny", "--steps", "2", "--height", "64", "--width", "64",
                    "--precision", "fp32,bf16", "--device", "cpu", *SHORT, "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["workload"] == "diffusion" and [v["name"] for v in doc["variants"]] == ["fp32", "bf16"]
    for v in doc["variants"]:
        assert v["throughput"]["unit"] == "images/s" and v["throughput"]["value"] > 0
        assert v["mfu"]["flops_per_item"] == v["mfu"]["analytic_flops_per_item"]  # counted = the planner's
        assert v["gate"]["passed"] and v["predicted"]["unit"] == "images/s"
        denoiser = next(p for p in v["phase_breakdown"] if p["phase"] == "denoiser")
        assert denoiser["mfu"]["value"] > 0 and denoiser["mfu"]["datasheet"] is None  # a CPU: the probe's peak only
    rows = stored_bench(probed)
    assert len(rows) == 2 and {r.result.throughput_unit for r in rows} == {"images/s"}
    assert all(r.result.details["phase_breakdown"] and r.result.details["gate"] for r in rows)
    from accelkit.report.html import build_report
    from accelkit.results import ResultStore

    with ResultStore(probed / "results.db") as store:
        html = build_report(store)
    assert "Text-to-image: images/s per variant" in html and "where a call" in html
    # what scripts/gpu_results.py keeps of the same document from the GPU check's SD3-medium run
    sys.path.insert(0, str(REPO / "scripts"))
    import gpu_results

    kept = gpu_results.text_to_image(doc)
    assert [v["name"] for v in kept["variants"]] == ["fp32", "bf16"] and all(v["gate_passed"] for v in kept["variants"])
    assert kept["fp8_over_bf16"] == {"images_per_s": None, "j_per_image": None}  # no fp8 variant on a CPU
