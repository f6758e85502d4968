"""Llama-family decoder for the engine: Llama 2/3 (incl. Llama-3 rope scaling), Mistral, Qwen2.

Same math as the ``transformers`` modules — RMSNorm in float32, rotate-half RoPE, GQA, SiLU-gated MLP,
tied or untied embeddings, the biases transformers builds (q/k/v for Qwen2; Llama's ``attention_bias`` on
q/k/v/o and ``mlp_bias`` on gate/up/down) — laid out for serving: the step's tokens of all sequences are one
flat ``(T, hidden)`` batch, q/k/v and gate/up are fused into one matmul each, attention goes through the
paged KV cache, and logits are computed only for the rows that sample.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from accelkit.serve.attention import AttentionContext

SUPPORTED_ARCHITECTURES = ("LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM")
_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True, slots=True)
class LlamaArgs:
    """The fields of ``config.json`` this implementation reads."""

    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    sliding_window: int | None
    torch_dtype: str | None

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> LlamaArgs:
        """Parse a Hugging Face config dict; unsupported models raise ValueError naming the field."""
        archs = cfg.get("architectures") or []
        arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if arch is None:
            raise ValueError(
                f"architectures={archs!r} in config.json is not supported; expected one of {', '.join(SUPPORTED_ARCHITECTURES)}"
            )
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError(f"hidden_act={cfg['hidden_act']!r} in config.json is not supported; expected 'silu'")
        # transformers >= 5 writes rope_parameters (theta inside); older files have rope_theta + rope_scaling
        rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
        theta = float(rope.pop("rope_theta", cfg.get("rope_theta", 10000.0)))
        rope_type = rope.get("rope_type", rope.get("type", "default"))
        if rope_type not in _ROPE_TYPES:
            raise ValueError(f"rope_parameters.rope_type={rope_type!r} is not supported; expected one of {_ROPE_TYPES}")
        if rope.get("partial_rotary_factor", 1.0) != 1.0:
            raise ValueError("rope_parameters.partial_rotary_factor != 1 is not supported")
        if arch == "Qwen2ForCausalLM" and cfg.get("use_sliding_window"):
            raise ValueError("use_sliding_window=true (Qwen2 per-layer windows) is not supported")
        heads = cfg["num_attention_heads"]
        window = cfg.get("sliding_window") if arch == "MistralForCausalLM" else None
        # transformers builds biases from these flags in LlamaAttention/LlamaMLP only (attention_bias: q, k, v
        # and o; mlp_bias: gate, up, down); Qwen2 has q/k/v biases always and Mistral none, whatever config.json
        # says — honouring the flags there would ask the checkpoint for tensors it never holds
        is_llama = arch == "LlamaForCausalLM"
        attention_bias = is_llama and bool(cfg.get("attention_bias", False))
        return cls(
            architecture=arch,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            num_layers=cfg["num_hidden_layers"],
            num_heads=heads,
            num_kv_heads=cfg.get("num_key_value_heads") or heads,
            head_dim=cfg.get("head_dim") or cfg["hidden_size"] // heads,
            intermediate_size=cfg["intermediate_size"],
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=theta,
            rope_scaling={**rope, "rope_type": rope_type} if rope_type != "default" else None,
            max_position_embeddings=cfg.get("max_position_embeddings", 2048),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=arch == "Qwen2ForCausalLM" or attention_bias,
            o_bias=attention_bias,
            mlp_bias=is_llama and bool(cfg.get("mlp_bias", False)),
            sliding_window=window,
            torch_dtype=cfg.get("dtype") or cfg.get("torch_dtype"),
        )


def rope_inv_freq(args: LlamaArgs) -> torch.Tensor:
    """Inverse frequencies, computed as transformers does (float32), with linear or Llama-3 scaling."""
    dim = args.head_dim
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = args.rope_scaling
    if scaling is None:
        return inv_freq
    factor = float(scaling["factor"])
    if scaling["rope_type"] == "linear":
        return inv_freq / factor
    # llama3: long wavelengths divided by factor, short kept, a smooth blend in between
    low, high = float(scaling["low_freq_factor"]), float(scaling["high_freq_factor"])
    old_len = scaling["original_max_position_embeddings"]
    low_wavelen, high_wavelen = old_len / low, old_len / high
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > low_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_len / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = ~(wavelen < high_wavelen) * ~(wavelen > low_wavelen)
    return torch.where(is_medium, smoothed, scaled)


def rope_cache(args: LlamaArgs, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: (max_len, head_dim) float32 — rows gathered by position each step."""
    freqs = torch.arange(max_len, dtype=torch.float32)[:, None] * rope_inv_freq(args)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps
        self.fused = False  # one Triton kernel (kernels/fused.py) instead of the PyTorch ops

    def forward(self, x: torch.Tensor, residual: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(norm(h), h)`` with ``h = residual + x`` — the residual add of the layer before, fused."""
        if self.fused:
            # only with the fused kernels on: kernels/fused.py imports triton (absent from CPU-only installs)
            from accelkit.serve.kernels.fused import rms_norm

            return rms_norm(x, self.weight, self.eps, residual)
        h = x if residual is None else residual + x
        dtype = h.dtype
        y = h.float()
        y = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(dtype), h


class Attention(nn.Module):
    def __init__(self, args: LlamaArgs, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.num_heads, self.num_kv_heads, self.head_dim = args.num_heads, args.num_kv_heads, args.head_dim
        q_size, kv_size = args.num_heads * args.head_dim, args.num_kv_heads * args.head_dim
        self.split = (q_size, kv_size, kv_size)
        self.qkv_proj = nn.Linear(args.hidden_size, q_size + 2 * kv_size, bias=args.qkv_bias)
        self.o_proj = nn.Linear(q_size, args.hidden_size, bias=args.o_bias)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn: AttentionContext) -> torch.Tensor:
        """``cos, sin``: (T, 1, D) rows of the tokens' positions — or, for a backend that fuses RoPE, the
        whole (max_len, D) tables."""
        qkv = self.qkv_proj(x)
        if attn.fuses_rope:
            out: torch.Tensor = self.o_proj(attn.forward_qkv(qkv, cos, sin, self.layer))
            return out
        num_tokens = x.shape[0]
        q, k, v = qkv.split(self.split, dim=-1)
        q = q.view(num_tokens, self.num_heads, self.head_dim)
        k = k.view(num_tokens, self.num_kv_heads, self.head_dim)
        v = v.view(num_tokens, self.num_kv_heads, self.head_dim)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        out = self.o_proj(attn(q, k, v, self.layer))
        return out


class MLP(nn.Module):
    def __init__(self, args: LlamaArgs) -> None:
        super().__init__()
        self.intermediate_size = args.intermediate_size
        self.gate_up_proj = nn.Linear(args.hidden_size, 2 * args.intermediate_size, bias=args.mlp_bias)
        self.down_proj = nn.Linear(args.intermediate_size, args.hidden_size, bias=args.mlp_bias)
        self.fused = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate_up = self.gate_up_proj(x)
        if self.fused:
            from accelkit.serve.kernels.fused import silu_mul  # (triton: as rms_norm above)

            act = silu_mul(gate_up)
        else:
            gate, up = gate_up.split(self.intermediate_size, dim=-1)
            act = F.silu(gate) * up
        out: torch.Tensor = self.down_proj(act)
        return out


class DecoderLayer(nn.Module):
    def __init__(self, args: LlamaArgs, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = Attention(args, layer)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp = MLP(args)

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, attn: AttentionContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``residual + x`` is the hidden state entering the layer (``residual`` None for the first):
        each residual add happens inside the next norm. Returns the MLP output and the residual stream."""
        h, residual = self.input_layernorm(x, residual)
        h = self.self_attn(h, cos, sin, attn)
        h, residual = self.post_attention_layernorm(h, residual)
        return self.mlp(h), residual


class LlamaForCausalLM(nn.Module):
    def __init__(self, args: LlamaArgs) -> None:
        super().__init__()
        self.args = args
        self.embed_tokens = nn.Embedding(args.vocab_size, args.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(args, i) for i in range(args.num_layers))
        self.norm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.lm_head = None if args.tie_word_embeddings else nn.Linear(args.hidden_size, args.vocab_size, bias=False)
        self.rope_cos = self.rope_sin = torch.empty(0)  # (max_len, D) tables, set by init_rope

    def init_rope(self, max_len: int, *, dtype: torch.dtype, device: torch.device) -> None:
        """RoPE tables for positions [0, max_len), in the model dtype as transformers applies them."""
        cos, sin = rope_cache(self.args, max_len)
        self.rope_cos, self.rope_sin = cos.to(device, dtype), sin.to(device, dtype)

    def use_fused_kernels(self, enabled: bool = True) -> None:
        """RMSNorm (+ residual add) and SiLU·mul as Triton kernels (the CUDA path; RoPE is fused by the
        attention backend that asks for it)."""
        for module in self.modules():
            if isinstance(module, (RMSNorm, MLP)):
                module.fused = enabled

    def forward(self, input_ids: torch.Tensor, positions: torch.Tensor, attn: AttentionContext) -> torch.Tensor:
        """``input_ids, positions``: (T,) → hidden (T, hidden) before the final norm. Device work only, so
        it can be graph-captured."""
        if attn.fuses_rope:  # the backend gathers each token's row inside its kernel
            cos, sin = self.rope_cos, self.rope_sin
        else:
            cos = self.rope_cos[positions].unsqueeze(1)  # (T, 1, D)
            sin = self.rope_sin[positions].unsqueeze(1)
        x: torch.Tensor = self.embed_tokens(input_ids)
        residual: torch.Tensor | None = None
        for layer in self.layers:
            x, residual = layer(x, residual, cos, sin, attn)
        assert residual is not None
        return residual + x

    def compute_logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """Final norm + LM head for the rows that sample only: (N, hidden) → (N, vocab)."""
        weight = self.embed_tokens.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(self.norm(hidden)[0], weight)


# ---- loading ----------------------------------------------------------------------------------------
_FUSED = {"qkv_proj": ("q_proj", "k_proj", "v_proj"), "gate_up_proj": ("gate_proj", "up_proj")}


def _read_safetensors(model_dir: Path) -> dict[str, torch.Tensor]:
    """Every tensor of the checkpoint: a sharded index's files, or all ``*.safetensors``."""
    from safetensors.torch import load_file

    index = model_dir / "model.safetensors.index.json"
    if index.exists():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = sorted(p.name for p in model_dir.glob("*.safetensors"))
    if not files:
        raise ValueError(f"model={str(model_dir)!r} has no *.safetensors weights")
    tensors: dict[str, torch.Tensor] = {}
    for name in files:
        tensors.update(load_file(str(model_dir / name)))
    return tensors


def _checkpoint_names(param: str) -> list[str]:
    """Our parameter name → the checkpoint tensor(s) it is made of (concatenated along dim 0)."""
    if param.startswith("lm_head."):
        return [param]
    name = "model." + param
    for fused, parts in _FUSED.items():
        if f".{fused}." in name:
            return [name.replace(fused, part) for part in parts]
    return [name]


def load_model(model_dir: str | Path, args: LlamaArgs, *, dtype: torch.dtype, device: torch.device) -> LlamaForCausalLM:
    """Build the module without allocating, then fill it from the safetensors checkpoint."""
    model_dir = Path(model_dir)
    with torch.device("meta"):
        model = LlamaForCausalLM(args)
    tensors = _read_safetensors(model_dir)
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    missing: list[str] = []
    for param in model.state_dict():
        names = _checkpoint_names(param)
        if not all(n in tensors for n in names):
            missing += [n for n in names if n not in tensors]
            continue
        used.update(names)
        parts = [tensors[n] for n in names]
        state[param] = (parts[0] if len(parts) == 1 else torch.cat(parts)).to(device=device, dtype=dtype)
    if missing:
        raise ValueError(f"the checkpoint in {str(model_dir)!r} lacks {len(missing)} tensors, e.g. {missing[:3]}")
    unused = sorted(n for n in set(tensors) - used if "rotary_emb" not in n and not (n == "lm_head.weight" and args.tie_word_embeddings))
    if unused:
        raise ValueError(f"the checkpoint in {str(model_dir)!r} has tensors this model does not use, e.g. {unused[:3]}")
    model.load_state_dict(state, assign=True)
    return model.eval()
