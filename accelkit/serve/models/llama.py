"""The engine's decoder: Llama 2/3 (incl. Llama-3 rope scaling), Mistral, Qwen2, Qwen3 and the MoE models
Mixtral, Qwen2-MoE and Qwen3-MoE (the SiLU-gated MLP in ``mlp.py``, the sparse one in ``moe.py``; what differs per architecture in ``args.py``).

Same math as the ``transformers`` modules — RMSNorm in float32, rotate-half RoPE, GQA, SiLU-gated MLP,
tied or untied embeddings, the biases transformers builds (q/k/v for Qwen2; Llama's ``attention_bias`` on
q/k/v/o and ``mlp_bias`` on gate/up/down), Qwen3's per-head q/k RMSNorm — laid out for serving: the step's
tokens of all sequences are one flat ``(T, hidden)`` batch, q/k/v and gate/up are fused into one matmul each,
attention goes through the paged KV cache, and logits are computed only for the rows that sample.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from accelkit.serve.attention import AttentionContext
from accelkit.serve.models.args import ModelArgs
from accelkit.serve.models.mlp import MLP
from accelkit.serve.models.moe import SparseMoE
from accelkit.serve.quant.config import QuantConfig
from accelkit.serve.quant.load import quantize_model


def rope_inv_freq(args: ModelArgs) -> torch.Tensor:
    """Inverse frequencies, computed as transformers does (float32), with linear, Llama-3 or YaRN scaling."""
    dim = args.head_dim
    inv_freq = 1.0 / (args.rope_theta ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim))
    scaling = args.rope_scaling
    if scaling is None:
        return inv_freq
    factor = float(scaling["factor"])
    if scaling["rope_type"] == "linear":
        return inv_freq / factor
    if scaling["rope_type"] == "yarn":
        return _yarn_inv_freq(scaling, dim, args.rope_theta)
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


def _yarn_inv_freq(scaling: dict[str, Any], dim: int, base: float) -> torch.Tensor:
    """YaRN (Peng et al. 2023): dimensions that turn fewer than ``beta_slow`` times over the pretrained context are
    interpolated (divided by the factor), those that turn more than ``beta_fast`` times kept, a linear ramp between;
    the bounds rounded outwards unless ``truncate`` is false — transformers' reading of the paper."""
    factor, original = float(scaling["factor"]), float(scaling["original_max_position_embeddings"])
    beta_fast, beta_slow = scaling.get("beta_fast") or 32, scaling.get("beta_slow") or 1

    def dimension(rotations: float) -> float:  # the dimension that turns ``rotations`` times over the context
        return dim * math.log(original / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dimension(beta_fast), dimension(beta_slow)
    if scaling.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    ramp = (torch.arange(dim // 2, dtype=torch.float32) - low) / ((high - low) or 0.001)
    kept = 1 - ramp.clamp(0, 1)  # the share of each dimension's own frequency
    wavelength = base ** (torch.arange(0, dim, 2, dtype=torch.int64).float() / dim)  # (in transformers' order of
    return 1.0 / (factor * wavelength) * (1 - kept) + 1.0 / wavelength * kept  # operations: the same float32 bits)


def rope_attention_factor(args: ModelArgs) -> float:
    """What cos and sin are multiplied by: 1, or YaRN's attention factor — given, else 0.1·ln(factor)+1 (the
    paper's), or with DeepSeek's ``mscale``/``mscale_all_dim`` the ratio of the two."""
    scaling = args.rope_scaling
    if scaling is None or scaling["rope_type"] != "yarn":
        return 1.0
    if scaling.get("attention_factor") is not None:
        return float(scaling["attention_factor"])
    factor = float(scaling["factor"])

    def mscale(weight: float = 1.0) -> float:
        return 1.0 if factor <= 1 else 0.1 * weight * math.log(factor) + 1.0

    if scaling.get("mscale") and scaling.get("mscale_all_dim"):
        return mscale(float(scaling["mscale"])) / mscale(float(scaling["mscale_all_dim"]))
    return mscale()


def rope_cache(args: ModelArgs, max_len: int) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin: (max_len, head_dim) float32 — rows gathered by position each step."""
    freqs = torch.arange(max_len, dtype=torch.float32)[:, None] * rope_inv_freq(args)[None, :]
    emb = torch.cat((freqs, freqs), dim=-1)
    scale = rope_attention_factor(args)
    return emb.cos() * scale, emb.sin() * scale


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
    def __init__(self, args: ModelArgs, layer: int) -> None:
        super().__init__()
        self.layer = layer
        self.num_heads, self.num_kv_heads, self.head_dim = args.num_heads, args.num_kv_heads, args.head_dim
        q_size, kv_size = args.num_heads * args.head_dim, args.num_kv_heads * args.head_dim
        self.split = [q_size, kv_size, kv_size]
        self.qkv_proj = nn.Linear(args.hidden_size, q_size + 2 * kv_size, bias=args.qkv_bias)
        self.o_proj = nn.Linear(q_size, args.hidden_size, bias=args.o_bias)
        self.q_norm = RMSNorm(args.head_dim, args.rms_norm_eps) if args.qk_norm else None
        self.k_norm = RMSNorm(args.head_dim, args.rms_norm_eps) if args.qk_norm else None

    def _norm_qk(self, qkv: torch.Tensor) -> torch.Tensor:
        """Qwen3: RMSNorm over head_dim on every q and k head (before RoPE), one row per (token, head)."""
        assert self.q_norm is not None and self.k_norm is not None
        q, k, v = torch.split(qkv, self.split, dim=-1)
        q = self.q_norm(q.reshape(-1, self.head_dim))[0].view(q.shape)
        k = self.k_norm(k.reshape(-1, self.head_dim))[0].view(k.shape)
        return torch.cat((q, k, v), dim=-1)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attn: AttentionContext) -> torch.Tensor:
        """``cos, sin``: (T, 1, D) rows of the tokens' positions — or, for a backend that fuses RoPE, the
        whole (max_len, D) tables."""
        qkv = self.qkv_proj(x)
        if self.q_norm is not None:
            qkv = self._norm_qk(qkv)
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


class DecoderLayer(nn.Module):
    def __init__(self, args: ModelArgs, layer: int) -> None:
        super().__init__()
        self.input_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.self_attn = Attention(args, layer)
        self.post_attention_layernorm = RMSNorm(args.hidden_size, args.rms_norm_eps)
        self.mlp: nn.Module = SparseMoE(args) if args.is_sparse_layer(layer) else MLP(args)
        # tensor parallelism: sums the partial outputs of the ranks in place (attention's o_proj, the MLP's down)
        self.all_reduce: Callable[[torch.Tensor], None] | None = None

    def forward(
        self, x: torch.Tensor, residual: torch.Tensor | None, cos: torch.Tensor, sin: torch.Tensor, attn: AttentionContext
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``residual + x`` is the hidden state entering the layer (``residual`` None for the first):
        each residual add happens inside the next norm. Returns the MLP output and the residual stream."""
        h, residual = self.input_layernorm(x, residual)
        h = self.self_attn(h, cos, sin, attn)
        if self.all_reduce is not None:
            self.all_reduce(h)
        h, residual = self.post_attention_layernorm(h, residual)
        out: torch.Tensor = self.mlp(h)
        if self.all_reduce is not None:
            self.all_reduce(out)
        return out, residual


class LlamaForCausalLM(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
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

    def set_all_reduce(self, all_reduce: Callable[[torch.Tensor], None] | None) -> None:
        """Tensor parallelism (``tensor_parallel.py``): each layer sums its attention and MLP outputs over the ranks
        with ``all_reduce`` (in place); None: one rank holds the whole model."""
        for layer in self.layers:
            assert isinstance(layer, DecoderLayer)
            layer.all_reduce = all_reduce

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


def _checkpoint_names(param: str, args: ModelArgs) -> list[list[str]]:
    """Our parameter name → the checkpoint tensors it is made of: each inner list concatenated along dim 0, and
    for stacked expert weights, one inner list per expert (stacked along a new dim 0)."""
    if param.startswith("lm_head."):
        return [[param]]
    name = "model." + param
    if args.moe is not None and ".mlp." in name:
        name = name.replace(".mlp.", f".{args.moe.checkpoint_prefix}.")
        if ".experts." in name:  # (E, 2F, H) gate‖up or (E, H, F) down ← every expert's own Linear weights
            gate, up, down = args.moe.expert_names
            base, leaf = name.rsplit(".", 1)  # leaf: gate_up_proj or down_proj, + "_scale" for FP8 experts' scales
            stacked = "gate_up_proj" if leaf.startswith("gate_up_proj") else "down_proj"
            names = (gate, up) if stacked == "gate_up_proj" else (down,)
            tensor = "weight" + leaf.removeprefix(stacked)
            return [[f"{base}.{e}.{part}.{tensor}" for part in names] for e in range(args.moe.num_experts)]
    for fused, parts in _FUSED.items():
        if f".{fused}." in name:
            return [[name.replace(fused, part) for part in parts]]
    return [[name]]


def _check_tied_head(model_dir: Path, args: ModelArgs, tensors: dict[str, torch.Tensor]) -> None:
    """A config that ties the LM head to the embeddings over a checkpoint whose ``lm_head.weight`` differs from them
    is refused: transformers then does not tie them and uses that head (its warning says so), so tying here would
    serve other logits (found in review)."""
    head, embed = tensors.get("lm_head.weight"), tensors.get("model.embed_tokens.weight")
    if args.tie_word_embeddings and head is not None and embed is not None and not torch.equal(head, embed):
        raise ValueError(f"config.json in {str(model_dir)!r} has tie_word_embeddings=true, but the checkpoint's "
                         "lm_head.weight differs from model.embed_tokens.weight (transformers would use that head, "
                         "untied); set tie_word_embeddings to false in config.json")


def load_model(model_dir: str | Path, args: ModelArgs, *, dtype: torch.dtype, device: torch.device,
               shard: Callable[[str, torch.Tensor], torch.Tensor] | None = None,
               quantization: QuantConfig | None = None) -> LlamaForCausalLM:
    """Build the module without allocating, then fill it from the safetensors checkpoint. ``shard``: this rank's
    part of each checkpoint tensor, by name (tensor parallelism; ``args`` are then the rank's own).
    ``quantization``: the checkpoint's scheme, or one to apply to a 16-bit checkpoint at load (``quant/load.py``
    swaps the Linears; not combined with ``shard``)."""
    model_dir = Path(model_dir)
    with torch.device("meta"):
        model = LlamaForCausalLM(args)
    tensors = _read_safetensors(model_dir)
    _check_tied_head(model_dir, args, tensors)
    keep_dtype: set[str] = set()  # quantized codes and their scales: loaded as the checkpoint stores them
    if quantization is not None:
        keep_dtype = quantize_model(model, tensors, quantization, args, _checkpoint_names)
    state: dict[str, torch.Tensor] = {}
    used: set[str] = set()
    missing: list[str] = []

    def part(name: str) -> torch.Tensor:
        return tensors[name] if shard is None else shard(name, tensors[name])

    for param in model.state_dict():
        groups = _checkpoint_names(param, args)
        names = [n for group in groups for n in group]
        if not all(n in tensors for n in names):
            missing += [n for n in names if n not in tensors]
            continue
        used.update(names)
        joined = [torch.cat([part(n) for n in group]) for group in groups]
        value = torch.stack(joined) if ".experts." in param else joined[0]
        state[param] = value.to(device=device, dtype=None if param in keep_dtype else dtype)
    if missing:
        raise ValueError(f"the checkpoint in {str(model_dir)!r} lacks {len(missing)} tensors, e.g. {missing[:3]}")
    unused = sorted(n for n in set(tensors) - used if "rotary_emb" not in n and not (n == "lm_head.weight" and args.tie_word_embeddings))
    if unused:
        raise ValueError(f"the checkpoint in {str(model_dir)!r} has tensors this model does not use, e.g. {unused[:3]}")
    model.load_state_dict(state, assign=True)
    return model.eval()
