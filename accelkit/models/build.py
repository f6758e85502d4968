"""Builders: a real torch module for a ModelSpec, through transformers, with random weights (no downloads).

``device="meta"`` builds the structure without allocating memory — how the tests check every preset's
parameter count against transformers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelkit.core import ModelSpec
from accelkit.models.hf import to_hf_config

if TYPE_CHECKING:
    import torch

# family → (config class, model class) in transformers; decoders get their LM head, CNNs the classifier
_CLASSES = {
    "llama": ("LlamaConfig", "LlamaForCausalLM"),
    "mistral": ("MistralConfig", "MistralForCausalLM"),
    "qwen2": ("Qwen2Config", "Qwen2ForCausalLM"),
    "mixtral": ("MixtralConfig", "MixtralForCausalLM"),
    "gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "bert": ("BertConfig", "BertModel"),
    "vit": ("ViTConfig", "ViTModel"),
    "resnet": ("ResNetConfig", "ResNetForImageClassification"),
}


def hf_config(spec: ModelSpec, **overrides: Any) -> Any:
    """The transformers ``PretrainedConfig`` for ``spec``."""
    import transformers

    cfg = to_hf_config(spec)
    cfg.pop("model_type")
    cfg.update(overrides)
    config_cls = getattr(transformers, _CLASSES[spec.family][0])
    return config_cls(**cfg)


def build_model(
    spec: ModelSpec, *, device: str | torch.device = "cpu", dtype: torch.dtype | None = None, seed: int | None = 0
) -> torch.nn.Module:
    """Instantiate the transformers module for ``spec`` with random init (``seed`` for repeatability)."""
    import torch
    import transformers

    model_cls = getattr(transformers, _CLASSES[spec.family][1])
    config = hf_config(spec)
    if seed is not None:
        torch.manual_seed(seed)
    with torch.device(device):
        model = model_cls(config)
    if dtype is not None:
        model = model.to(dtype)
    module: torch.nn.Module = model.eval()
    return module


def count_parameters(module: torch.nn.Module) -> int:
    """Parameters of a module, shared (tied) tensors counted once."""
    return sum(p.numel() for p in module.parameters())
