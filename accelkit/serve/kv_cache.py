"""Paged KV storage for all layers, full precision or quantized (fp8 e4m3 / int8 with scales).

Layout per layer: ``[num_blocks, block_size, num_kv_heads, head_dim]`` — a token's slot is
``block_id * block_size + offset``, so writing a step's new K/V is one ``index_copy_`` over a slot
mapping and reading a batch of sequences is one gather over their block tables.

Quantized caches keep one scale per token and KV head (``amax / qmax`` over ``head_dim``, stored as
float16): a new token never changes the scales of older ones, so writes stay a single scatter, and an
outlier in one head or token does not cost the others their precision. Storage is ``head_dim + 2`` bytes
per token and head instead of ``2 * head_dim`` for bf16 — about half (``(D + 2) / 2D``: 0.52 at D = 64).
``accelkit.core.serving_memory.kv_bytes_per_token`` counts exactly this layout (the runner sizes the cache with it,
the planner predicts with it); ``KVCache.num_bytes`` is what was really allocated.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from accelkit.core.serving_memory import KVCacheDtype

_SCALE_DTYPE = torch.float16  # serving_memory.KV_SCALE_BYTES counts it (tests check num_bytes against it)
_MIN_SCALE = 1e-7  # an all-zero vector still gets a finite scale


class GatherScratch:
    """Two grow-only buffers that :meth:`KVCache.gather` copies blocks into, reused step after step.

    A fresh multi-megabyte tensor per gather is new memory each time: glibc's malloc serves blocks that large
    with ``mmap`` (or trims them back to the system when freed), so a gather can pay a page fault and the kernel's
    zeroing per 4 KiB page, as much as the allocator's state makes it: 7.1 against 6.3 ms for one batch-64 layer's
    gather + SDPA in one run of ``benchmarks/cpu_hot_paths.py``, while the engine's batch-64 steps before this
    moved between 17 and 30 ms from one worker process to the next (``engine_step_breakdown_cpu.json``). The
    quantized caches decode into new tensors anyway and take no scratch."""

    def __init__(self) -> None:
        self._k: torch.Tensor | None = None
        self._v: torch.Tensor | None = None

    def views(self, rows: int, row_shape: torch.Size, dtype: torch.dtype, device: torch.device
              ) -> tuple[torch.Tensor, torch.Tensor]:
        n = rows * row_shape.numel()
        if self._k is None or self._k.numel() < n or self._k.dtype != dtype or self._k.device != device:
            size = max(n, self._k.numel() * 5 // 4 if self._k is not None and self._k.dtype == dtype else 0)
            self._k = torch.empty(size, dtype=dtype, device=device)
            self._v = torch.empty(size, dtype=dtype, device=device)
        assert self._v is not None
        return self._k[:n].view(rows, *row_shape), self._v[:n].view(rows, *row_shape)


class KVCache:
    """Full-precision cache: K/V stored in the model dtype."""

    kind: ClassVar[str] = "auto"
    qmax: ClassVar[float] = 1.0  # largest code magnitude (quantized caches)
    min_scale: ClassVar[float] = _MIN_SCALE

    def __init__(
        self, *, num_layers: int, num_blocks: int, block_size: int, num_kv_heads: int, head_dim: int,
        dtype: torch.dtype, device: torch.device,
    ) -> None:
        self.num_layers, self.num_blocks, self.block_size = num_layers, num_blocks, block_size
        self.num_kv_heads, self.head_dim, self.dtype = num_kv_heads, head_dim, dtype
        shape = (num_layers, num_blocks, block_size, num_kv_heads, head_dim)
        # zeros, not empty: padded gathers read unused slots, and NaN garbage times a zero weight is NaN
        self.k = torch.zeros(shape, dtype=self.storage_dtype(dtype), device=device)
        self.v = torch.zeros(shape, dtype=self.storage_dtype(dtype), device=device)

    @staticmethod
    def storage_dtype(dtype: torch.dtype) -> torch.dtype:
        return dtype

    @property
    def num_bytes(self) -> int:
        """Bytes allocated: codes (or values) and, when quantized, scales, of K and V over every block and layer."""
        return sum(t.nbytes for t in (self.k, self.v, *self.scales_of_all_layers()))

    def scales_of_all_layers(self) -> tuple[torch.Tensor, ...]:
        """The scale tensors (none for a full-precision cache)."""
        return ()

    def write(self, layer: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        """Store the K/V of a step's tokens; ``k, v``: (T, Hkv, D), ``slot_mapping``: (T,)."""
        self.k[layer].view(-1, self.num_kv_heads, self.head_dim).index_copy_(0, slot_mapping, k.to(self.dtype))
        self.v[layer].view(-1, self.num_kv_heads, self.head_dim).index_copy_(0, slot_mapping, v.to(self.dtype))

    def scales(self, layer: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """Per-token-per-head scales of one layer ``(num_blocks, block_size, Hkv)``; None when unquantized."""
        return None, None

    def as_stored(self, x: torch.Tensor) -> torch.Tensor:
        """K or V of a step's tokens, (T, Hkv, D), as the cache returns them when gathered: what attention over
        fresh tokens must read, so that it sees what every later read of them sees (the values themselves here)."""
        return x

    def gather(self, layer: int, block_ids: torch.Tensor, scratch: GatherScratch | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        """K/V of whole blocks: ``block_ids`` (..., nb) → two (..., nb * block_size, Hkv, D) tensors. With a
        ``scratch``, they are views of its buffers, valid until its next use."""
        shape = (*block_ids.shape[:-1], block_ids.shape[-1] * self.block_size, self.num_kv_heads, self.head_dim)
        flat = block_ids.reshape(-1)  # index_select on dim 0 is far faster than advanced indexing on CPU
        if scratch is None:
            return self.k[layer].index_select(0, flat).view(shape), self.v[layer].index_select(0, flat).view(shape)
        k_out, v_out = scratch.views(flat.numel(), self.k.shape[2:], self.dtype, self.k.device)
        torch.index_select(self.k[layer], 0, flat, out=k_out)
        torch.index_select(self.v[layer], 0, flat, out=v_out)
        return k_out.view(shape), v_out.view(shape)


class _QuantizedKVCache(KVCache):
    """Shared by fp8 and int8: codes in ``k``/``v``, one float16 scale per token and head."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        scale_shape = self.k.shape[:-1]
        self.k_scale = torch.ones(scale_shape, dtype=_SCALE_DTYPE, device=self.k.device)
        self.v_scale = torch.ones(scale_shape, dtype=_SCALE_DTYPE, device=self.k.device)

    def scales_of_all_layers(self) -> tuple[torch.Tensor, ...]:
        return self.k_scale, self.v_scale

    def scales(self, layer: int) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        return self.k_scale[layer], self.v_scale[layer]

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _decode(self, codes: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def _quantize(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = x.float()
        scale = (x.abs().amax(-1) / self.qmax).clamp_min(_MIN_SCALE).to(_SCALE_DTYPE)  # (T, Hkv)
        scaled = (x / scale.float().unsqueeze(-1)).clamp(-self.qmax, self.qmax)
        return self._encode(scaled), scale

    def write(self, layer: int, slot_mapping: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> None:
        h, d = self.num_kv_heads, self.head_dim
        for x, codes, scales in ((k, self.k, self.k_scale), (v, self.v, self.v_scale)):
            q, s = self._quantize(x)
            codes[layer].view(-1, h, d).index_copy_(0, slot_mapping, q)
            scales[layer].view(-1, h).index_copy_(0, slot_mapping, s)

    def as_stored(self, x: torch.Tensor) -> torch.Tensor:
        """Quantized and decoded as :meth:`gather` decodes them: a prompt chunk with no cached context attends to
        these, not to its unquantized K/V, or its output would differ from a chunked or cached run's (found in
        review: greedy tokens changed with max_num_batched_tokens on fp8/int8 caches; Triton reads the codes)."""
        codes, scale = self._quantize(x)
        return self._decode(codes).to(self.dtype) * scale.to(self.dtype).unsqueeze(-1)

    def gather(self, layer: int, block_ids: torch.Tensor, scratch: GatherScratch | None = None
               ) -> tuple[torch.Tensor, torch.Tensor]:
        lead = (*block_ids.shape[:-1], block_ids.shape[-1] * self.block_size, self.num_kv_heads)
        out = []
        flat = block_ids.reshape(-1)
        for codes, scales in ((self.k, self.k_scale), (self.v, self.v_scale)):
            x = self._decode(codes[layer].index_select(0, flat)).to(self.dtype).view(*lead, self.head_dim)
            out.append(x * scales[layer].index_select(0, flat).to(self.dtype).view(*lead, 1))
        return out[0], out[1]


class Fp8KVCache(_QuantizedKVCache):
    """e4m3 codes (max 448), stored as uint8 so that every backend can index them."""

    kind = "fp8"
    qmax = 448.0

    @staticmethod
    def storage_dtype(dtype: torch.dtype) -> torch.dtype:
        return torch.uint8

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        return x.to(torch.float8_e4m3fn).view(torch.uint8)

    def _decode(self, codes: torch.Tensor) -> torch.Tensor:
        return codes.view(torch.float8_e4m3fn)


class Int8KVCache(_QuantizedKVCache):
    """Symmetric int8 codes in [-127, 127]."""

    kind = "int8"
    qmax = 127.0

    @staticmethod
    def storage_dtype(dtype: torch.dtype) -> torch.dtype:
        return torch.int8

    def _encode(self, x: torch.Tensor) -> torch.Tensor:
        return x.round().to(torch.int8)

    def _decode(self, codes: torch.Tensor) -> torch.Tensor:
        return codes


KV_CACHE_CLASSES: dict[str, type[KVCache]] = {"auto": KVCache, "fp8": Fp8KVCache, "int8": Int8KVCache}


def kv_cache_class(kind: KVCacheDtype) -> type[KVCache]:
    """The cache implementation for ``kv_cache_dtype``; fp8 needs torch's float8_e4m3fn dtype."""
    if kind == "fp8" and not hasattr(torch, "float8_e4m3fn"):
        raise ValueError("kv_cache_dtype='fp8' needs torch >= 2.1 (float8_e4m3fn); use kv_cache_dtype='int8'")
    return KV_CACHE_CLASSES[kind]
