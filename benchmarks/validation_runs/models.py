"""Model dimensions of the validation runs, each from the source named in its docstring."""

from __future__ import annotations

from accelkit.core import ModelSpec
from accelkit.models import get_preset

_MPT_DIMS = {  # d_model, n_layers (llm-foundry yamls/pretrain/mpt-*.yaml; the other sizes checked against NumParams)
    "125m": (768, 12), "350m": (1024, 24), "760m": (1536, 24), "1b": (2048, 24), "3b": (2560, 32),
    "7b": (4096, 32), "13b": (5120, 40), "30b": (7168, 48), "70b": (8192, 80),
}


def mpt(size: str, seq: int) -> ModelSpec:
    """MPT as llm-foundry benchmarks it: LayerNorm without bias, learned positions (NumParams grows with seq), GELU
    MLP ×4, tied embeddings, vocab 50368, d_model / 128 heads."""
    d, layers = _MPT_DIMS[size]
    return ModelSpec(name=f"mpt-{size}", kind="decoder", family="gpt2", num_layers=layers, hidden_size=d,
                     num_heads=d // 128, ffn_hidden_size=4 * d, vocab_size=50368, max_seq_len=seq, norm="layernorm",
                     position="learned", tied_embeddings=True, linear_bias=False)


def llama2(size: str) -> ModelSpec:
    """Llama 2 as torchtrain's llama_configs and NeMo's Llama2Config{7,13,70}B define it (vocab 32000, 4096)."""
    base = get_preset("llama-3.1-8b").replace(vocab_size=32000, max_seq_len=4096, rope_theta=10000.0,
                                              rope_scaling=None)
    dims = {"7b": (32, 4096, 32, 32, 11008), "13b": (40, 5120, 40, 40, 13824), "70b": (80, 8192, 64, 8, 28672)}
    layers, h, heads, kv, ffn = dims[size]
    return base.replace(name=f"llama-2-{size}", num_layers=layers, hidden_size=h, num_heads=heads, num_kv_heads=kv,
                        ffn_hidden_size=ffn)


def gpt(name: str, heads: int, hidden: int, layers: int, *, vocab: int = 51200, seq: int = 2048) -> ModelSpec:
    """A GPT-3-style model as Megatron-LM and NeMo build it: LayerNorm, GELU MLP 4h, learned positions, biases,
    tied embeddings (Megatron-LM's papers: vocabulary 51200, context 2048)."""
    return get_preset("gpt3-175b").replace(name=name, num_layers=layers, hidden_size=hidden, num_heads=heads,
                                           ffn_hidden_size=4 * hidden, vocab_size=vocab, max_seq_len=seq)


def nemotron(size: str) -> ModelSpec:
    """Nemotron as NeMo's nemotron.py defines it (Nemotron3Config8B/22B, Nemotron4Config15B/340B): LayerNorm,
    squared-ReLU MLP (not gated), no biases, RoPE, untied embeddings; vocabulary 256000 (the 256k SentencePiece
    model dgxc-benchmarking's nemotron recipe ships)."""
    dims = {"8b": (32, 4096, 32, None, 16384), "22b": (40, 6144, 48, None, 24576),
            "15b": (32, 6144, 48, 8, 24576), "340b": (96, 18432, 96, 8, 73728)}
    layers, h, heads, kv, ffn = dims[size]
    return ModelSpec(name=f"nemotron-{size}", kind="decoder", family="llama", num_layers=layers, hidden_size=h,
                     num_heads=heads, num_kv_heads=kv, ffn_hidden_size=ffn, vocab_size=256000, max_seq_len=4096,
                     norm="layernorm", position="rope", gated_mlp=False)


def llama3(size: str) -> ModelSpec:
    return get_preset({"8b": "llama-3.1-8b", "70b": "llama-3.1-70b", "405b": "llama-3.1-405b"}[size])
