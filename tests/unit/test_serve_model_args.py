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
    ({"hidden_act": "gelu"}, "hidden_act='gelu' in config.json is not supported"),
])
def test_unsupported_settings_are_refused_naming_the_field(fields, message):
    with pytest.raises(ValueError, match=message):
        args("Qwen3MoeForCausalLM", **fields)


def test_swish_is_silu_as_transformers_reads_it():
    """transformers' ACT2FN maps "swish" to SiLU; it was refused as unsupported."""
    assert args("Qwen3ForCausalLM", hidden_act="swish") == args("Qwen3ForCausalLM", hidden_act="silu")


def test_fields_config_json_leaves_out_take_each_architectures_transformers_default():
    """Found in review, each checked against transformers' own model: MixtralConfig's rope_theta is 1e6 and its
    rms_norm_eps 1e-5 (not Llama's 1e4 and 1e-6); MistralConfig's sliding_window is 4096 when the key is absent
    (an explicit null: none)."""
    mixtral = args("MixtralForCausalLM", num_local_experts=4, num_experts_per_tok=2)
    assert (mixtral.rope_theta, mixtral.rms_norm_eps, mixtral.sliding_window) == (1e6, 1e-5, None)
    llama = args("LlamaForCausalLM")
    assert (llama.rope_theta, llama.rms_norm_eps, llama.sliding_window) == (10000.0, 1e-6, None)
    assert args("MistralForCausalLM").sliding_window == 4096
    assert args("MistralForCausalLM", sliding_window=None).sliding_window is None
    assert args("MistralForCausalLM", sliding_window=300).sliding_window == 300


@pytest.mark.parametrize(("top", "inner", "want"), [
    (None, None, 1024),  # neither: the context (transformers' default; it was a bare KeyError)
    (None, 64, 64),
    (32, 64, 32),  # a top-level value goes first, as transformers reads it (Phi-3 style)
])
def test_llama3_rope_scalings_original_length_is_read_as_transformers_reads_it(top, inner, want):
    rope = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}
    if inner is not None:
        rope["original_max_position_embeddings"] = inner
    fields = {"rope_scaling": rope, "max_position_embeddings": 1024}
    if top is not None:
        fields["original_max_position_embeddings"] = top
    a = args("LlamaForCausalLM", **fields)
    assert a.rope_scaling is not None and a.rope_scaling["original_max_position_embeddings"] == want


LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0}


@pytest.mark.parametrize(("rope", "message"), [
    ({"rope_type": "linear"}, r"rope_parameters.factor is missing .*'linear' needs factor\); add it"),
    ({"rope_type": "llama3", "factor": 8.0}, "rope_parameters.low_freq_factor is missing"),
    ({**LLAMA3, "high_freq_factor": None}, "rope_parameters.high_freq_factor is missing"),
    ({**LLAMA3, "factor": 0}, r"rope_parameters.factor=0 in config.json is not valid; expected a positive number"),
    ({**LLAMA3, "low_freq_factor": "1"}, r"low_freq_factor='1' .* expected a positive number"),
    ({**LLAMA3, "factor": True}, "factor=True"),
    ({**LLAMA3, "original_max_position_embeddings": -8}, "original_max_position_embeddings=-8"),
    ({**LLAMA3, "high_freq_factor": 1.0}, r"high_freq_factor=1.0 in config.json must be greater than low_freq"),
])
def test_a_rope_scaling_without_the_fields_its_type_computes_with_is_refused_naming_the_field(rope, message):
    """Found in review: these passed here and failed later, inside transformers' tokenizer loading (which reads
    config.json), reported as a missing tokenizer.json."""
    with pytest.raises(ValueError, match=message):
        args("LlamaForCausalLM", rope_parameters={**rope, "rope_theta": 500000.0})


def test_an_older_config_names_rope_scaling_and_a_complete_scaling_is_kept():
    with pytest.raises(ValueError, match=r"rope_scaling.factor is missing"):
        args("LlamaForCausalLM", rope_scaling={"type": "linear"})
    assert args("LlamaForCausalLM", rope_scaling={"type": "linear", "factor": 2}).rope_scaling == {
        "type": "linear", "factor": 2, "rope_type": "linear"}
    a = args("LlamaForCausalLM", rope_parameters={**LLAMA3, "rope_theta": 500000.0}, max_position_embeddings=512)
    assert a.rope_scaling == {**LLAMA3, "original_max_position_embeddings": 512} and a.rope_theta == 500000.0


YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


@pytest.mark.parametrize("rope", [
    YARN,  # Qwen's documented long-context setting
    {**YARN, "attention_factor": None, "truncate": False},  # nulls and the unrounded ramp, as newer configs write them
    {"rope_type": "yarn", "factor": 40.0, "original_max_position_embeddings": 4096, "beta_fast": 32, "beta_slow": 1,
     "mscale": 1.0, "mscale_all_dim": 1.0},  # DeepSeek-V3's: the attention factor a ratio of two mscales
    {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096, "mscale": 0.707,
     "mscale_all_dim": 1.0},
    {**YARN, "attention_factor": 1.2},
    {"type": "yarn", "factor": 2.0, "original_max_position_embeddings": 8192, "beta_fast": 16, "beta_slow": 2},
])
def test_yarn_inverse_frequencies_and_attention_factor_are_transformers_own(rope):
    """The same float32 bits as transformers' YaRN (ROPE_INIT_FUNCTIONS['yarn']), and the same factor on cos/sin."""
    transformers = pytest.importorskip("transformers")
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from accelkit.serve.models.llama import rope_attention_factor, rope_inv_freq

    fields = dict(hidden_size=256, intermediate_size=512, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, head_dim=64, vocab_size=300, max_position_embeddings=131072,
                  rope_theta=1000000.0, rms_norm_eps=1e-6)
    ours = args("Qwen3ForCausalLM", **fields, rope_scaling=dict(rope))
    inv_freq, factor = ROPE_INIT_FUNCTIONS["yarn"](transformers.Qwen3Config(**fields, rope_scaling=dict(rope)), "cpu")
    assert rope_inv_freq(ours).equal(inv_freq)
    assert rope_attention_factor(ours) == factor


@pytest.mark.parametrize(("rope", "message"), [
    ({"rope_type": "yarn", "factor": 4.0}, r"rope_scaling.original_max_position_embeddings is missing"),
    ({"rope_type": "yarn", "original_max_position_embeddings": 32768}, r"rope_scaling.factor is missing"),
    ({**YARN, "beta_fast": "32"}, r"rope_scaling.beta_fast='32' in config.json is not valid; expected a positive "
                                  r"number or null"),
    ({**YARN, "attention_factor": 0}, r"rope_scaling.attention_factor=0"),
    ({**YARN, "truncate": "no"}, r"rope_scaling.truncate='no' in config.json is not valid; expected true or false"),
])
def test_a_yarn_scaling_it_cannot_compute_with_is_refused_naming_the_field(rope, message):
    with pytest.raises(ValueError, match=message):
        args("Qwen3ForCausalLM", rope_scaling=rope)


@pytest.mark.parametrize("arch", ["LlamaForCausalLM", "MistralForCausalLM", "MixtralForCausalLM", "Qwen2ForCausalLM",
                                  "Qwen3ForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM"])
def test_a_config_without_the_kv_heads_context_eps_and_theta_is_served_as_transformers_builds_it(arch):
    """The engine read a left-out num_key_value_heads as one per head and max_position_embeddings as 2048 for every
    architecture (the planner had transformers' per-model-type table): a Mistral config without the key built 32 KV
    heads where transformers builds 8 — its checkpoint's k_proj did not load — and a Qwen2 one was capped at 2,048
    tokens of context where transformers allows 32,768. Both now read the one table."""
    import transformers

    from accelkit.models.hf import DECODER_ARCHITECTURES

    minimal = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 32, "intermediate_size": 32,
               "vocab_size": 64}
    model_type = next(t for t, a in DECODER_ARCHITECTURES.items() if a == arch)
    reference = transformers.AutoConfig.for_model(model_type, **minimal)
    a = ModelArgs.from_config({"architectures": [arch], **minimal})
    assert a.num_kv_heads == reference.num_key_value_heads
    assert a.max_position_embeddings == reference.max_position_embeddings
    assert a.rms_norm_eps == reference.rms_norm_eps
    assert a.rope_theta == reference.rope_parameters["rope_theta"]


def test_a_left_out_kv_heads_default_that_does_not_divide_the_heads_is_refused_naming_the_key():
    with pytest.raises(ValueError, match=r"num_key_value_heads in config.json is missing: transformers' MistralConfig "
                                         r"then uses 8, which num_attention_heads 4 is not a multiple of"):
        ModelArgs.from_config({"architectures": ["MistralForCausalLM"], **{k: v for k, v in BASE.items()
                                                                          if k != "num_key_value_heads"}})
