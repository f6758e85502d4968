"""The structured-outputs engines by name (``EngineConfig.structured_outputs_backend``), for the server and the
benchmarks: one place that knows which class each name is."""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from accelkit.serve.structured import StructuredBackend
from accelkit.serve.structured_llguidance import LLGuidanceBackend


def make_backend(name: str, tokenizer: Any, vocab_size: int, eos_token_ids: Collection[int]) -> StructuredBackend:
    """The structured-outputs backend ``name`` (llguidance or xgrammar) over ``tokenizer``."""
    if name == "xgrammar":
        # (lazy: xgrammar is an optional dependency, and importing it takes ~2 s)
        from accelkit.serve.structured_xgrammar import XGrammarBackend

        return XGrammarBackend(tokenizer, vocab_size, eos_token_ids)
    return LLGuidanceBackend(tokenizer, vocab_size, eos_token_ids)
