"""Model implementations for the serving engine (one module per family)."""

from accelkit.serve.models.llama import SUPPORTED_ARCHITECTURES, LlamaArgs, LlamaForCausalLM, load_model

__all__ = ["SUPPORTED_ARCHITECTURES", "LlamaArgs", "LlamaForCausalLM", "load_model"]
