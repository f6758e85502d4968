"""A local diffusers pipeline directory read from its JSON configs alone (no torch): an SD3 saved without its T5, an
SDXL UNet config with an int transformer_layers_per_block, configs missing a key the counts read, the weights'
variant files, and the SDXL sizes diffusers runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelkit.core import UserError
from accelkit.models.diffusion import default_generation, get_diffusion_preset, pipeline_count, resolve_diffusion
from accelkit.models.diffusion.local import weights_variant
from accelkit.models.diffusion.pipeline import check_generation, text_tokens
from accelkit.models.diffusion.spec import DENOISER_CLASS, ENCODER_SLOTS, PIPELINE_CLASS, SCHEDULER_CLASS, DiffusionSpec
from tests.conftest import accelkit

_ENCODER_CLASS = {"clip": "CLIPTextModel", "clip-projection": "CLIPTextModelWithProjection", "t5": "T5EncoderModel"}


def write_dir(root: Path, spec: DiffusionSpec, *, drop: tuple[str, ...] = (), edit: dict[str, dict] | None = None) -> str:
    """``spec`` as ``save_pretrained`` lays it out, configs only: model_index.json (each slot in ``drop`` null, as
    diffusers writes an empty one) and a config per component folder, ``edit`` ({folder: {key: value or None to
    delete}}) applied."""
    denoiser = "unet" if spec.family == "sdxl" else "transformer"
    configs = {denoiser: spec.denoiser, "vae": spec.vae}
    index: dict = {"_class_name": PIPELINE_CLASS[spec.family], denoiser: ["diffusers", DENOISER_CLASS[spec.family]],
                   "vae": ["diffusers", "AutoencoderKL"], "scheduler": ["diffusers", SCHEDULER_CLASS[spec.family]]}
    for slot, e in zip(ENCODER_SLOTS, spec.text_encoders, strict=False):
        index[slot] = [None, None] if slot in drop else ["transformers", _ENCODER_CLASS[e.kind]]
        if slot not in drop:
            configs[slot] = e.config
    (root / "model_index.json").write_text(json.dumps(index))
    for folder, config in configs.items():
        config = dict(config)
        for key, value in (edit or {}).get(folder, {}).items():
            if value is None:
                del config[key]
            else:
                config[key] = value
        (root / folder).mkdir()
        (root / folder / "config.json").write_text(json.dumps(config))
    (root / "scheduler").mkdir()
    (root / "scheduler" / "scheduler_config.json").write_text(json.dumps(spec.scheduler))
    return str(root)


def test_sd3_saved_without_t5_counts_the_zero_t5_tokens_the_pipeline_still_feeds(tmp_path):
    full = get_diffusion_preset("sd3-medium")
    spec = resolve_diffusion(write_dir(tmp_path, full, drop=("text_encoder_3",)))
    assert [e.kind for e in spec.text_encoders] == ["clip-projection", "clip-projection"]
    # the pipeline's default max_sequence_length: 77 CLIP + 256 zero T5 tokens reach the MMDiT, as with T5
    assert spec.max_sequence_length == 256 and text_tokens(spec) == text_tokens(full) == 77 + 256
    gen = default_generation(spec)
    assert pipeline_count(spec, gen).step_flops == pipeline_count(full, gen).step_flops
    assert pipeline_count(spec, gen).text_flops < pipeline_count(full, gen).text_flops  # no T5 to run
    proc = accelkit("models", "show", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["max_sequence_length"] == 256 and doc["flops_per_step"] == pipeline_count(full, gen).step_flops
    with pytest.raises(ValueError, match="max_sequence_length"):
        full.replace(text_encoders=full.text_encoders[:2])  # an SD3 spec without T5 must say how many zeros


def test_an_sdxl_unet_with_one_transformer_depth_for_every_level_is_shown_and_planned(tmp_path):
    base = get_diffusion_preset("tiny-sdxl")
    path = write_dir(tmp_path, base, edit={"unet": {"transformer_layers_per_block": 1}})  # diffusers' default type
    proc = accelkit("models", "show", path)
    assert proc.returncode == 0, proc.stderr
    assert "transformer layers 1/1" in proc.stdout
    assert accelkit("plan", "--model", path, "--task", "infer", "--hardware", "h100").returncode == 0


@pytest.mark.parametrize(("folder", "key"), [("transformer", "num_layers"), ("vae", "latent_channels"),
                                             ("text_encoder_3", "d_model")])
def test_a_config_without_a_key_the_counts_read_is_refused_in_one_line_naming_file_and_key(tmp_path, folder, key):
    path = write_dir(tmp_path, get_diffusion_preset("tiny-sd3"), edit={folder: {key: None}})
    with pytest.raises(UserError, match=rf"{folder}/config.json has no '{key}'"):
        resolve_diffusion(path)
    for args in (("models", "show", path), ("plan", "--model", path, "--task", "infer", "--hardware", "h100")):
        proc = accelkit(*args)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().count("\n") == 0 and f"{folder}/config.json has no '{key}'" in proc.stderr


def test_the_weights_variant_is_the_one_their_files_name_when_there_are_no_plain_ones(tmp_path):
    (tmp_path / "transformer").mkdir()
    w = tmp_path / "transformer"
    assert weights_variant(str(tmp_path)) is None  # no weights: random ones, nothing to load
    (w / "diffusion_pytorch_model.fp16.safetensors").touch()
    assert weights_variant(str(tmp_path)) == "fp16"
    (w / "diffusion_pytorch_model.fp16.safetensors").unlink()
    for shard in ("00001-of-00002", "00002-of-00002"):  # save_pretrained's shards: name-shard.variant.ext
        (w / f"diffusion_pytorch_model-{shard}.fp16.safetensors").touch()
    assert weights_variant(str(tmp_path)) == "fp16"
    (w / "diffusion_pytorch_model.safetensors").touch()  # a hub snapshot with both: the plain ones load by default
    assert weights_variant(str(tmp_path)) is None
    (w / "diffusion_pytorch_model.safetensors").unlink()
    (w / "diffusion_pytorch_model.bf16.safetensors").touch()
    with pytest.raises(UserError, match="variants bf16, fp16 and none plain"):
        weights_variant(str(tmp_path))


def test_sdxl_takes_any_multiple_of_the_vae_factor_as_its_pipeline_does():
    spec = get_diffusion_preset("sdxl-base")
    assert spec.side_multiple == 8
    assert check_generation(spec, default_generation(spec, height=1080, width=1920)) is None
    why = check_generation(spec, default_generation(spec, height=1084), {"height": "--height"})
    assert why == "--height 1084 is not a multiple of 8 (sdxl-base: the VAE's 8×); use 1080 or 1088"
    tiny = get_diffusion_preset("tiny-sdxl")
    assert check_generation(tiny, default_generation(tiny, height=72, width=104)) is None
