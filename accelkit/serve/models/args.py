"""The fields of ``config.json`` the engine's decoder reads, for every architecture it serves (no torch import:
``preflight`` checks a model directory with these names before anything is loaded).

One decoder (``llama.py``) serves them all; what differs between architectures is a handful of flags here:
biases, per-head q/k RMSNorm (Qwen3), a sliding window (Mistral), and a sparse MoE MLP in some or all layers
(Mixtral, Qwen2-MoE, Qwen3-MoE) with the architecture's own routing normalisation and shared expert.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accelkit.models.hf import DECODER_ARCHITECTURES, DECODER_DEFAULTS, default_kv_heads
from accelkit.serve.quant.config import QuantConfig, parse_quantization_config

SUPPORTED_ARCHITECTURES = (
    "LlamaForCausalLM", "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM",
    "MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM",
)
MOE_ARCHITECTURES = ("MixtralForCausalLM", "Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM")
_QWEN_MOE = ("Qwen2MoeForCausalLM", "Qwen3MoeForCausalLM")
_ROPE_TYPES = ("default", "linear", "llama3", "yarn")
# the fields each scaling type computes with (transformers' rope validation requires them too)
_ROPE_FIELDS = {"linear": ("factor",),
                "llama3": ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"),
                "yarn": ("factor", "original_max_position_embeddings")}
# YaRN's optional numbers (null or absent: the paper's defaults, as transformers takes them)
_YARN_OPTIONAL = ("attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim")
# transformers' config defaults for fields save_pretrained may leave out (configuration_qwen{2,3}_moe.py,
# configuration_mixtral.py): (num_experts, num_experts_per_tok)
_MOE_DEFAULTS = {"MixtralForCausalLM": (8, 2), "Qwen2MoeForCausalLM": (60, 4), "Qwen3MoeForCausalLM": (128, 8)}
# config.json's model_type → the architecture transformers' AutoModelForCausalLM builds for it, and back
_MODEL_TYPES = DECODER_ARCHITECTURES
_ARCH_MODEL_TYPES = {arch: model_type for model_type, arch in DECODER_ARCHITECTURES.items()}


def unsupported_architectures(archs: Any, model_type: Any, where: str) -> ValueError:
    """The error for a config.json naming no supported architecture; ``where``: the file, for the message. One that
    names none at all but a served ``model_type`` (a config saved from a config object alone) is told what to add:
    "architectures=None is not supported" read as if Llama itself were not served (found in the hunt)."""
    if not archs and isinstance(model_type, str) and model_type in _MODEL_TYPES:
        return ValueError(f"{where} has model_type={model_type!r} but no architectures; add "
                          f"\"architectures\": [\"{_MODEL_TYPES[model_type]}\"] to it")
    return ValueError(f"architectures={archs!r} in {where} is not supported; expected one of "
                      f"{', '.join(SUPPORTED_ARCHITECTURES)}")


@dataclass(frozen=True, slots=True)
class MoEArgs:
    """The sparse MLP of an MoE architecture."""

    num_experts: int
    num_experts_per_tok: int  # top-k
    intermediate_size: int  # of each routed expert (moe_intermediate_size; Mixtral: intermediate_size)
    norm_topk_prob: bool  # renormalise the k selected softmax probabilities to sum to 1 (Mixtral: always)
    shared_expert_intermediate_size: int | None  # Qwen2-MoE's always-on expert, gated by a sigmoid; None: none
    sparse_layers: tuple[int, ...]  # the layers with the sparse MLP; the others have a dense one (intermediate_size)
    checkpoint_prefix: str  # the MLP's name in the checkpoint: "block_sparse_moe" (Mixtral) or "mlp"
    expert_names: tuple[str, str, str]  # checkpoint names of gate, up, down in each expert


@dataclass(frozen=True, slots=True)
class ModelArgs:
    """The fields of ``config.json`` this implementation reads."""

    architecture: str
    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    intermediate_size: int  # the dense MLP's (MoE models: of their dense layers only)
    rms_norm_eps: float
    rope_theta: float
    rope_scaling: dict[str, Any] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool  # Qwen3: RMSNorm over head_dim on each q and k head, before RoPE
    sliding_window: int | None
    torch_dtype: str | None
    moe: MoEArgs | None = None  # None: every layer dense
    quantization: QuantConfig | None = None  # the checkpoint's quantization_config; None: 16/32-bit weights

    def is_sparse_layer(self, layer: int) -> bool:
        return self.moe is not None and layer in self.moe.sparse_layers

    @property
    def max_context_len(self) -> int:
        """The longest ``max_model_len`` served: ``max_position_embeddings``, or the context a linear or YaRN RoPE
        scaling stretches the positions to, as vLLM derives it — linear ``factor`` × ``max_position_embeddings``,
        YaRN ``factor`` × ``original_max_position_embeddings`` — when that is longer. (Llama 3's scaling comes with
        the long ``max_position_embeddings`` already.) Without it, YaRN added to config.json as Qwen documents it
        (factor 4 over 32,768 positions, ``--max-model-len 131072``) was refused at max_position_embeddings."""
        scaling = self.rope_scaling
        if scaling is None or scaling["rope_type"] not in ("linear", "yarn"):
            return self.max_position_embeddings
        base = (scaling["original_max_position_embeddings"] if scaling["rope_type"] == "yarn"
                else self.max_position_embeddings)
        return max(self.max_position_embeddings, int(float(scaling["factor"]) * base))

    @classmethod
    def from_config(cls, cfg: dict[str, Any]) -> ModelArgs:
        """Parse a Hugging Face config dict; unsupported models raise ValueError naming the field."""
        archs = cfg.get("architectures") or []
        arch = next((a for a in archs if a in SUPPORTED_ARCHITECTURES), None)
        if arch is None:
            raise unsupported_architectures(cfg.get("architectures"), cfg.get("model_type"), "config.json")
        quant = cfg.get("quantization_config")
        # parsed first: an unsupported scheme is refused by its field, never loaded as if its codes were 16-bit
        quantization = parse_quantization_config(quant) if quant is not None else None
        if cfg.get("hidden_act", "silu") not in ("silu", "swish"):  # (transformers' ACT2FN: swish is SiLU)
            raise ValueError(f"hidden_act={cfg['hidden_act']!r} in config.json is not supported; expected 'silu'")
        # transformers' defaults for the fields config.json leaves out differ by model type (the planner's table)
        model_type = _ARCH_MODEL_TYPES[arch]
        defaults = DECODER_DEFAULTS[model_type]
        positions = cfg.get("max_position_embeddings", defaults["max_position_embeddings"])
        theta, rope, rope_type = _rope(cfg, default_theta=defaults["rope_theta"], default_positions=positions)
        if arch.startswith("Qwen") and cfg.get("use_sliding_window"):
            raise ValueError(f"use_sliding_window=true ({arch} per-layer windows) is not supported")
        heads = cfg["num_attention_heads"]
        if "num_key_value_heads" in cfg:  # (null: one per head)
            kv_heads = cfg["num_key_value_heads"] or heads
        else:
            try:
                kv_heads = default_kv_heads(model_type, heads)
            except ValueError as exc:
                raise ValueError(f"num_key_value_heads in config.json {exc}") from None
        # (left out of config.json, MistralConfig's window is 4096, MixtralConfig's none; null is none for both)
        window = (cfg.get("sliding_window", defaults["sliding_window"]) or None) if model_type in (
            "mistral", "mixtral") else None
        # transformers builds biases from these flags in Llama (attention_bias: q, k, v and o; mlp_bias: gate, up,
        # down) and Qwen3 (attention_bias); Qwen2 has q/k/v biases always, Qwen2-MoE by its qkv_bias (default
        # true), Mistral and Mixtral none, whatever config.json says — honouring the flags there would ask the
        # checkpoint for tensors it never holds
        attention_bias = arch in ("LlamaForCausalLM", "Qwen3ForCausalLM", "Qwen3MoeForCausalLM") and bool(
            cfg.get("attention_bias", False))
        if arch == "Qwen2MoeForCausalLM":
            qkv_bias = bool(cfg.get("qkv_bias", True))
        else:
            qkv_bias = arch == "Qwen2ForCausalLM" or attention_bias
        num_layers = cfg["num_hidden_layers"]
        return cls(
            architecture=arch,
            vocab_size=cfg["vocab_size"],
            hidden_size=cfg["hidden_size"],
            num_layers=num_layers,
            num_heads=heads,
            num_kv_heads=kv_heads,
            head_dim=config_head_dim(cfg),
            intermediate_size=cfg["intermediate_size"],
            rms_norm_eps=float(cfg.get("rms_norm_eps", defaults["rms_norm_eps"])),
            rope_theta=theta,
            rope_scaling={**rope, "rope_type": rope_type} if rope_type != "default" else None,
            max_position_embeddings=positions,
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            qkv_bias=qkv_bias,
            o_bias=attention_bias,
            mlp_bias=arch == "LlamaForCausalLM" and bool(cfg.get("mlp_bias", False)),
            qk_norm=arch in ("Qwen3ForCausalLM", "Qwen3MoeForCausalLM"),
            sliding_window=window,
            torch_dtype=cfg.get("dtype") or cfg.get("torch_dtype"),
            moe=_moe_args(cfg, arch, num_layers) if arch in MOE_ARCHITECTURES else None,
            quantization=quantization,
        )


def _rope(cfg: dict[str, Any], *, default_theta: float, default_positions: int) -> tuple[float, dict[str, Any], str]:
    """(rope_theta, the scaling's fields, its type) read as transformers reads them (``default_positions``: the
    context length, config.json's or its model type's default); ValueError for a type or a partial rotary factor
    that is not served."""
    # transformers >= 5 writes rope_parameters (theta inside); older files have rope_theta + rope_scaling
    rope = dict(cfg.get("rope_parameters") or cfg.get("rope_scaling") or {})
    theta = float(rope.pop("rope_theta", cfg.get("rope_theta", default_theta)))
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type == "llama3":  # (transformers: a top-level value first, then the dict's, then the context)
        rope["original_max_position_embeddings"] = cfg.get("original_max_position_embeddings") or rope.get(
            "original_max_position_embeddings") or default_positions
    if rope_type == "yarn":  # (a top-level value first, as transformers reads it: the dict's first served other
        # frequencies than transformers computes when the two differ; found in the hunt)
        original = cfg.get("original_max_position_embeddings") or rope.get("original_max_position_embeddings")
        rope["original_max_position_embeddings"] = original  # (factor required, as transformers requires it)
    if rope_type not in _ROPE_TYPES:
        raise ValueError(f"rope_parameters.rope_type={rope_type!r} is not supported; expected one of {_ROPE_TYPES}")
    if rope.get("partial_rotary_factor", 1.0) != 1.0:
        raise ValueError("rope_parameters.partial_rotary_factor != 1 is not supported")
    _check_rope_fields(rope, rope_type, "rope_parameters" if cfg.get("rope_parameters") else "rope_scaling")
    return theta, rope, rope_type


def _check_rope_fields(rope: dict[str, Any], rope_type: str, where: str) -> None:
    """Every field the type's inverse frequencies read (``llama.rope_inv_freq``) is a positive number. (Found in
    review: a llama3 scaling without low_freq_factor passed here and failed later, in transformers' tokenizer
    loading, reported as a missing tokenizer.json.)"""
    for key in _ROPE_FIELDS.get(rope_type, ()):
        value = rope.get(key)
        if value is None:
            raise ValueError(f"{where}.{key} is missing (rope_type {rope_type!r} needs "
                             f"{', '.join(_ROPE_FIELDS[rope_type])}); add it")
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
            raise ValueError(f"{where}.{key}={value!r} in config.json is not valid; expected a positive number")
    for key in _YARN_OPTIONAL if rope_type == "yarn" else ():
        value = rope.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)
                                  or not 0 < value < float("inf")):
            raise ValueError(f"{where}.{key}={value!r} in config.json is not valid; expected a positive number or null")
    if rope_type == "yarn" and not isinstance(rope.get("truncate", True), bool):
        raise ValueError(f"{where}.truncate={rope['truncate']!r} in config.json is not valid; expected true or false")
    if rope_type == "llama3" and rope["high_freq_factor"] <= rope["low_freq_factor"]:
        raise ValueError(f"{where}.high_freq_factor={rope['high_freq_factor']!r} in config.json must be greater than "
                         f"low_freq_factor={rope['low_freq_factor']!r} (Llama 3.1's: 4.0 and 1.0)")


def config_head_dim(cfg: dict[str, Any]) -> int:
    """``head_dim``, or when config.json leaves it out, transformers' default: 128 for Qwen3 (Qwen3Config), else
    hidden_size / num_attention_heads."""
    if cfg.get("head_dim"):
        return int(cfg["head_dim"])
    if "Qwen3ForCausalLM" in (cfg.get("architectures") or []):
        return 128
    return int(cfg["hidden_size"] // cfg["num_attention_heads"])


def _moe_args(cfg: dict[str, Any], arch: str, num_layers: int) -> MoEArgs:
    """The sparse MLP's fields. Which layers are sparse follows transformers' Qwen2/3-MoE decoder layer: layer i is
    sparse iff it is not in mlp_only_layers and (i + 1) % decoder_sparse_step == 0; Mixtral's every layer."""
    default_experts, default_k = _MOE_DEFAULTS[arch]
    # Mixtral names it num_local_experts; Qwen checkpoints num_experts (transformers 5 saves num_local_experts)
    num_experts = cfg.get("num_local_experts") or cfg.get("num_experts") or default_experts
    k = cfg.get("num_experts_per_tok") or default_k
    if not isinstance(num_experts, int) or not isinstance(k, int) or not 1 <= k <= num_experts:
        raise ValueError(f"num_experts_per_tok={k!r} must be an integer in [1, num_experts={num_experts!r}]")
    if arch == "MixtralForCausalLM":
        return MoEArgs(
            num_experts=num_experts, num_experts_per_tok=k, intermediate_size=cfg["intermediate_size"],
            norm_topk_prob=True, shared_expert_intermediate_size=None, sparse_layers=tuple(range(num_layers)),
            checkpoint_prefix="block_sparse_moe", expert_names=("w1", "w3", "w2"),
        )
    step = cfg.get("decoder_sparse_step") or 1
    dense = set(cfg.get("mlp_only_layers") or [])
    shared = cfg.get("shared_expert_intermediate_size", 5632) if arch == "Qwen2MoeForCausalLM" else None
    return MoEArgs(
        num_experts=num_experts, num_experts_per_tok=k,
        intermediate_size=cfg.get("moe_intermediate_size") or (1408 if arch == "Qwen2MoeForCausalLM" else 768),
        norm_topk_prob=bool(cfg.get("norm_topk_prob", False)), shared_expert_intermediate_size=shared or None,
        sparse_layers=tuple(i for i in range(num_layers) if i not in dense and (i + 1) % step == 0),
        checkpoint_prefix="mlp", expert_names=("gate_proj", "up_proj", "down_proj"),
    )
