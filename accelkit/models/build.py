"""Builders: a real torch module for a ModelSpec, through transformers, with random weights (no downloads).

``device="meta"`` builds the structure without allocating memory — how the tests check every preset's
parameter count against transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelkit.core import ModelSpec, UserError
from accelkit.models.hf import to_hf_config

if TYPE_CHECKING:
    import torch

# family → (config class, model class) in transformers; decoders get their LM head, CNNs the classifier
_CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "qwen3": ("Qwen3Config", "Qwen3ForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
    "qwen3_moe": ("Qwen3MoeConfig", "Qwen3MoeForCausalLM"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "bert": ("BertConfig", "BertModel"),
    "vit": ("ViTConfig", "ViTModel"),
    "resnet": ("ResNetConfig", "ResNetForImageClassification"),
}


def hf_config(spec: ModelSpec, **overrides: Any) -> Any:
    """The transformers ``PretrainedConfig`` for ``spec``; a UserError when transformers refuses the architecture
    (its rules are its own and per family: e.g. transformers 5's Llama wants hidden_size a multiple of the heads
    even with an explicit head_dim, which the planner can model)."""
    import transformers

    cfg = to_hf_config(spec)
    cfg.pop("model_type")
    cfg.update(overrides)
    config_cls = getattr(transformers, _CLASSES[spec.family][0])
    try:
        return config_cls(**cfg)
    except Exception as exc:  # a ValueError, or huggingface_hub's validation error around one
        why = exc.__cause__ or exc
        raise UserError(f"{spec.name}: transformers {transformers.__version__} cannot build this {spec.family} "
                        f"architecture: {' '.join(str(why).split())}") from exc


def check_buildable(spec: ModelSpec) -> None:
    """Refuse (UserError) a spec transformers will not build, before any run starts (it failed each variant's load)."""
    if spec.family in _CLASSES:
        hf_config(spec)


def build_model(
    spec: ModelSpec, *, device: str | torch.device = "cpu", dtype: torch.dtype | None = None, seed: int | None = 0
) -> torch.nn.Module:
    """Instantiate the transformers module for ``spec`` with random init (``seed`` for repeatability).

    ``dtype`` builds it as transformers' ``from_config(config, dtype=dtype)`` does — constructed under that default
    dtype, on ``device`` and the meta device alike — not as ``model.to(dtype)`` would: parameters and the buffers
    they are saved with in ``dtype``, while a buffer the model computes in fp32 on purpose stays fp32. RoPE's
    ``inv_freq`` is one (transformers computes it ``.float()``; ``.to(bf16)`` rounded it, an angle error that grows
    with the position). The weights are initialized in ``dtype`` (no fp32 copy first); some initializers (ResNet's
    convolutions) then draw other values than an fp32 build cast down."""
    import torch
    import transformers

    model_cls = getattr(transformers, _CLASSES[spec.family][1])
    config = hf_config(spec)
    if seed is not None:
        torch.manual_seed(seed)
    with torch.device(device):
        # _from_config is what transformers' Auto*.from_config(config, dtype=) calls for this class
        model = model_cls(config) if dtype is None else model_cls._from_config(config, dtype=dtype)
    module: torch.nn.Module = model.eval()
    return module


def count_parameters(module: torch.nn.Module) -> int:
    """Parameters of a module, shared (tied) tensors counted once."""
    return sum(p.numel() for p in module.parameters())
