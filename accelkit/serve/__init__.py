"""LLM serving engine: continuous batching over a paged, quantizable KV cache, exact against transformers.

Pure-Python bookkeeping (``sequence``, ``block_manager``, ``scheduler``, ``sampling``) imports no torch;
``LLM``/``LLMEngine``/``EngineLoop`` are imported lazily so that ``import accelkit.serve`` stays light.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from accelkit.serve.config import EngineConfig
from accelkit.serve.outputs import CompletionOutput, EngineStats, Logprob, RequestMetrics, RequestOutput
from accelkit.serve.sampling import SamplingParams, StructuredOutputs, StructuredOutputsParams

if TYPE_CHECKING:
    from accelkit.serve.engine import LLMEngine
    from accelkit.serve.llm import LLM
    from accelkit.serve.loop import EngineLoop, RequestStream

_LAZY = {
    "LLM": "accelkit.serve.llm",
    "LLMEngine": "accelkit.serve.engine",
    "EngineLoop": "accelkit.serve.loop",
    "RequestStream": "accelkit.serve.loop",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'accelkit.serve' has no attribute {name!r}")


__all__ = [
    "LLM", "CompletionOutput", "EngineConfig", "EngineLoop", "EngineStats", "LLMEngine", "Logprob", "RequestMetrics",
    "RequestOutput", "RequestStream", "SamplingParams", "StructuredOutputs", "StructuredOutputsParams",
]
