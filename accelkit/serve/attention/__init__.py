"""Paged attention backends behind one seam (``base.py``): ``sdpa`` — the reference, gather + PyTorch SDPA —
and ``triton`` — kernels reading K/V in place from the cache (imported only when chosen); ``registry.py`` picks
and builds one."""

from accelkit.serve.attention.base import AttentionBackend, AttentionContext, StepTensors
from accelkit.serve.attention.registry import make_attention_backend, resolve_attention_backend

__all__ = ["AttentionBackend", "AttentionContext", "StepTensors", "make_attention_backend", "resolve_attention_backend"]
