"""The engine's checks before allocating: bad model directories are one ValueError naming the file and the fix."""

import json
import math
import struct
from pathlib import Path

import pytest

from accelkit.serve import preflight

CONFIG = {"architectures": ["LlamaForCausalLM"], "vocab_size": 32, "hidden_size": 8, "num_hidden_layers": 2,
          "num_attention_heads": 2, "num_key_value_heads": 1, "intermediate_size": 16, "max_position_embeddings": 64}


def _safetensors(tensors: dict[str, tuple[int, ...]]) -> bytes:
    header, offset = {}, 0
    for name, shape in tensors.items():
        size = 4 * math.prod(shape)
        header[name] = {"dtype": "F32", "shape": list(shape), "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw)) + raw + b"\0" * offset


def _tensors(cfg):
    shapes = {}
    for key, shape in preflight.expected_shapes(cfg).items():
        if key.endswith(".bias"):
            continue
        for i in range(cfg["num_hidden_layers"]) if "{i}" in key else [None]:
            for e in range(cfg.get("num_experts", 0)) if "{e}" in key else [None]:
                shapes[key.format(i=i, e=e)] = shape
    return shapes


def _model(tmp_path, cfg=CONFIG, *, raw_config=None, weights=None):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_bytes(raw_config if raw_config is not None else json.dumps(cfg).encode())
    (tmp_path / "model.safetensors").write_bytes(weights if weights is not None else _safetensors(_tensors(cfg)))
    return tmp_path


def test_a_matching_directory_passes(tmp_path):
    d = _model(tmp_path)
    cfg = preflight.read_config(d)
    tensors = preflight.checkpoint_tensors(d)
    preflight.check_checkpoint(cfg, tensors, d)
    assert tensors["model.embed_tokens.weight"].shape == (32, 8)


@pytest.mark.parametrize(("raw", "words"), [
    (b"[1, 2, 3]", ["JSON list", "expected an object"]),
    (b'{"vocab_size": 32,', ["not valid JSON", "line 1", "re-download"]),
    (b'{"x": "\xff\xfe"}', ["not UTF-8", "0xff", "re-download"]),
    (json.dumps({**CONFIG, "vocab_size": 10**12}).encode(), ["vocab_size=1000000000000", "[1, 2147483647]"]),
    (json.dumps({**CONFIG, "num_attention_heads": "four"}).encode(), ["num_attention_heads='four'"]),
    (json.dumps({**CONFIG, "hidden_size": True}).encode(), ["hidden_size=True"]),
    (json.dumps({k: v for k, v in CONFIG.items() if k != "hidden_size"}).encode(), ["no 'hidden_size'"]),
    (json.dumps({**CONFIG, "num_key_value_heads": 3}).encode(), ["not a multiple of num_key_value_heads=3"]),
    (json.dumps({**CONFIG, "rms_norm_eps": -1}).encode(), ["rms_norm_eps=-1"]),
])
def test_a_bad_config_json_names_the_file_and_the_problem(tmp_path, raw, words):
    d = _model(tmp_path, raw_config=raw)
    with pytest.raises(ValueError) as info:
        preflight.read_config(d)
    message = str(info.value)
    assert "config.json" in message and "\n" not in message
    for word in words:
        assert word in message


@pytest.mark.parametrize("weights", [b"", b"short", b"this is not safetensors at all" * 10,
                                     struct.pack("<Q", 5) + b"[1,2]",
                                     struct.pack("<Q", 60) + json.dumps({"t": {"dtype": "F32", "shape": [4],
                                                                               "data_offsets": [0, 999]}}).encode()[:60]])
def test_a_garbage_safetensors_file_is_named(tmp_path, weights):
    d = _model(tmp_path, weights=weights)
    with pytest.raises(ValueError, match=r"model\.safetensors is not a safetensors file .*re-download"):
        preflight.checkpoint_tensors(d)


def test_a_config_that_does_not_match_its_checkpoint_is_refused_before_building(tmp_path):
    d = _model(tmp_path)
    for change, words in (({"vocab_size": 10**6}, "model.embed_tokens.weight of shape [1000000, 8]"),
                          ({"num_hidden_layers": 10**9}, "num_hidden_layers=1000000000"),
                          ({"intermediate_size": 17}, "mlp.gate_proj.weight of shape [17, 8]")):
        cfg = {**CONFIG, **change}
        with pytest.raises(ValueError, match="do not belong together") as info:
            preflight.check_checkpoint(cfg, preflight.checkpoint_tensors(d), d)
        assert words in str(info.value)


MOE = {**CONFIG, "architectures": ["Qwen3MoeForCausalLM"], "num_experts": 4, "num_experts_per_tok": 2,
       "moe_intermediate_size": 6}


def test_moe_expert_shapes_are_checked_before_building(tmp_path):
    d = _model(tmp_path, MOE)
    tensors = preflight.checkpoint_tensors(d)
    assert tensors["model.layers.1.mlp.experts.3.down_proj.weight"].shape == (8, 6)
    assert tensors["model.layers.0.self_attn.q_norm.weight"].shape == (4,)
    preflight.check_checkpoint(MOE, tensors, d)
    for change, words in (({"moe_intermediate_size": 7}, "mlp.experts.0.gate_proj.weight of shape [7, 8]"),
                          ({"num_experts": 5}, "mlp.gate.weight of shape [5, 8]")):
        with pytest.raises(ValueError, match="do not belong together") as info:
            preflight.check_checkpoint({**MOE, **change}, tensors, d)
        assert words in str(info.value)


def _memory(**overrides):
    cfg = {**CONFIG, "max_position_embeddings": 10**12}
    kwargs = {"dtype": "float32", "kv_cache_dtype": "auto", "kv_cache_memory_bytes": None, "max_model_len": 64,
              "block_size": 16, "host_available": 2**30, "device_available": 2**30, "where": "host memory"}
    kwargs.update(overrides)
    tensors = {name: preflight.TensorInfo("F32", shape, 4 * math.prod(shape)) for name, shape in _tensors(CONFIG).items()}
    preflight.check_memory(Path("/models/m"), cfg, tensors, **kwargs)


def test_sizes_are_checked_against_free_memory_before_allocating():
    _memory()  # fits
    with pytest.raises(ValueError, match=r"max_model_len=1000000000000 \(the model's max_position_embeddings\).*"
                                         r"--max-model-len"):
        _memory(max_model_len=10**12, max_model_len_is_default=True)
    with pytest.raises(ValueError, match=r"--kv-cache-memory\) = 100.00 TiB is more than the 1.00 GiB"):
        _memory(kv_cache_memory_bytes=100 * 2**40)
    with pytest.raises(ValueError, match=r"max_model_len=64 needs at least .* KV budget of 1.00 KiB"):
        _memory(kv_cache_memory_bytes=1024)
    with pytest.raises(ValueError, match=r"checkpoint in /models/m is .* more than the 1.00 KiB of host memory"):
        _memory(host_available=1024)
