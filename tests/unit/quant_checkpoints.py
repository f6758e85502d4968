"""A one-layer Llama checkpoint written with safetensors, its Linears stored 16-bit or as a quantized format stores
them: what tests of the checkpoint checks (preflight, `serve --quantization`) read, without a quantizer."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file

CONFIG = {"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 16, "num_hidden_layers": 1,
          "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 32, "max_position_embeddings": 64}
LINEARS = {"self_attn.q_proj": (16, 16), "self_attn.k_proj": (8, 16), "self_attn.v_proj": (8, 16),
           "self_attn.o_proj": (16, 16), "mlp.gate_proj": (32, 16), "mlp.up_proj": (32, 16), "mlp.down_proj": (16, 32)}


def one_layer_checkpoint(path: Path, layout: str, config: dict[str, Any], *, group_size: int | None = None) -> Path:
    """``path`` made a checkpoint of ``config`` whose Linears are stored as ``layout``: "16-bit", "gptq" (AutoGPTQ's
    qweight / qzeros / scales, groups of ``group_size`` input columns — one group per column when None) or "fp8"
    (e4m3 codes with a per-tensor weight_scale)."""
    tensors = {"model.embed_tokens.weight": torch.zeros(32, 16), "lm_head.weight": torch.zeros(32, 16),
               "model.norm.weight": torch.ones(16), "model.layers.0.input_layernorm.weight": torch.ones(16),
               "model.layers.0.post_attention_layernorm.weight": torch.ones(16)}
    for name, (rows, cols) in LINEARS.items():
        p = f"model.layers.0.{name}"
        if layout == "gptq":
            groups = 1 if group_size is None else cols // group_size
            tensors |= {p + ".qweight": torch.zeros(cols // 8, rows, dtype=torch.int32),
                        p + ".qzeros": torch.zeros(groups, rows // 8, dtype=torch.int32),
                        p + ".scales": torch.ones(groups, rows, dtype=torch.float16)}
        elif layout == "fp8":
            tensors |= {p + ".weight": torch.zeros(rows, cols, dtype=torch.float8_e4m3fn),
                        p + ".weight_scale": torch.ones(1)}
        else:
            tensors[p + ".weight"] = torch.zeros(rows, cols)
    path.mkdir()
    save_file(tensors, str(path / "model.safetensors"))
    (path / "config.json").write_text(json.dumps(config))
    return path
