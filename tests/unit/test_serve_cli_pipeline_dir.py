"""`accelkit serve` of a diffusers pipeline directory says what it is and where it goes (it said "has no
config.json; give a Hugging Face-format model directory" — which a diffusers folder is)."""

from __future__ import annotations

import json

import pytest

from accelkit.cli.app import main


def test_serving_a_text_to_image_pipeline_names_it_and_the_commands_that_take_it(tmp_path, capsys):
    folder = tmp_path / "sd"
    folder.mkdir()
    (folder / "model_index.json").write_text(json.dumps({"_class_name": "StableDiffusionPipeline"}))
    with pytest.raises(SystemExit) as exc:
        main(["serve", "--model", str(folder)])
    assert exc.value.code == 2
    captured = capsys.readouterr()
    (line,) = captured.err.strip().splitlines()
    assert "diffusers text-to-image pipeline (model_index.json)" in line
    assert f"accelkit plan --model {folder}" in line and f"accelkit bench diffusion --model {folder}" in line
    assert captured.out == ""
