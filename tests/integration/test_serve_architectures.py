"""Qwen3, Qwen3-MoE, Mixtral and Qwen2-MoE (issue 31, criterion 1): tiny random models built with transformers' own
config classes; greedy outputs token-identical to transformers ``generate`` in fp32 with prefix caching, chunked
prefill and preemption all on, and the MoE routing equal to transformers' router logits."""

import pytest
import torch
import transformers

from accelkit.core.serving_memory import kv_bytes_per_token
from accelkit.serve import LLM, SamplingParams
from accelkit.serve.models.moe import SparseMoE
from accelkit.serve.testing import hf_greedy, hf_model, random_prompts, save_model_dir

MAX_TOKENS = 16
PROMPTS = random_prompts(6, min_len=1, max_len=70, seed=11)
# a shared 40-token prefix: the later prompts hit the prefix cache
SHARED = [list(range(10, 50)) + p[:10] for p in PROMPTS[:3]]
BLOCK_SIZE = 16


def _qwen2_moe(seed):
    """No accelkit preset (the planner does not model its shared expert): transformers' config class directly."""
    config = transformers.Qwen2MoeConfig(
        vocab_size=512, hidden_size=64, intermediate_size=96, num_hidden_layers=3, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, num_experts=8, num_experts_per_tok=2,
        moe_intermediate_size=32, shared_expert_intermediate_size=48, mlp_only_layers=[1], bos_token_id=1,
        eos_token_id=2,
    )
    torch.manual_seed(seed)
    model = transformers.Qwen2MoeForCausalLM(config)
    model.generation_config.pad_token_id = 3
    return model.eval()


# name → a random transformers model: what each one exercises is in its comment
MODELS = {
    # per-head q/k RMSNorm; head_dim 32 while hidden_size / heads is 16
    "qwen3": lambda: hf_model("tiny-qwen3", seed=1),
    # layer 0 dense (mlp_only_layers), layers 1-2 sparse: top-2 of 8 with norm_topk_prob
    "qwen3-moe": lambda: hf_model("tiny-qwen3-moe", seed=2, num_hidden_layers=3, mlp_only_layers=[0]),
    # the Qwen routers' default: the k softmax probabilities used as they are, not renormalised
    "qwen3-moe-unnormalised": lambda: hf_model("tiny-qwen3-moe", seed=3, norm_topk_prob=False),
    # top-2 of 4, softmax renormalised over the two selected
    "mixtral": lambda: hf_model("tiny-mixtral", seed=4),
    # shared expert behind a sigmoid gate, q/k/v biases, a dense middle layer
    "qwen2-moe": lambda: _qwen2_moe(5),
}


MOE = [name for name in MODELS if "moe" in name or name == "mixtral"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """name → (transformers model, its saved directory), each built once for the module's tests."""
    cache = {}

    def get(name):
        if name not in cache:
            hf = MODELS[name]()
            with torch.no_grad():  # transformers zero-inits biases: random ones, so that a dropped one shows
                for param_name, param in hf.named_parameters():
                    if param_name.endswith(".bias"):
                        param.normal_(0.0, 0.5)
            cache[name] = hf, save_model_dir(hf, tmp_path_factory.mktemp(name) / "m")
        return cache[name]

    return get


def _tiny_kv_budget(hf):
    """12 blocks of 16 tokens: fewer than the prompts need at once, so the scheduler preempts."""
    c = hf.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    per_token = kv_bytes_per_token(num_layers=c.num_hidden_layers, num_kv_heads=c.num_key_value_heads,
                                   head_dim=head_dim, kv_cache_dtype="auto", dtype_bytes=4)
    return 12 * BLOCK_SIZE * per_token


@pytest.mark.parametrize("name", list(MODELS))
def test_greedy_equals_transformers_with_prefix_caching_chunking_and_preemption(name, built):
    hf, model_dir = built(name)
    ref = [hf_greedy(hf, p, MAX_TOKENS) for p in PROMPTS + SHARED]
    llm = LLM(str(model_dir), dtype="float32", kv_cache_memory_bytes=_tiny_kv_budget(hf), max_model_len=160,
              max_num_batched_tokens=24, block_size=BLOCK_SIZE)
    assert llm.engine.config.enable_prefix_caching and llm.engine.config.enable_chunked_prefill
    outs = llm.generate(PROMPTS, SamplingParams.greedy(MAX_TOKENS))
    stats = llm.engine.get_stats()
    assert stats.num_preemptions > 0
    first = llm.generate(SHARED[:1], SamplingParams.greedy(MAX_TOKENS))
    rest = llm.generate(SHARED[1:], SamplingParams.greedy(MAX_TOKENS))
    assert [o.token_ids for o in outs + first + rest] == ref
    assert all(o.metrics.num_cached_tokens >= 2 * BLOCK_SIZE for o in rest)  # the prefix came from the cache
    ours = sum(p.numel() for p in llm.engine.runner.model.parameters())
    assert ours == sum(p.numel() for p in hf.parameters())  # every tensor of the checkpoint was loaded


@pytest.mark.parametrize("name", MOE)
def test_routing_equals_transformers_router_logits(name, built):
    hf, model_dir = built(name)
    prompt = PROMPTS[0] + PROMPTS[1]
    llm = LLM(str(model_dir), dtype="float32", kv_cache_memory_bytes=8 * 2**20, max_model_len=256,
              max_num_batched_tokens=256, enable_prefix_caching=False)
    moe_layers = [m for m in llm.engine.runner.model.modules() if isinstance(m, SparseMoE)]
    for layer in moe_layers:
        layer.router_logits = []
    llm.generate([prompt], SamplingParams.greedy(1))  # one step: the whole prompt's prefill
    with torch.inference_mode():
        want = hf(torch.tensor([prompt]), output_router_logits=True).router_logits  # one (T, E) per sparse layer
    num_sparse = hf.config.num_hidden_layers - len(getattr(hf.config, "mlp_only_layers", None) or [])
    assert len(want) == len(moe_layers) == num_sparse
    k = hf.config.num_experts_per_tok
    for layer, expected in zip(moe_layers, want, strict=True):
        (got,) = layer.router_logits
        assert got.shape == expected.shape == (len(prompt), expected.shape[-1])
        torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
        # the same k experts for every token
        assert torch.equal(got.topk(k).indices.sort().values, expected.topk(k).indices.sort().values), name
