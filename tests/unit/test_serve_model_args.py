"""ModelArgs reads the architecture differences from config.json as transformers does (pure Python, no weights)."""

import pytest

from accelkit.serve.models.args import ModelArgs

BASE = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 4,
        "num_attention_heads": 4, "num_key_value_heads": 2}


def args(arch, **fields):
    return ModelArgs.from_config({"architectures": [arch], **BASE, **fields})


@pytest.mark.parametrize(("fields", "sparse"), [
    ({}, (0, 1, 2, 3)),
    ({"mlp_only_layers": [0, 2]}, (1, 3)),
    ({"decoder_sparse_step": 2}, (1, 3)),  # transformers: sparse iff (i + 1) % step == 0
    ({"decoder_sparse_step": 2, "mlp_only_layers": [1]}, (3,)),
])
def test_qwen_moe_sparse_layers_follow_transformers_rule(fields, sparse):
    a = args("Qwen3MoeForCausalLM", num_experts=8, num_experts_per_tok=2, **fields)
    assert a.moe is not None and a.moe.sparse_layers == sparse
    assert [a.is_sparse_layer(i) for i in range(4)] == [i in sparse for i in range(4)]


def test_routing_normalisation_and_expert_names_per_architecture():
    mixtral = args("MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2)
    assert mixtral.moe is not None and mixtral.moe.norm_topk_prob  # Mixtral always renormalises the top-k
    assert mixtral.moe.intermediate_size == 64 and mixtral.moe.checkpoint_prefix == "block_sparse_moe"
    qwen = args("Qwen3MoeForCausalLM", num_experts=8, num_experts_per_tok=2, moe_intermediate_size=16)
    assert qwen.moe is not None and not qwen.moe.norm_topk_prob and qwen.moe.intermediate_size == 16
    assert qwen.qk_norm and qwen.moe.shared_expert_intermediate_size is None
    qwen2 = args("Qwen2MoeForCausalLM", num_experts=8, shared_expert_intermediate_size=48)
    assert qwen2.moe is not None and qwen2.moe.shared_expert_intermediate_size == 48 and qwen2.qkv_bias
    assert args("Qwen3ForCausalLM").head_dim == 128  # Qwen3Config's default, not hidden_size / heads
    assert args("Qwen3ForCausalLM").moe is None


@pytest.mark.parametrize(("fields", "message"), [
    ({"num_experts": 4, "num_experts_per_tok": 5}, "num_experts_per_tok=5"),
    ({"use_sliding_window": True}, "use_sliding_window=true"),
    ({"quantization_config": {"quant_method": "awq", "bits": 4}}, "quantization_config.quant_method='awq'"),
])
def test_unsupported_settings_are_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        args("Qwen3MoeForCausalLM", **fields)
