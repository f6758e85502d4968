"""Greedy outputs are token-identical to transformers ``generate`` (fp32, same weights) — for mixed prompt
lengths, with prefix caching on and off, chunked prefill, preemption forced by a tiny KV budget, sharded
checkpoints, tied (Qwen2) and untied (Llama, Llama-3 rope scaling) embeddings, a Mistral window, YaRN, and the
biases config.json's attention_bias / mlp_bias give each family."""

import json

import pytest
import torch
import transformers

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import hf_greedy, hf_model, random_prompts, save_model_dir, save_tiny_model

MAX_TOKENS = 24
PROMPTS = random_prompts(8, min_len=1, max_len=90, seed=7)
# shared 40-token system prefix + different questions: prefix caching has something to hit
SHARED = [list(range(10, 50)) + p[:12] for p in PROMPTS[1:5]]
KV_BYTES = 8 * 2**20  # small: allocating the 1 GiB CPU default costs more than these tests


def reference(model_dir, prompts):
    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return [hf_greedy(hf, p, MAX_TOKENS) for p in prompts]


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    d = save_tiny_model(tmp_path_factory.mktemp("llama") / "m", "tiny-llama", seed=1)
    return d, reference(d, PROMPTS), reference(d, SHARED)


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory):
    d = save_tiny_model(tmp_path_factory.mktemp("qwen2") / "m", "tiny-qwen2", seed=2)
    return d, reference(d, PROMPTS), reference(d, SHARED)


def generate(model_dir, prompts, **kwargs):
    llm = LLM(str(model_dir), **{"kv_cache_memory_bytes": KV_BYTES, **kwargs})
    outs = llm.generate(prompts, SamplingParams.greedy(MAX_TOKENS))
    return [o.token_ids for o in outs], llm.engine.get_stats()


# tiny KV budget: 24 blocks of 16 tokens (K+V, 2 layers, 2 KV heads, head_dim 16, fp32 = 512 B/token)
TINY_KV = 24 * 16 * 512

CONFIGS = {
    "prefix-caching-on": {},
    "prefix-caching-off": {"enable_prefix_caching": False},
    "chunked-prefill": {"max_num_batched_tokens": 24},
    "no-chunking": {"enable_chunked_prefill": False, "max_model_len": 256, "max_num_batched_tokens": 256},
    "preemption": {"kv_cache_memory_bytes": TINY_KV, "max_model_len": 160},
    "block-size-4": {"block_size": 4, "max_num_seqs": 3},
}


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_greedy_equals_transformers(name, family, request):
    model_dir, ref, _ = request.getfixturevalue(family)
    got, stats = generate(model_dir, PROMPTS, **CONFIGS[name])
    assert got == ref
    assert stats.kv_cache_usage == 0.0 and stats.num_running == 0
    if name == "preemption":
        assert stats.num_preemptions > 0


@pytest.mark.parametrize("family", ["llama", "qwen2"])
def test_prefix_cache_hits_keep_outputs_exact(family, request):
    model_dir, _, ref = request.getfixturevalue(family)
    llm = LLM(str(model_dir), max_num_batched_tokens=64, kv_cache_memory_bytes=KV_BYTES)
    first = llm.generate(SHARED[:1], SamplingParams.greedy(MAX_TOKENS))  # fills the cache with the prefix
    rest = llm.generate(SHARED[1:], SamplingParams.greedy(MAX_TOKENS))
    assert [o.token_ids for o in first + rest] == ref
    stats = llm.engine.get_stats()
    assert stats.prefix_cache_hits >= 3 * 32  # the two full 16-token blocks of the prefix, for each later prompt
    assert all(o.metrics.num_cached_tokens >= 32 for o in rest)
    # the same prompt again is served from the cache up to its last token, and still exact
    again = llm.generate(SHARED[:1], SamplingParams.greedy(MAX_TOKENS))
    assert again[0].token_ids == ref[0] and again[0].metrics.num_cached_tokens > 32


def test_sharded_checkpoint_and_mistral_sliding_window(tmp_path):
    d = save_tiny_model(tmp_path / "mistral", "tiny-mistral", seed=3, sliding_window=8, max_shard_size="100KB")
    assert (d / "model.safetensors.index.json").exists()
    assert len(set(json.loads((d / "model.safetensors.index.json").read_text())["weight_map"].values())) > 1
    prompts = PROMPTS[:4]
    ref = reference(d, prompts)
    got, _ = generate(d, prompts, max_num_batched_tokens=16)
    assert got == ref


def test_qwen3_with_yarn_rope_scaling(tmp_path):
    """YaRN as Qwen documents it for long contexts (factor 4 over the pretrained length), here over 32 pretrained
    positions so that prompts of up to 90 tokens cross it: frequencies blended along the ramp and cos/sin scaled by
    the attention factor, token-identical to transformers."""
    d = save_tiny_model(tmp_path / "qwen3", "tiny-qwen3", seed=4)
    config = json.loads((d / "config.json").read_text())
    config.pop("rope_parameters", None)
    config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32}
    (d / "config.json").write_text(json.dumps(config))
    prompts = PROMPTS[:4]
    got, _ = generate(d, prompts, max_num_batched_tokens=32)
    assert got == reference(d, prompts)


def with_random_biases(model):
    """transformers initialises biases to zero: a bias the engine dropped would change no output."""
    torch.manual_seed(5)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.5)
    return model


# transformers builds biases from these flags in Llama only (q/k/v/o, gate/up/down); Qwen2 always has q/k/v
# biases and no others, Mistral none — whatever its config.json says
BIAS_FLAGS = {"attention_bias": True, "mlp_bias": True}
BIAS_CASES = {
    "llama-attention-bias": ("tiny-llama", {"attention_bias": True}, 4 * 2),
    "llama-mlp-bias": ("tiny-llama", {"mlp_bias": True}, 3 * 2),
    "llama-both": ("tiny-llama", BIAS_FLAGS, 7 * 2),
    "mistral-flags-build-none": ("tiny-mistral", BIAS_FLAGS, 0),
    "qwen2-flags-keep-qkv-only": ("tiny-qwen2", BIAS_FLAGS, 3 * 2),
}


@pytest.mark.parametrize("case", list(BIAS_CASES))
def test_config_bias_flags_load_the_biases_transformers_builds(case, tmp_path):
    preset, flags, num_biases = BIAS_CASES[case]
    hf = with_random_biases(hf_model(preset, seed=4, **flags))
    hf_params = dict(hf.named_parameters())
    assert sum(name.endswith(".bias") for name in hf_params) == num_biases  # 2 layers
    model_dir = save_model_dir(hf, tmp_path / "m")
    prompts = PROMPTS[:4]
    ref = [hf_greedy(hf, p, MAX_TOKENS) for p in prompts]
    llm = LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_num_batched_tokens=32)
    ours = llm.engine.runner.model.parameters()
    assert sum(p.numel() for p in ours) == sum(p.numel() for p in hf_params.values())
    assert [o.token_ids for o in llm.generate(prompts, SamplingParams.greedy(MAX_TOKENS))] == ref
