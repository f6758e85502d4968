"""An INT4 checkpoint (GPTQ, compressed-tensors pack-quantized) whose quantization_config.group_size disagrees with
its scales: one ValueError naming the tensor, its group count and the group size the tensors imply. Before (found in
the hunt), without a g_idx it failed in load_state_dict — `accelkit serve` printed "internal error (RuntimeError: size
mismatch …) — a bug in accelkit" and exited 1 — and with one it was reported as act-order GPTQ."""

import json

import pytest
import torch
from safetensors.torch import save_file

from accelkit.serve.models.args import ModelArgs
from accelkit.serve.models.llama import load_model
from accelkit.serve.quant.linear import Int4Linear, pack_int4

STORED_GROUP = 32
CONFIG = {"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 64, "num_hidden_layers": 1,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64}
LINEARS = {"self_attn.q_proj": (64, 64), "self_attn.k_proj": (32, 64), "self_attn.v_proj": (32, 64),
           "self_attn.o_proj": (64, 64), "mlp.gate_proj": (64, 64), "mlp.up_proj": (64, 64), "mlp.down_proj": (64, 64)}


def _checkpoint(path, layout, *, g_idx=True):
    """A one-layer Llama quantized with groups of 32 inputs, in GPTQ's or compressed-tensors' layout."""
    tensors = {"model.embed_tokens.weight": torch.zeros(32, 64), "lm_head.weight": torch.zeros(32, 64),
               "model.norm.weight": torch.ones(64), "model.layers.0.input_layernorm.weight": torch.ones(64),
               "model.layers.0.post_attention_layernorm.weight": torch.ones(64)}
    for name, (rows, cols) in LINEARS.items():
        p, codes, groups = f"model.layers.0.{name}", torch.zeros(rows, cols, dtype=torch.long), cols // STORED_GROUP
        if layout == "gptq":
            tensors |= {p + ".qweight": pack_int4(codes).t().contiguous(),
                        p + ".qzeros": pack_int4(torch.full((groups, rows), -1)),
                        p + ".scales": torch.ones(groups, rows, dtype=torch.float16)}
            if g_idx:
                tensors[p + ".g_idx"] = (torch.arange(cols) // STORED_GROUP).to(torch.int32)
        else:
            tensors |= {p + ".weight_packed": pack_int4(codes), p + ".weight_scale": torch.ones(rows, groups),
                        p + ".weight_shape": torch.tensor([rows, cols])}
    path.mkdir()
    save_file(tensors, str(path / "model.safetensors"))
    return path


def _quant(layout, group_size):
    if layout == "gptq":
        return {"quant_method": "gptq", "bits": 4, "group_size": group_size, "desc_act": False, "sym": True}
    weights = {"num_bits": 4, "type": "int", "symmetric": True, "strategy": "group", "group_size": group_size}
    return {"quant_method": "compressed-tensors", "format": "pack-quantized",
            "config_groups": {"group_0": {"targets": ["Linear"], "weights": weights}}}


def _load(path, layout, group_size):
    args = ModelArgs.from_config({**CONFIG, "quantization_config": _quant(layout, group_size)})
    (path / "config.json").write_text(json.dumps({**CONFIG, "quantization_config": _quant(layout, group_size)}))
    return load_model(path, args, dtype=torch.float32, device=torch.device("cpu"), quantization=args.quantization)


@pytest.mark.parametrize("layout, g_idx", [("gptq", True), ("gptq", False), ("pack-quantized", False)])
@pytest.mark.parametrize("group_size", [16, 64])
def test_a_group_size_the_scales_disagree_with_is_one_line_naming_both(tmp_path, layout, g_idx, group_size):
    path = _checkpoint(tmp_path / "m", layout, g_idx=g_idx)
    with pytest.raises(ValueError) as info:
        _load(path, layout, group_size)
    message = str(info.value)
    assert f"quantization_config.group_size={group_size}" in message and "holds 2 groups" in message
    assert "(group size 32)" in message and "do not belong together" in message and "\n" not in message


@pytest.mark.parametrize("layout", ["gptq", "pack-quantized"])
def test_the_group_size_the_scales_hold_loads(tmp_path, layout):
    model = _load(_checkpoint(tmp_path / "m", layout), layout, STORED_GROUP)
    assert isinstance(model.layers[0].mlp.down_proj, Int4Linear)
    assert model.layers[0].mlp.down_proj.group_size == STORED_GROUP


def test_gptq_scales_count_at_their_stored_size_in_the_preflight_estimate():
    """A GPTQ layer's fp16 ``scales`` stay fp16 once loaded (the Linear keeps the checkpoint's scale dtype): the
    estimate counted them at the engine's dtype — twice their size at fp32 — against its 'lower bound' promise."""
    from accelkit.serve.preflight import TensorInfo, loaded_weight_bytes

    tensors = {"model.layers.0.mlp.down_proj.qweight": TensorInfo("I32", (8, 64), 8 * 64 * 4),
               "model.layers.0.mlp.down_proj.scales": TensorInfo("F16", (2, 64), 2 * 64 * 2),
               "model.layers.0.mlp.down_proj.qzeros": TensorInfo("I32", (2, 8), 2 * 8 * 4)}
    assert loaded_weight_bytes(tensors, dtype="float32") == 8 * 64 * 4 + 2 * 64 * 2 + 2 * 8 * 4
