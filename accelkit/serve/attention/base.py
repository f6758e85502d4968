"""The attention-backend seam: what every backend gets from the runner, and which backend runs where.

A step is laid out as ``[single-token rows | multi-token chunks]``: the first ``num_decodes`` sequences
compute one token each (decodes, and one-token prompt chunks), the rest compute chunks of prompts.
:class:`StepTensors` describes it twice over the same persistent int64 buffers — numpy views on the host
(for backends that plan on the host, like SDPA) and device views (for kernels, and for CUDA graphs, which
replay with whatever those device buffers hold).

Backends: ``sdpa`` (gather + PyTorch SDPA; the reference, CPU and CUDA) and ``triton`` (kernels that read
K/V in place from the paged cache; CUDA, or a CPU under ``TRITON_INTERPRET=1`` for tests).
"""

from __future__ import annotations

import importlib.util
import logging
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from accelkit.serve.kv_cache import KVCache

log = logging.getLogger("accelkit.serve")


@dataclass(slots=True)
class StepTensors:
    """One step's token layout. Host arrays are numpy views, device ones tensor views of the same data."""

    num_tokens: int
    num_seqs: int
    num_decodes: int  # leading sequences with exactly one query token
    max_query_len: int  # longest query chunk among the other sequences (0 when there are none)
    seq_lens_np: np.ndarray  # (S,) context length after this step (cached tokens + this step's)
    query_start_np: np.ndarray  # (S + 1,) first token row of each sequence; the last entry is T
    block_tables_np: np.ndarray  # (S, W) block ids; entries past a sequence's blocks are 0
    positions: torch.Tensor  # (T,) position of each token in its sequence
    slot_mapping: torch.Tensor  # (T,) cache slot of each token
    seq_lens: torch.Tensor
    query_start: torch.Tensor
    block_tables: torch.Tensor


class AttentionBackend(ABC):
    """Paged attention over a :class:`KVCache`: writes the step's K/V, then attends every query token to
    its sequence's cached context and to the step's earlier tokens of the same sequence (causal)."""

    name: ClassVar[str]
    supports_cuda_graphs: ClassVar[bool]  # forward launches only from device tensors and fixed host ints
    sorts_decodes: ClassVar[bool]  # wants single-token rows ordered by context length
    fuses_rope: ClassVar[bool] = False  # takes the q/k/v projection before RoPE (``forward_qkv``)

    def __init__(self, cache: KVCache, *, num_heads: int, head_dim: int, sliding_window: int | None) -> None:
        self.cache = cache
        self.num_heads, self.num_kv_heads, self.head_dim = num_heads, cache.num_kv_heads, head_dim
        self.sliding_window = sliding_window
        self.scale = head_dim**-0.5

    @abstractmethod
    def prepare(self, step: StepTensors) -> Any:
        """Per-step metadata shared by every layer."""

    @abstractmethod
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, meta: Any) -> torch.Tensor:
        """``q``: (T, Hq, D); ``k, v``: (T, Hkv, D) of this step's tokens → (T, Hq * D)."""

    def forward_qkv(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer: int, meta: Any) -> torch.Tensor:
        """``qkv``: (T, (Hq + 2 Hkv) D) before RoPE; ``cos, sin``: (max_len, D) tables → (T, Hq * D)."""
        raise NotImplementedError(f"attention backend {self.name!r} does not fuse RoPE")


@dataclass(slots=True)
class AttentionContext:
    """What a decoder layer calls: the backend bound to this step's metadata."""

    backend: AttentionBackend
    meta: Any

    @property
    def fuses_rope(self) -> bool:
        return self.backend.fuses_rope

    def __call__(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int) -> torch.Tensor:
        return self.backend.forward(q, k, v, layer, self.meta)

    def forward_qkv(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer: int) -> torch.Tensor:
        return self.backend.forward_qkv(qkv, cos, sin, layer, self.meta)


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
            return "sdpa"
        if not triton_available():
            raise ValueError(
                "attention_backend='auto' on CUDA uses the Triton kernels, but triton is not installed; "
                "install triton (it ships with CUDA builds of torch) or set attention_backend='sdpa'"
            )
        return "triton"
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
    name: str, cache: KVCache, *, num_heads: int, head_dim: int, sliding_window: int | None
) -> AttentionBackend:
    """Build a resolved backend (``sdpa`` or ``triton``); Triton is imported only when chosen."""
    if name == "triton":
        from accelkit.serve.attention.triton_backend import TritonAttention

        return TritonAttention(cache, num_heads=num_heads, head_dim=head_dim, sliding_window=sliding_window)
    from accelkit.serve.attention.sdpa import SdpaAttention

    return SdpaAttention(cache, num_heads=num_heads, head_dim=head_dim, sliding_window=sliding_window)
