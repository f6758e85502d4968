"""The attention-backend seam: what every backend gets from the runner, and which backend runs where.

A step is laid out as ``[single-token rows | multi-token chunks]``: the first ``num_decodes`` sequences
compute one token each (decodes, and one-token prompt chunks), the rest compute chunks of prompts.
:class:`StepTensors` describes it twice over the same persistent int64 buffers — numpy views on the host
(for backends that plan on the host, like SDPA) and device views (for kernels, and for CUDA graphs, which
replay with whatever those device buffers hold).

Backends: ``sdpa`` (gather + PyTorch SDPA; the reference, CPU and CUDA) and ``triton`` (kernels that read
K/V in place from the paged cache; CUDA, or a CPU under ``TRITON_INTERPRET=1`` for tests). Which one runs
where, and building it, is ``registry.py``'s business: this module knows no backend.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np
import torch

from accelkit.serve.kv_cache import KVCache


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
