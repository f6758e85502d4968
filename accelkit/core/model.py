"""ModelSpec: architecture dimensions and the exact parameter count they imply.

Counts follow the module structure of the Hugging Face implementations (the models accelkit builds and
tests against), so ``num_params()`` equals ``sum(p.numel() for p in model.parameters())`` of the
transformers model built from the same config — the test suite checks every preset on the meta device.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Literal

from accelkit.core.serving_memory import KVCacheDtype
from accelkit.core.serving_memory import kv_bytes_per_token as _kv_bytes_per_token
from accelkit.core.spec import Spec, finite_fix, spec_field

ModelKind = Literal["decoder", "encoder", "moe", "cnn"]
Family = Literal["llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "gpt2", "bert", "vit", "resnet"]

#: families whose blocks are transformer blocks (everything but the CNNs)
TRANSFORMER_FAMILIES = ("llama", "mistral", "qwen2", "qwen3", "mixtral", "qwen3_moe", "gpt2", "bert", "vit")


@dataclass(frozen=True, slots=True, kw_only=True)
class ModelSpec(Spec):
    """Dimensions of one model architecture. Transformer fields are ignored for CNNs and vice versa."""

    name: str = spec_field(doc="Preset or user-given name, e.g. 'llama-3.1-8b'.")
    kind: ModelKind = spec_field(doc="decoder (causal LM), encoder (BERT/ViT), moe (sparse decoder) or cnn.")
    family: Family = spec_field(doc="Architecture family; decides module layout and the builder used.")
    num_layers: int = spec_field(0, min=0, doc="Transformer blocks (for CNNs: derived from stage_depths).")
    hidden_size: int = spec_field(0, min=0, doc="Model width h.")
    num_heads: int = spec_field(0, min=0, doc="Attention (query) heads.")
    num_kv_heads: int | None = spec_field(None, min=1, doc="Key/value heads (GQA); None means num_heads.")
    head_dim: int | None = spec_field(None, min=1, doc="Per-head dim; None means hidden_size // num_heads.")
    ffn_hidden_size: int = spec_field(0, min=0, doc="MLP inner width (per expert for MoE).")
    vocab_size: int = spec_field(0, min=0, doc="Token vocabulary (0 for vision models).")
    max_seq_len: int = spec_field(0, min=0, doc="Maximum positions (context length).")
    sliding_window: int | None = spec_field(
        None, min=1, doc="Sliding-window attention span in tokens (Mistral's sliding_window): a position attends to "
                         "the last this many, so a sequence's KV cache holds at most this many; None = full context.")
    num_full_attention_layers: int = spec_field(
        0, min=0, doc="With sliding_window: how many layers attend over the whole context anyway (Qwen2's first "
                      "max_window_layers); the others use the window. 0 (Mistral): every layer is windowed.")
    num_experts: int | None = spec_field(None, min=1, doc="MoE experts per layer; None for dense models.")
    experts_per_token: int | None = spec_field(None, min=1, doc="MoE top-k routing; None for dense.")
    gated_mlp: bool = spec_field(False, doc="SwiGLU-style MLP with gate, up and down projections.")
    tied_embeddings: bool = spec_field(False, doc="Output head shares the input embedding matrix.")
    qkv_bias: bool = spec_field(False, doc="Bias on the q/k/v projections (Qwen2; Llama's attention_bias with out_bias).")
    out_bias: bool = spec_field(False, doc="Bias on the attention output projection o_proj (Llama's attention_bias).")
    mlp_bias: bool = spec_field(False, doc="Bias on the MLP projections (Llama's mlp_bias).")
    qk_norm: bool = spec_field(False, doc="RMSNorm over head_dim on each query and key head (Qwen3's q_norm, k_norm).")
    linear_bias: bool = spec_field(False, doc="Bias on every linear layer (GPT-2/3, BERT, ViT).")
    norm: Literal["rmsnorm", "layernorm"] = spec_field("rmsnorm", doc="RMSNorm (weight) or LayerNorm (weight+bias).")
    position: Literal["rope", "learned"] = spec_field("rope", doc="Rotary or learned absolute positions.")
    rope_theta: float = spec_field(10000.0, min=0.0, finite=True, doc="RoPE base frequency.")
    # (lists and nulls as real configs carry them: Phi-3's longrope factors, YaRN's attention_factor null, gpt-oss's
    # truncate false — each refused before, so `plan --model` of those checkpoints failed)
    rope_scaling: dict[str, float | int | str | bool | list[float] | None] | None = spec_field(
        None, doc="RoPE scaling (e.g. Llama 3 'llama3'; Phi-3 'longrope' with its factor lists).")
    norm_eps: float = spec_field(1e-5, min=0.0, finite=True, doc="Epsilon of the normalisation layers.")
    type_vocab_size: int = spec_field(0, min=0, doc="BERT token-type embeddings.")
    pooler: bool = spec_field(False, doc="Encoder pooler (dense + tanh on the first token).")
    image_size: int | None = spec_field(None, min=1, doc="Input image side in pixels (vision models).")
    patch_size: int | None = spec_field(None, min=1, doc="ViT patch side in pixels.")
    num_channels: int = spec_field(3, min=1, doc="Input image channels (vision models).")
    stage_depths: tuple[int, ...] = spec_field((), doc="ResNet bottleneck blocks per stage.")
    stage_widths: tuple[int, ...] = spec_field((), doc="ResNet output channels per stage (4x the bottleneck).")
    stem_width: int = spec_field(64, min=1, doc="ResNet stem convolution channels.")
    num_labels: int | None = spec_field(None, min=1, doc="Classifier outputs (CNNs); None for no head.")

    def validate(self) -> None:
        self._check_rope_scaling()
        if self.family == "resnet":
            if self.kind != "cnn":
                raise ValueError("kind must be 'cnn' for family 'resnet'")
            if not self.stage_depths or len(self.stage_depths) != len(self.stage_widths):
                raise ValueError("stage_depths and stage_widths must be non-empty and of equal length")
            if any(w % 4 for w in self.stage_widths):
                raise ValueError("stage_widths must be multiples of 4 (bottleneck reduction)")
            return
        self._check_transformer_sizes()
        if self.head_dim is None and self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size={self.hidden_size} is not divisible by num_heads={self.num_heads}; "
                "set head_dim explicitly"
            )
        if self.num_heads % self.kv_heads:
            raise ValueError(f"num_heads={self.num_heads} must be a multiple of num_kv_heads={self.kv_heads}")
        if (self.num_experts is None) != (self.experts_per_token is None):
            raise ValueError("num_experts and experts_per_token must be given together")
        if self.num_experts is not None and self.experts_per_token > self.num_experts:  # type: ignore[operator]
            raise ValueError("experts_per_token must be <= num_experts")
        if (self.kind == "moe") != (self.num_experts is not None):
            raise ValueError("kind 'moe' requires num_experts, and num_experts requires kind 'moe'")
        if self.family == "vit" and (self.image_size is None or self.patch_size is None):
            raise ValueError("a ViT needs image_size and patch_size")
        if self.kind in ("decoder", "moe") and self.vocab_size < 1:
            raise ValueError("vocab_size must be >= 1 for a language model")
        if self.sliding_window is None and self.num_full_attention_layers:
            raise ValueError("num_full_attention_layers needs sliding_window (without a window every layer is full)")
        if self.num_full_attention_layers >= max(self.num_layers, 1):
            raise ValueError(f"num_full_attention_layers={self.num_full_attention_layers} must be < num_layers="
                             f"{self.num_layers} (with no windowed layer, set sliding_window None)")

    def _check_transformer_sizes(self) -> None:
        for name in ("num_layers", "hidden_size", "num_heads", "ffn_hidden_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1 for a transformer model")
        if self.position == "rope" and self.rope_theta == 0:  # (θ^(-2i/d) of 0 is inf: every frequency but the first)
            raise ValueError("rope_theta=0 gives RoPE no frequencies; give the model's RoPE base (10000, 500000, 1e6…)")

    def _check_rope_scaling(self) -> None:
        """Each number of rope_scaling is finite, as rope_theta is (NaN is refused by its type check already); a
        config.json's are refused as it is read, naming its key (models/hf.py)."""
        for key, values in (self.rope_scaling or {}).items():
            for i, value in enumerate(values if isinstance(values, list) else [values]):
                if isinstance(value, bool) or not isinstance(value, (int, float)):
                    continue
                if (isinstance(value, int) and abs(value) > sys.float_info.max) or math.isinf(value):  # no float holds
                    shown = f"{value!r}" if isinstance(value, float) else f"an integer of {len(str(abs(value)))} digits"
                    where = f"rope_scaling[{key!r}]" + (f"[{i}]" if isinstance(values, list) else "")
                    raise ValueError(f"{where}={shown} is not a finite number; expected {finite_fix(key)}")

    # ---- derived dimensions -------------------------------------------------------------------
    @property
    def kv_heads(self) -> int:
        """Key/value heads actually used (num_kv_heads, or num_heads without GQA)."""
        return self.num_kv_heads if self.num_kv_heads is not None else self.num_heads

    @property
    def head_size(self) -> int:
        """Per-head dimension actually used."""
        return self.head_dim if self.head_dim is not None else self.hidden_size // max(self.num_heads, 1)

    @property
    def is_transformer(self) -> bool:
        return self.family in TRANSFORMER_FAMILIES

    @property
    def depth(self) -> int:
        """Transformer blocks, or bottleneck blocks for a CNN."""
        return sum(self.stage_depths) if self.kind == "cnn" else self.num_layers

    @property
    def num_patches(self) -> int:
        """ViT patches per image (sequence length less the class token)."""
        if self.image_size is None or self.patch_size is None:
            return 0
        return (self.image_size // self.patch_size) ** 2

    # ---- parameter counts ---------------------------------------------------------------------
    def _norm_params(self) -> int:
        return self.hidden_size * (1 if self.norm == "rmsnorm" else 2)

    def _attention_params(self) -> int:
        h, q, kv = self.hidden_size, self.num_heads * self.head_size, self.kv_heads * self.head_size
        weights = h * q + 2 * h * kv + q * h  # q, k, v, o projections
        qkv = q + 2 * kv if self.linear_bias or self.qkv_bias else 0
        qk_norm = 2 * self.head_size if self.qk_norm else 0
        return weights + qkv + (h if self.linear_bias or self.out_bias else 0) + qk_norm

    def _expert_params(self) -> int:
        h, f = self.hidden_size, self.ffn_hidden_size
        bias = self.linear_bias or self.mlp_bias
        if self.gated_mlp:
            return 3 * h * f + (2 * f + h if bias else 0)
        return 2 * h * f + (f + h if bias else 0)

    def _layer_params(self, experts: int) -> int:
        mlp = experts * self._expert_params()
        if self.num_experts is not None:
            mlp += self.hidden_size * self.num_experts  # router (no bias)
        return self._attention_params() + mlp + 2 * self._norm_params()

    def num_embedding_params(self) -> int:
        """Input embedding tables (tokens, positions, token types, patches, class token)."""
        h = self.hidden_size
        if self.family == "resnet":
            return 0
        if self.family == "vit":
            patch = self.num_channels * self.patch_size**2 * h + h  # type: ignore[operator]
            return patch + h + (self.num_patches + 1) * h  # conv + class token + positions
        params = self.vocab_size * h
        if self.position == "learned":
            params += self.max_seq_len * h
        return params + self.type_vocab_size * h

    def _head_params(self) -> int:
        """Everything after the last block: final norm, LM head, pooler, classifier."""
        h = self.hidden_size
        if self.family == "bert":  # embeddings LayerNorm sits before the blocks; count it here
            return self._norm_params() + (h * h + h if self.pooler else 0)
        params = self._norm_params()
        if self.kind in ("decoder", "moe") and not self.tied_embeddings:
            params += self.vocab_size * h
        if self.pooler:
            params += h * h + h
        return params

    def _resnet_params(self) -> int:
        params = self.num_channels * self.stem_width * 49 + 2 * self.stem_width  # 7x7 conv + BN
        in_ch = self.stem_width
        for depth, out in zip(self.stage_depths, self.stage_widths, strict=True):
            mid = out // 4
            for block in range(depth):
                params += in_ch * mid + 2 * mid + mid * mid * 9 + 2 * mid + mid * out + 2 * out
                if block == 0:  # projection shortcut (channels change or stride 2)
                    params += in_ch * out + 2 * out
                in_ch = out
        if self.num_labels is not None:
            params += in_ch * self.num_labels + self.num_labels
        return params

    def num_params(self) -> int:
        """All parameters (tied matrices counted once)."""
        if self.family == "resnet":
            return self._resnet_params()
        experts = self.num_experts or 1
        return self.num_embedding_params() + self.num_layers * self._layer_params(experts) + self._head_params()

    def num_active_params(self) -> int:
        """Parameters used per token: with MoE only ``experts_per_token`` experts count."""
        if self.num_experts is None:
            return self.num_params()
        idle = self.num_layers * (self.num_experts - self.experts_per_token) * self._expert_params()  # type: ignore[operator]
        return self.num_params() - idle

    def kv_cache_tokens(self, context: float) -> float:
        """Tokens one sequence keeps in the KV cache at ``context`` positions: min(context, sliding_window) when every
        layer is windowed; with some full-attention layers (Qwen2) the mean over the layers, so that
        ``kv_bytes_per_token() · kv_cache_tokens(context)`` is the sequence's cache either way."""
        if self.num_full_attention_layers == 0:  # every layer alike (a CNN has num_layers 0: nothing to average)
            return context if self.sliding_window is None else min(context, self.sliding_window)
        return self.kv_cache_layer_tokens(context) / self.num_layers

    @property
    def num_window_layers(self) -> int:
        """Layers that attend over the sliding window only (0 without one)."""
        return 0 if self.sliding_window is None else self.num_layers - self.num_full_attention_layers

    def kv_cache_layer_tokens(self, context: float, layers: int | None = None) -> float:
        """Σ over the first ``layers`` layers (default all) of the tokens one sequence keeps in each layer's KV cache
        at ``context`` positions (a float context: a mean over decode steps): a full-attention layer keeps context,
        a windowed one min(context, window). The full-attention layers come first (Qwen2: index < max_window_layers),
        so the first pipeline stage is the heaviest."""
        layers = self.num_layers if layers is None else min(layers, self.num_layers)
        if self.sliding_window is None:
            return layers * context
        full = min(layers, self.num_full_attention_layers)
        return full * context + (layers - full) * min(context, self.sliding_window)

    def kv_bytes_per_token(self, dtype_bytes: int = 2, kv_cache_dtype: KVCacheDtype = "auto") -> int:
        """KV-cache bytes one token occupies over every layer, as the serving engine stores it
        (``serving_memory.kv_bytes_per_token``): auto ``2 · layers · kv_heads · head_dim · dtype_bytes``; fp8/int8
        1-byte codes plus a float16 scale per token, KV head and tensor. 0 for a model without a KV cache."""
        if self.kind not in ("decoder", "moe"):
            return 0
        return _kv_bytes_per_token(num_layers=self.num_layers, num_kv_heads=self.kv_heads, head_dim=self.head_size,
                                   kv_cache_dtype=kv_cache_dtype, dtype_bytes=dtype_bytes)
