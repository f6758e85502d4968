"""Model directories a vLLM user points the engine at: a GPTQ checkpoint carrying the zero biases its quantizer stored,
YaRN's pretrained length given both at the top level and in the scaling, and ``max_model_len`` up to the context a
linear or YaRN RoPE scaling stretches the positions to (vLLM's derived length)."""

import json

import pytest
import torch
from safetensors.torch import save_file

from accelkit.serve import preflight
from accelkit.serve.models.args import ModelArgs
from accelkit.serve.models.llama import load_model, rope_inv_freq
from accelkit.serve.quant.linear import Int4Linear, pack_int4

GROUP = 32
CONFIG = {"architectures": ["LlamaForCausalLM"], "vocab_size": 64, "hidden_size": 64, "num_hidden_layers": 1,
          "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 96, "max_position_embeddings": 64,
          "quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": GROUP, "desc_act": False,
                                  "sym": True}}
LINEARS = {"self_attn.q_proj": (64, 64), "self_attn.k_proj": (32, 64), "self_attn.v_proj": (32, 64),
           "self_attn.o_proj": (64, 64), "mlp.gate_proj": (96, 64), "mlp.up_proj": (96, 64), "mlp.down_proj": (64, 96)}


def _gptq_checkpoint(path, *, bias_value=None):
    """A one-layer Llama in AutoGPTQ's v1 layout (symmetric: stored zero 7); ``bias_value``: a ``.bias`` of that value
    beside every quantized Linear, as GPTQ-for-LLaMa's and early AutoGPTQ's QuantLinear saved one for each layer."""
    gen = torch.Generator().manual_seed(0)
    tensors = {"model.embed_tokens.weight": torch.randn(64, 64, generator=gen), "lm_head.weight": torch.randn(
        64, 64, generator=gen), "model.norm.weight": torch.ones(64)}
    for norm in ("input_layernorm", "post_attention_layernorm"):
        tensors[f"model.layers.0.{norm}.weight"] = torch.ones(64)
    for name, (rows, cols) in LINEARS.items():
        p = f"model.layers.0.{name}"
        codes = torch.randint(-8, 8, (rows, cols), generator=gen)
        tensors[p + ".qweight"] = pack_int4(codes).t().contiguous()  # (in/8, out)
        tensors[p + ".qzeros"] = pack_int4(torch.full((cols // GROUP, rows), -1))  # unsigned 7: zero 8 − 1
        tensors[p + ".scales"] = (torch.rand(cols // GROUP, rows, generator=gen) / 100).half()
        tensors[p + ".g_idx"] = (torch.arange(cols) // GROUP).to(torch.int32)
        if bias_value is not None:
            tensors[p + ".bias"] = torch.full((rows,), bias_value, dtype=torch.float16)
    path.mkdir()
    save_file(tensors, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "config.json").write_text(json.dumps(CONFIG))
    return path


def _load(path):
    args = ModelArgs.from_config(CONFIG)
    return load_model(path, args, dtype=torch.float32, device=torch.device("cpu"), quantization=args.quantization)


def test_a_gptq_checkpoint_with_the_zero_biases_its_quantizer_saved_loads_as_without_them(tmp_path):
    """Found in the hunt: GPTQ-for-LLaMa and early AutoGPTQ stored a zero ``bias`` for every quantized Linear of a
    Llama (vLLM skips them); the engine refused such a checkpoint as holding tensors the model does not use."""
    plain = _load(_gptq_checkpoint(tmp_path / "plain"))
    with_biases = _load(_gptq_checkpoint(tmp_path / "biased", bias_value=0.0))
    assert isinstance(with_biases.layers[0].mlp.down_proj, Int4Linear)
    assert with_biases.layers[0].self_attn.qkv_proj.bias is None
    want = plain.state_dict()
    got = with_biases.state_dict()
    assert sorted(got) == sorted(want) and all(torch.equal(got[k], want[k]) for k in want)


def test_a_gptq_bias_that_is_not_zero_is_still_refused_by_name(tmp_path):
    """Dropping only zeros: a bias with values the architecture has no place for would change the outputs."""
    with pytest.raises(ValueError, match=r"has tensors this model does not use, e\.g\. \['model\.layers\.0\.mlp"):
        _load(_gptq_checkpoint(tmp_path / "m", bias_value=0.5))


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
DENSE = {"architectures": ["Qwen3ForCausalLM"], "vocab_size": 32, "hidden_size": 256, "num_hidden_layers": 1,
         "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "intermediate_size": 16,
         "max_position_embeddings": 4096, "rope_theta": 10000.0}


def test_yarns_pretrained_length_is_read_top_level_first_as_transformers_reads_it():
    """Found in the hunt: with ``original_max_position_embeddings`` both beside and inside the scaling (Phi-3 style),
    the engine took the scaling's and computed other frequencies than transformers, which takes the top-level one."""
    from transformers import Qwen3Config
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    cfg = {**DENSE, "original_max_position_embeddings": 2048, "rope_scaling": dict(YARN)}
    args = ModelArgs.from_config(cfg)
    assert args.rope_scaling is not None and args.rope_scaling["original_max_position_embeddings"] == 2048
    fields = {k: v for k, v in cfg.items() if k != "architectures"}
    inv_freq, _ = ROPE_INIT_FUNCTIONS["yarn"](Qwen3Config(**fields), "cpu")
    assert rope_inv_freq(args).equal(inv_freq)


def _header_only_dir(tmp_path, cfg):
    """config.json and a safetensors file holding two norms (the length check reads headers, and layer count only)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    save_file({"model.norm.weight": torch.ones(cfg["hidden_size"]),
               "model.layers.0.input_layernorm.weight": torch.ones(cfg["hidden_size"])},
              str(tmp_path / "model.safetensors"))
    return tmp_path


@pytest.mark.parametrize(("rope", "limit"), [
    (YARN, 2048),  # factor × original_max_position_embeddings (Qwen's documented long-context setting, scaled down)
    ({"rope_type": "linear", "factor": 4.0}, 4 * 4096),  # factor × max_position_embeddings
])
def test_max_model_len_reaches_the_context_a_rope_scaling_stretches_to(tmp_path, rope, limit):
    """Found in the hunt: Qwen3's config.json with YaRN added as Qwen documents it (factor 4 over 32,768 positions,
    ``--max-model-len 131072``) was refused at max_position_embeddings=40,960, so the scaling served nothing beyond."""
    max_pos = {"max_position_embeddings": 512} if rope["rope_type"] == "yarn" else {}
    cfg = {**DENSE, **max_pos, "rope_scaling": rope}
    d = _header_only_dir(tmp_path, cfg)
    assert preflight.check_model_dir(d, limit).max_model_len == limit
    assert preflight.check_model_dir(d, None).max_model_len == cfg["max_position_embeddings"]  # the default stays
    with pytest.raises(ValueError, match=rf"max_model_len={limit + 1} exceeds the model's max_position_embeddings="
                                         rf"{cfg['max_position_embeddings']}, {rope['rope_type']} RoPE scaling by 4.0 "
                                         rf"to {limit}; lower max_model_len"):
        preflight.check_model_dir(d, limit + 1)


def test_llama3_scaling_keeps_max_position_embeddings_as_the_limit(tmp_path):
    """Llama 3.1's config already gives the long context in max_position_embeddings: no stretching (as vLLM)."""
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
            "original_max_position_embeddings": 512}
    d = _header_only_dir(tmp_path, {**DENSE, "rope_scaling": rope})
    with pytest.raises(ValueError, match=r"max_model_len=4097 exceeds the model's max_position_embeddings=4096; lower"):
        preflight.check_model_dir(d, 4097)


@pytest.mark.parametrize("archs", [{}, {"architectures": None}, {"architectures": []}])
def test_a_config_saved_from_a_config_object_alone_is_told_which_architecture_to_add(tmp_path, archs):
    """Found in the hunt: ``LlamaConfig(...).save_pretrained(dir)`` writes model_type but no architectures (transformers
    builds the model from model_type); the engine answered "architectures=None is not supported; expected one of
    LlamaForCausalLM, …", as if Llama were not served."""
    cfg = {"model_type": "qwen3_moe", **archs, **{k: v for k, v in DENSE.items() if k != "architectures"}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    message = f"{tmp_path / 'config.json'} has model_type='qwen3_moe' but no architectures; add " \
              '"architectures": ["Qwen3MoeForCausalLM"] to it'
    with pytest.raises(ValueError) as excinfo:
        preflight.read_config(tmp_path)
    assert str(excinfo.value) == message
    with pytest.raises(ValueError, match=r"config.json has model_type='qwen3_moe' but no architectures; add"):
        ModelArgs.from_config(cfg)
    with pytest.raises(ValueError, match=r"architectures=(None|\[\]) in config.json is not supported; expected one of Llama"):
        ModelArgs.from_config({**cfg, "model_type": "gemma3"})
