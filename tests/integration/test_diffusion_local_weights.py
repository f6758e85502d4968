"""Text-to-image pipelines as the bench builds and loads them — tiny-sd3 / tiny-sdxl, the real diffusers and
transformers modules on the CPU, directories written by diffusers' own save_pretrained: an SD3 saved without its T5,
weights saved only as a variant, fp16 keeping what from_pretrained(torch_dtype=float16) keeps in fp32, and the SDXL
UNet at a size it halves unevenly."""

from __future__ import annotations

import torch

from accelkit.bench.metrics import flop_counter
from accelkit.bench.variants import Variant
from accelkit.bench.workloads import make_workload
from accelkit.models.diffusion import get_diffusion_preset, pipeline_count, resolve_diffusion
from accelkit.models.diffusion.build import (
    build_denoiser,
    build_pipeline,
    build_text_encoder,
    cast,
    load_pipeline,
    pipeline_class,
)
from accelkit.models.diffusion.local import weights_variant
from accelkit.models.diffusion.pipeline import check_generation, denoiser_count, text_tokens
from tests.integration.test_bench_diffusion import bench_count

WO = "encoder.block.0.layer.1.DenseReluDense.wo.weight"  # a T5 feed-forward's output projection


def dtypes(pipe) -> dict[str, torch.dtype]:
    return {f"{slot}.{name}": t.dtype for slot, module in pipe.components.items()
            if isinstance(module, torch.nn.Module) for name, t in module.state_dict().items()}


def test_an_sd3_directory_saved_without_t5_loads_and_counts_the_zero_t5_tokens(tmp_path):
    saved = build_pipeline(get_diffusion_preset("tiny-sd3"), seed=3)
    saved.register_modules(text_encoder_3=None, tokenizer_3=None)  # diffusers' way to drop T5 and save its memory
    saved.save_pretrained(tmp_path)
    w = make_workload("diffusion", {"model": str(tmp_path), "steps": 1, "height": 32, "width": 32})
    spec = w.model_spec  # type: ignore[attr-defined]
    assert len(spec.text_encoders) == 2 and text_tokens(spec) == 77 + 256  # CLIP + max_sequence_length zeros
    closed = pipeline_count(spec, w.generation).image_flops  # type: ignore[attr-defined]
    assert bench_count(w) == closed  # type: ignore[arg-type]  # built from the configs on the meta device
    # the directory's weights, loaded on the CPU and counted over one real call: the MMDiT saw the 256 zero tokens
    prepared = w.prepare(Variant(), "cpu", seed=0)
    try:
        assert f"weights from {tmp_path}, in fp32" in prepared.notes
        assert prepared.steps[0].flops_per_call() == closed  # type: ignore[misc]
    finally:
        prepared.close()


def test_weights_saved_only_as_a_variant_are_loaded_with_it(tmp_path):
    saved = build_pipeline(get_diffusion_preset("tiny-sd3"), dtype="fp16", seed=3)
    saved.save_pretrained(tmp_path, variant="fp16")  # diffusion_pytorch_model.fp16.safetensors, model.fp16.…
    assert weights_variant(str(tmp_path)) == "fp16"
    pipe = load_pipeline(resolve_diffusion(str(tmp_path)), str(tmp_path), dtype="fp32")
    for name, value in saved.transformer.state_dict().items():  # the directory's weights, not random ones
        assert torch.equal(pipe.transformer.state_dict()[name], value.float()), name


def test_fp16_keeps_in_fp32_what_from_pretrained_keeps_there(tmp_path):
    spec = get_diffusion_preset("tiny-sd3")
    fp32 = build_pipeline(spec, seed=3)
    fp32.save_pretrained(tmp_path)
    reference = pipeline_class(spec).from_pretrained(tmp_path, dtype=torch.float16, local_files_only=True)
    built, loaded = build_pipeline(spec, dtype="fp16", seed=3), load_pipeline(spec, str(tmp_path), dtype="fp16")
    assert dtypes(built) == dtypes(loaded)
    # the text encoders as transformers loads them (diffusers 0.42 without accelerate leaves the MMDiT in fp32)
    encoders = lambda pipe: {k: v for k, v in dtypes(pipe).items() if k.startswith("text_encoder")}  # noqa: E731
    assert encoders(built) == encoders(reference)
    # T5's wo (transformers' _keep_in_fp32_modules: its guard against fp16 overflow) stays fp32, unrounded
    assert built.text_encoder_3.state_dict()[WO].dtype == torch.float32
    assert torch.equal(built.text_encoder_3.state_dict()[WO], fp32.text_encoder_3.state_dict()[WO])
    assert built.text_encoder_3.state_dict()["shared.weight"].dtype == torch.float16
    # bf16: transformers keeps them in fp32 for fp16 only
    assert cast(build_text_encoder(spec.text_encoders[2]), "bf16").state_dict()[WO].dtype == torch.bfloat16


def test_sdxl_at_a_size_its_unet_halves_unevenly_counts_what_the_unet_runs():
    spec = get_diffusion_preset("tiny-sdxl")
    w = make_workload("diffusion", {"arch": "sdxl", "size": "tiny", "steps": 1, "height": 72, "width": 104})
    assert check_generation(spec, w.generation) is None  # type: ignore[attr-defined]  # StableDiffusionXLPipeline runs it
    d, t = spec.denoiser, text_tokens(spec)
    unet = build_denoiser(spec)
    with flop_counter() as counter, torch.no_grad():  # a 9×13 latent: down to 5×7, up to 9×13 again
        unet(torch.zeros(1, 4, 9, 13), torch.zeros(1), encoder_hidden_states=torch.zeros(1, t, d["cross_attention_dim"]),
             added_cond_kwargs={"text_embeds": torch.zeros(1, 32), "time_ids": torch.zeros(1, 6)})
    assert denoiser_count(spec, 72, 104).flops == counter.get_total_flops()
    assert bench_count(w) == pipeline_count(spec, w.generation).image_flops  # type: ignore[arg-type, attr-defined]

