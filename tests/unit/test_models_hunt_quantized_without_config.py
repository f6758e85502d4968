"""A quantized checkpoint whose config.json lacks ``quantization_config`` (AutoGPTQ's older checkpoints keep the scheme
in ``quantize_config.json`` alone; older compressed-tensors ones call it ``compression_config``): refused before
anything loads, naming a quantized tensor and where the scheme is — before, a GPTQ one got "the checkpoint lacks 7
tensors, e.g. q_proj.weight", as if the download were broken."""

import json

import pytest

from accelkit.serve import preflight
from tests.unit.quant_checkpoints import CONFIG, one_layer_checkpoint


def _checkpoint(path, layout, cfg=CONFIG):
    return one_layer_checkpoint(path, layout, cfg)


def _refusal(path):
    with pytest.raises(ValueError) as info:
        preflight.check_model_dir(path, None)
    message = str(info.value)
    assert "\n" not in message and "has no quantization_config" in message
    return message


def test_gptq_weights_with_the_scheme_in_quantize_config_json_say_to_move_it(tmp_path):
    path = _checkpoint(tmp_path / "m", "gptq")
    (path / "quantize_config.json").write_text(json.dumps({"bits": 4, "group_size": 8, "desc_act": False}))
    message = _refusal(path)
    assert ".qweight" in message and "quantize_config.json" in message and '"quant_method": "gptq"' in message


def test_fp8_weights_under_an_older_compression_config_say_to_rename_it(tmp_path):
    path = _checkpoint(tmp_path / "m", "fp8", cfg={**CONFIG, "compression_config": {"format": "float-quantized"}})
    message = _refusal(path)
    assert "model.layers.0." in message and "rename its compression_config" in message


def test_quantized_weights_with_no_scheme_anywhere_are_refused(tmp_path):
    assert "add the quantizer's quantization_config" in _refusal(_checkpoint(tmp_path / "m", "fp8"))


def test_a_16_bit_checkpoint_passes(tmp_path):
    checked = preflight.check_model_dir(_checkpoint(tmp_path / "m", "16-bit"), None)
    assert checked.args.quantization is None
