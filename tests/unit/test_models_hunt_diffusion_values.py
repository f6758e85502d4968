"""A local diffusers pipeline directory whose config holds a value of the wrong type, or one no model has, is refused
in one line naming the file (and the key where the type is wrong), exit 2 — found in a hunt: "patch_size": "2" (a
string), a list where one number goes, a patch_size of 0 or a CLIP max_position_embeddings of "77" were internal
errors (exit 1, "a bug in accelkit") in `models show` and `plan`."""

from __future__ import annotations

import pytest

from accelkit.cli.app import main
from accelkit.core import UserError
from accelkit.models.diffusion import get_diffusion_preset, resolve_diffusion
from tests.unit.test_models_diffusion_local import write_dir


@pytest.mark.parametrize(("preset", "folder", "key", "value"), [
    ("tiny-sd3", "transformer", "patch_size", "2"),
    ("tiny-flux", "transformer", "num_layers", [1, 2]),
    ("tiny-sdxl", "unet", "down_block_types", "CrossAttnDownBlock2D"),
    ("tiny-sd3", "vae", "layers_per_block", "1"),
    ("tiny-sd3", "text_encoder", "hidden_size", "64"),
])
def test_a_value_of_the_wrong_type_is_named_with_its_file_and_key(tmp_path, capsys, preset, folder, key, value):
    path = write_dir(tmp_path, get_diffusion_preset(preset), edit={folder: {key: value}})
    with pytest.raises(UserError, match=rf"{folder}/config.json: '{key}' is "):
        resolve_diffusion(path)
    with pytest.raises(SystemExit) as exc:
        main(["models", "show", path])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().count("\n") == 0 and f"'{key}' is" in err and "internal error" not in err


@pytest.mark.parametrize(("folder", "key", "value"), [("transformer", "patch_size", 0),
                                                      ("text_encoder", "max_position_embeddings", 0)])
def test_a_value_no_model_has_is_refused_naming_the_file(tmp_path, folder, key, value):
    path = write_dir(tmp_path, get_diffusion_preset("tiny-sd3"), edit={folder: {key: value}})
    with pytest.raises(UserError, match=rf"{folder}/config.json"):
        resolve_diffusion(path)


def test_a_square_sample_size_written_as_height_and_width_reads_as_the_number(tmp_path):
    base = get_diffusion_preset("tiny-sdxl")
    assert resolve_diffusion(write_dir(tmp_path, base, edit={"unet": {"sample_size": [16, 16]}})).resolution == \
        base.resolution
