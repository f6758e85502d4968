"""A local diffusers pipeline directory (found in a hunt): a FLUX.1-schnell-style transformer (guidance_embeds false)
gets schnell's defaults — 4 steps, no guidance, 256 T5 tokens — not FLUX-dev's, and a --guidance it would silently
ignore is refused in one line; a model_index.json without _class_name says so and names the class to write."""

from __future__ import annotations

import json

import pytest

from accelkit.core import UserError
from accelkit.models.diffusion import default_generation, get_diffusion_preset, resolve_diffusion
from accelkit.models.diffusion.pipeline import check_generation
from tests.conftest import accelkit
from tests.unit.test_models_diffusion_local import write_dir


def test_a_flux_transformer_without_guidance_embedding_gets_schnells_defaults_and_refuses_a_guidance(tmp_path):
    spec = resolve_diffusion(write_dir(tmp_path, get_diffusion_preset("tiny-flux"),
                                       edit={"transformer": {"guidance_embeds": False}}))
    assert (spec.steps, spec.guidance, spec.t5_tokens) == (4, 0.0, 256)  # diffusers' FluxPipeline docs for schnell
    assert check_generation(spec, default_generation(spec)) is None
    assert check_generation(spec, default_generation(spec, guidance=0.0)) is None  # what diffusers' docs pass
    why = check_generation(spec, default_generation(spec, guidance=3.5), {"guidance": "--guidance"})
    assert why is not None and why.startswith("--guidance 3.5 has no effect") and "guidance_embeds" in why


def test_a_flux_transformer_with_guidance_embedding_keeps_flux_devs_defaults(tmp_path):
    spec = resolve_diffusion(write_dir(tmp_path, get_diffusion_preset("tiny-flux")))  # guidance_embeds true
    assert (spec.steps, spec.guidance, spec.t5_tokens) == (28, 3.5, 512)
    assert check_generation(spec, default_generation(spec, guidance=5.0)) is None


def test_the_bench_refuses_a_guidance_schnell_ignores_in_one_line_exit_2(tmp_path):
    path = write_dir(tmp_path, get_diffusion_preset("tiny-flux"), edit={"transformer": {"guidance_embeds": False}})
    proc = accelkit("bench", "diffusion", "--model", path, "--guidance", "3.5", "--height", "64", "--width", "64")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().count("\n") == 0 and "--guidance 3.5 has no effect" in proc.stderr


def test_a_model_index_without_class_name_names_the_key_and_the_class_to_write(tmp_path):
    path = write_dir(tmp_path, get_diffusion_preset("tiny-sdxl"))
    index = json.loads((tmp_path / "model_index.json").read_text())
    del index["_class_name"]
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(UserError, match=r"has no '_class_name'.*\"_class_name\": \"StableDiffusionXLPipeline\""):
        resolve_diffusion(path)
    del index["unet"]  # nothing to go by: every supported class is named
    (tmp_path / "model_index.json").write_text(json.dumps(index))
    with pytest.raises(UserError, match=r"has no '_class_name'.*one of FluxPipeline, StableDiffusion3Pipeline"):
        resolve_diffusion(path)
