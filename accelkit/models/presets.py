"""Architecture presets with the exact dimensions of the published configs. Presets are named Python
functions derived from each other; ``PRESETS`` maps the CLI names to them."""

from __future__ import annotations

from collections.abc import Callable

from accelkit.core import ModelSpec, UnknownNameError

_LLAMA3_ROPE = {
    "rope_type": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8192,
}


def _llama(name: str, **dims: object) -> ModelSpec:
    base: dict[str, object] = dict(
        kind="decoder", family="llama", gated_mlp=True, norm="rmsnorm", position="rope", num_kv_heads=8,
        vocab_size=128256, max_seq_len=131072, rope_theta=500000.0, rope_scaling=dict(_LLAMA3_ROPE),
        norm_eps=1e-5,
    )
    base.update(dims)
    return ModelSpec(name=name, **base)  # type: ignore[arg-type]


def llama3_8b() -> ModelSpec:
    """Llama 3.1 8B: 32 layers, h 4096, 32 heads / 8 KV heads, SwiGLU 14336, vocab 128256."""
    return _llama("llama-3.1-8b", num_layers=32, hidden_size=4096, num_heads=32, ffn_hidden_size=14336)


def llama3_70b() -> ModelSpec:
    """Llama 3.1 70B: 80 layers, h 8192, 64 heads / 8 KV heads, SwiGLU 28672."""
    return _llama("llama-3.1-70b", num_layers=80, hidden_size=8192, num_heads=64, ffn_hidden_size=28672)


def llama3_0_8b() -> ModelSpec:
    """Llama 3 8B (April 2024): Llama 3.1 8B's dimensions with an 8K context and plain RoPE (θ 500000, no llama3
    scaling) — its own preset, so `--model llama-3-8b` never silently plans the 128K-context 3.1."""
    return llama3_8b().replace(name="llama-3-8b", max_seq_len=8192, rope_scaling=None)


def llama3_0_70b() -> ModelSpec:
    """Llama 3 70B (April 2024): Llama 3.1 70B's dimensions with an 8K context and plain RoPE."""
    return llama3_70b().replace(name="llama-3-70b", max_seq_len=8192, rope_scaling=None)


def llama3_405b() -> ModelSpec:
    """Llama 3.1 405B: 126 layers, h 16384, 128 heads / 8 KV heads, SwiGLU 53248."""
    return _llama("llama-3.1-405b", num_layers=126, hidden_size=16384, num_heads=128, ffn_hidden_size=53248)


def qwen25_7b() -> ModelSpec:
    """Qwen2.5-7B-Instruct: 28 layers, h 3584, 28 heads / 4 KV heads, q/k/v bias, SwiGLU 18944, vocab 152064, 32768
    positions (θ 1e6, rms_norm_eps 1e-6), as its config.json lists them. The base Qwen2.5-7B has the same dimensions but
    lists max_position_embeddings 131072: give its config.json to plan that context."""
    return ModelSpec(
        name="qwen2.5-7b", kind="decoder", family="qwen2", num_layers=28, hidden_size=3584, num_heads=28,
        num_kv_heads=4, ffn_hidden_size=18944, vocab_size=152064, max_seq_len=32768, gated_mlp=True,
        qkv_bias=True, rope_theta=1000000.0, norm_eps=1e-6,
    )


def qwen25_72b() -> ModelSpec:
    """Qwen2.5-72B-Instruct: 80 layers, h 8192, 64 heads / 8 KV heads, SwiGLU 29568, 32768 positions, rms_norm_eps
    1e-6 (its config.json; 72.7B parameters, its model card). The base Qwen2.5-72B lists 131072 positions."""
    return qwen25_7b().replace(
        name="qwen2.5-72b", num_layers=80, hidden_size=8192, num_heads=64, num_kv_heads=8, ffn_hidden_size=29568
    )


def qwen3_8b() -> ModelSpec:
    """Qwen3-8B (the post-trained release): 36 layers, h 4096, 32 heads / 8 KV heads of 128, per-head q/k RMSNorm, no
    bias, SwiGLU 12288, vocab 151936, 40960 positions. Qwen3-8B-Base has the same dimensions with 32768 positions."""
    return ModelSpec(
        name="qwen3-8b", kind="decoder", family="qwen3", num_layers=36, hidden_size=4096, num_heads=32,
        num_kv_heads=8, ffn_hidden_size=12288, vocab_size=151936, max_seq_len=40960, gated_mlp=True,
        qk_norm=True, rope_theta=1000000.0, norm_eps=1e-6,
    )


def qwen3_32b() -> ModelSpec:
    """Qwen3-32B (post-trained): 64 layers, h 5120, 64 heads / 8 KV heads of 128, SwiGLU 25600, 40960 positions."""
    return qwen3_8b().replace(name="qwen3-32b", num_layers=64, hidden_size=5120, num_heads=64, head_dim=128,
                              ffn_hidden_size=25600)


def qwen3_30b_a3b() -> ModelSpec:
    """Qwen3-30B-A3B (post-trained): 48 layers, h 2048, 32 heads / 4 KV heads of 128, 128 SwiGLU experts of 768 per
    layer, top-8 (norm_topk_prob), every layer sparse, no shared expert, 40960 positions (the -Base release: 32768)."""
    return qwen3_8b().replace(
        name="qwen3-30b-a3b", kind="moe", family="qwen3_moe", num_layers=48, hidden_size=2048, num_heads=32,
        num_kv_heads=4, head_dim=128, ffn_hidden_size=768, num_experts=128, experts_per_token=8,
    )


def qwen3_235b_a22b() -> ModelSpec:
    """Qwen3-235B-A22B (post-trained): 94 layers, h 4096, 64 heads / 4 KV heads of 128, 128 experts of 1536, top-8,
    40960 positions."""
    return qwen3_30b_a3b().replace(
        name="qwen3-235b-a22b", num_layers=94, hidden_size=4096, num_heads=64, ffn_hidden_size=1536,
    )


def mistral_7b() -> ModelSpec:
    """Mistral 7B v0.1: 32 layers, h 4096, 32 heads / 8 KV heads, SwiGLU 14336, vocab 32000, 4096-token sliding
    window over a 32768 context (its config.json's sliding_window)."""
    return ModelSpec(
        name="mistral-7b", kind="decoder", family="mistral", num_layers=32, hidden_size=4096, num_heads=32,
        num_kv_heads=8, ffn_hidden_size=14336, vocab_size=32000, max_seq_len=32768, sliding_window=4096,
        gated_mlp=True, rope_theta=10000.0, norm_eps=1e-5,
    )


def mixtral_8x7b() -> ModelSpec:
    """Mixtral 8x7B: Mistral-7B attention without its sliding window (config.json: null), 8 SwiGLU experts of
    14336, top-2 routing."""
    return mistral_7b().replace(
        name="mixtral-8x7b", kind="moe", family="mixtral", num_experts=8, experts_per_token=2, rope_theta=1e6,
        sliding_window=None,
    )


def gpt3_175b() -> ModelSpec:
    """GPT-3 175B (Brown et al. 2020): 96 layers, h 12288, 96 heads, 4h MLP, 2048 context, GPT-2 layout."""
    return ModelSpec(
        name="gpt3-175b", kind="decoder", family="gpt2", num_layers=96, hidden_size=12288, num_heads=96,
        ffn_hidden_size=4 * 12288, vocab_size=50257, max_seq_len=2048, linear_bias=True, norm="layernorm",
        position="learned", tied_embeddings=True,
    )


def bert_base() -> ModelSpec:
    """BERT-base (uncased): 12 layers, h 768, 12 heads, 3072 MLP, vocab 30522, with pooler."""
    return ModelSpec(
        name="bert-base", kind="encoder", family="bert", num_layers=12, hidden_size=768, num_heads=12,
        ffn_hidden_size=3072, vocab_size=30522, max_seq_len=512, linear_bias=True, norm="layernorm",
        position="learned", type_vocab_size=2, pooler=True, norm_eps=1e-12,
    )


def bert_large() -> ModelSpec:
    """BERT-large: 24 layers, h 1024, 16 heads, 4096 MLP."""
    return bert_base().replace(name="bert-large", num_layers=24, hidden_size=1024, num_heads=16, ffn_hidden_size=4096)


def vit_b16() -> ModelSpec:
    """ViT-B/16 at 224×224: 12 layers, h 768, 12 heads, 3072 MLP, 196 patches + class token, pooler."""
    return ModelSpec(
        name="vit-b16", kind="encoder", family="vit", num_layers=12, hidden_size=768, num_heads=12,
        ffn_hidden_size=3072, max_seq_len=197, linear_bias=True, norm="layernorm", position="learned",
        image_size=224, patch_size=16, pooler=True, norm_eps=1e-12,
    )


def resnet50() -> ModelSpec:
    """ResNet-50 (v1.5 layout): bottleneck stages 3-4-6-3, widths 256…2048, 1000-class head."""
    return ModelSpec(
        name="resnet-50", kind="cnn", family="resnet", stage_depths=(3, 4, 6, 3),
        stage_widths=(256, 512, 1024, 2048), stem_width=64, image_size=224, num_labels=1000,
    )


def resnet152() -> ModelSpec:
    """ResNet-152: bottleneck stages 3-8-36-3."""
    return resnet50().replace(name="resnet-152", stage_depths=(3, 8, 36, 3))


# ---- tiny variants: same code paths, built and run in milliseconds in tests -----------------------
def tiny_llama() -> ModelSpec:
    """2-layer Llama with GQA and Llama-3 rope scaling (tests)."""
    return _llama(
        "tiny-llama", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=128,
        vocab_size=512, max_seq_len=2048,
        rope_scaling={**_LLAMA3_ROPE, "original_max_position_embeddings": 256},
    )


def tiny_qwen2() -> ModelSpec:
    """2-layer Qwen2 with q/k/v bias and tied embeddings (tests)."""
    return qwen25_7b().replace(
        name="tiny-qwen2", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=128,
        vocab_size=512, max_seq_len=1024, tied_embeddings=True,
    )


def tiny_qwen3() -> ModelSpec:
    """2-layer Qwen3 with q/k norms and a head_dim (32) that is not hidden_size / num_heads (tests)."""
    return qwen3_8b().replace(
        name="tiny-qwen3", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=32,
        ffn_hidden_size=128, vocab_size=512, max_seq_len=1024,
    )


def tiny_qwen3_moe() -> ModelSpec:
    """2-layer Qwen3-MoE with 8 experts of 64, top-2 (tests)."""
    return qwen3_30b_a3b().replace(
        name="tiny-qwen3-moe", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, head_dim=None,
        ffn_hidden_size=64, vocab_size=512, max_seq_len=1024, num_experts=8, experts_per_token=2,
    )


def tiny_mistral() -> ModelSpec:
    """2-layer Mistral (tests; no sliding window unless a test gives one)."""
    return mistral_7b().replace(
        name="tiny-mistral", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=128,
        vocab_size=512, max_seq_len=1024, sliding_window=None,
    )


def tiny_mixtral() -> ModelSpec:
    """2-layer Mixtral with 4 experts, top-2 (tests)."""
    return mixtral_8x7b().replace(
        name="tiny-mixtral", num_layers=2, hidden_size=64, num_heads=4, num_kv_heads=2, ffn_hidden_size=128,
        vocab_size=512, max_seq_len=1024, num_experts=4, experts_per_token=2,
    )


def tiny_gpt() -> ModelSpec:
    """2-layer GPT-2/3 layout (tests)."""
    return gpt3_175b().replace(
        name="tiny-gpt", num_layers=2, hidden_size=64, num_heads=4, ffn_hidden_size=256, vocab_size=512,
        max_seq_len=256,
    )


def tiny_bert() -> ModelSpec:
    """2-layer BERT with hidden 64 (tests)."""
    return bert_base().replace(
        name="tiny-bert", num_layers=2, hidden_size=64, num_heads=4, ffn_hidden_size=256, vocab_size=1024,
        max_seq_len=512,
    )


def tiny_vit() -> ModelSpec:
    """2-layer ViT on 32×32 images with 8×8 patches (tests)."""
    return vit_b16().replace(
        name="tiny-vit", num_layers=2, hidden_size=64, num_heads=4, ffn_hidden_size=256, image_size=32,
        patch_size=8, max_seq_len=17,
    )


def tiny_resnet() -> ModelSpec:
    """Bottleneck ResNet with stages 1-1-1-1, widths 32…256, on 64×64 images, 10 classes (tests)."""
    return resnet50().replace(
        name="tiny-resnet", stage_depths=(1, 1, 1, 1), stage_widths=(32, 64, 128, 256), stem_width=16,
        image_size=64, num_labels=10,
    )


PRESETS: dict[str, Callable[[], ModelSpec]] = {
    f().name: f
    for f in (
        llama3_8b, llama3_70b, llama3_405b, llama3_0_8b, llama3_0_70b, qwen25_7b, qwen25_72b, qwen3_8b, qwen3_32b,
        qwen3_30b_a3b, qwen3_235b_a22b, mistral_7b, mixtral_8x7b, gpt3_175b, bert_base, bert_large, vit_b16, resnet50,
        resnet152, tiny_llama, tiny_qwen2, tiny_qwen3, tiny_qwen3_moe, tiny_mistral, tiny_mixtral, tiny_gpt, tiny_bert,
        tiny_vit, tiny_resnet,
    )
}
#: other spellings of the same model (never a different one: llama-3-70b is its own preset, not llama-3.1-70b)
_ALIASES = {"gpt3": "gpt3-175b", "vit-base": "vit-b16"}


def get_preset(name: str) -> ModelSpec:
    """A preset by name (case-insensitive); unknown names suggest the closest ones."""
    key = name.lower()
    key = _ALIASES.get(key, key)
    if key not in PRESETS:
        raise UnknownNameError("model", name, PRESETS, listing=list(PRESETS),
                               more="or give the path of a Hugging Face config.json (or of a directory holding one)")
    return PRESETS[key]()
