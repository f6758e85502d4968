"""A quantized checkpoint whose config.json lacks ``quantization_config`` (AutoGPTQ's older checkpoints keep the scheme
in ``quantize_config.json`` alone; older compressed-tensors ones call it ``compression_config``): refused before
anything loads, naming a quantized tensor and where the scheme is — before, a GPTQ one got "the checkpoint lacks 7
tensors, e.g. q_proj.weight", as if the download were broken."""

import json

import pytest
import torch
from safetensors.torch import save_file

from accelkit.serve import preflight

CONFIG = {"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 16, "num_hidden_layers": 1,
          "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 32, "max_position_embeddings": 64}
LINEARS = {"self_attn.q_proj": (16, 16), "self_attn.k_proj": (8, 16), "self_attn.v_proj": (8, 16),
           "self_attn.o_proj": (16, 16), "mlp.gate_proj": (32, 16), "mlp.up_proj": (32, 16), "mlp.down_proj": (16, 32)}


def _checkpoint(path, layout, cfg=CONFIG):
    """A one-layer Llama whose Linears are stored as ``layout``: "16-bit", "gptq" (AutoGPTQ's qweight / qzeros /
    scales) or "fp8" (e4m3 codes with a per-tensor weight_scale)."""
    tensors = {"model.embed_tokens.weight": torch.zeros(32, 16), "lm_head.weight": torch.zeros(32, 16),
               "model.norm.weight": torch.ones(16), "model.layers.0.input_layernorm.weight": torch.ones(16),
               "model.layers.0.post_attention_layernorm.weight": torch.ones(16)}
    for name, (rows, cols) in LINEARS.items():
        p = f"model.layers.0.{name}"
        if layout == "gptq":
            tensors |= {p + ".qweight": torch.zeros(cols // 8, rows, dtype=torch.int32),
                        p + ".qzeros": torch.zeros(1, rows // 8, dtype=torch.int32),
                        p + ".scales": torch.ones(1, rows, dtype=torch.float16)}
        elif layout == "fp8":
            tensors |= {p + ".weight": torch.zeros(rows, cols, dtype=torch.float8_e4m3fn),
                        p + ".weight_scale": torch.ones(1)}
        else:
            tensors[p + ".weight"] = torch.zeros(rows, cols)
    path.mkdir()
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(cfg))
    return path


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
