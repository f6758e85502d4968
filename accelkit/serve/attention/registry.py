"""Which attention backend runs where, and building it: the package's edge, above ``base`` and the backends.

``resolve_attention_backend`` turns the ``attention_backend`` setting into a backend that can run on the
device (or a ValueError naming the setting and the fix); ``make_attention_backend`` builds it. ``auto`` is
``triton`` on CUDA and ``cpu`` elsewhere, and ``cpu`` chosen by ``auto`` gives way to ``sdpa`` where its kernel
cannot be built or cannot read the cache (a quantized or non-float32 one), saying why in the log.
"""

from __future__ import annotations

import importlib.util
import logging
import os

import torch

from accelkit.serve.attention.base import AttentionBackend
from accelkit.serve.attention.cpu import CpuPagedAttention
from accelkit.serve.attention.sdpa import SdpaAttention
from accelkit.serve.kv_cache import KVCache

log = logging.getLogger(__name__)


def triton_available() -> bool:
    return importlib.util.find_spec("triton") is not None


def resolve_attention_backend(name: str, device: torch.device, *, enforce_eager: bool = True) -> str:
    """The backend ``attention_backend=name`` means on ``device``; ValueError naming the field when it cannot
    run — also when CUDA graphs are on (``enforce_eager=False`` on CUDA) and the backend cannot be captured."""
    if name == "sdpa" and device.type == "cuda" and not enforce_eager:
        raise ValueError(
            "attention_backend='sdpa' plans every step on the host and cannot be replayed from a CUDA graph; "
            "set enforce_eager=True (--enforce-eager) or attention_backend='auto'"
        )
    if name == "auto":
        if device.type != "cuda":
            return "cpu"
        if not triton_available():
            raise ValueError(
                "attention_backend='auto' on CUDA uses the Triton kernels, but triton is not installed; "
                "install triton (it ships with CUDA builds of torch) or set attention_backend='sdpa'"
            )
        return "triton"
    if name == "cpu" and device.type != "cpu":
        raise ValueError(f"attention_backend='cpu' runs on a CPU (device is {device.type!r}); use 'auto' or 'triton'")
    if name == "triton":
        if not triton_available():
            raise ValueError("attention_backend='triton' needs the triton package; install it or use attention_backend='sdpa'")
        if device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ValueError(
                f"attention_backend='triton' runs on CUDA (device is {device.type!r}; on a CPU only under "
                "TRITON_INTERPRET=1, for tests); use attention_backend='sdpa' or 'auto'"
            )
    return name


def make_attention_backend(
    name: str, cache: KVCache, *, num_heads: int, head_dim: int, sliding_window: int | None, chosen_by_auto: bool = False
) -> AttentionBackend:
    """Build a resolved backend (``sdpa``, ``cpu`` or ``triton``); Triton is imported only when chosen. ``cpu``
    that ``auto`` chose falls back to ``sdpa`` where it cannot run (asked for by name, it raises instead)."""
    if name == "cpu":
        try:
            return CpuPagedAttention(cache, num_heads=num_heads, head_dim=head_dim, sliding_window=sliding_window)
        except ValueError as exc:  # (it names why it cannot run)
            if not chosen_by_auto:
                raise
            log.info("attention: sdpa (%s)", exc)
    if name == "triton":
        # imported only when chosen: it imports triton and compiles kernels (not installed everywhere)
        from accelkit.serve.attention.triton_backend import TritonAttention

        return TritonAttention(cache, num_heads=num_heads, head_dim=head_dim, sliding_window=sliding_window)
    return SdpaAttention(cache, num_heads=num_heads, head_dim=head_dim, sliding_window=sliding_window)
