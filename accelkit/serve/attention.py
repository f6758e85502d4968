"""Batched paged attention over block tables, in plain PyTorch (SDPA does the math).

One step mixes decodes (one query token each) and prefill chunks (many). The model runner lays the
step's tokens out as ``[decodes sorted by context length | prefill chunk 1 | prefill chunk 2 | ...]`` and
describes that layout in :class:`AttentionMetadata`, built once per step and shared by every layer:

* decodes are cut into a few groups of similar context length; each group is one gather of its block
  tables and one SDPA call, with the group's query heads folded per KV head — ``q: (g, Hkv, rep, D)``
  against ``k: (g, Hkv, L, D)`` — so GQA needs no repeat of K/V and padding stays small;
* a prefill chunk with no cached context attends causally to its own fresh K/V (``is_causal``);
  one that continues a chunk or a prefix-cache hit gathers its context from the cache with an
  explicit causal mask offset by the context length.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F

from accelkit.serve.kv_cache import KVCache


@dataclass(slots=True)
class DecodeGroup:
    start: int  # token rows [start, end) of the step
    end: int
    block_tables: torch.Tensor  # (g, nb) int64, padded with block 0
    mask: torch.Tensor  # (g, 1, 1, nb * block_size) bool, True = attend


@dataclass(slots=True)
class PrefillChunk:
    start: int
    end: int
    context_len: int  # tokens of this sequence already in the cache before the chunk
    block_ids: torch.Tensor | None  # (nb,) blocks covering context + chunk; None when context_len == 0
    mask: torch.Tensor | None  # (n, context_len + n) bool; None = plain causal


@dataclass(slots=True)
class AttentionMetadata:
    slot_mapping: torch.Tensor  # (T,) int64 cache slot of each token of the step
    decode_groups: list[DecodeGroup] = field(default_factory=list)
    prefills: list[PrefillChunk] = field(default_factory=list)


def paged_attention(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, cache: KVCache, layer: int, meta: AttentionMetadata
) -> torch.Tensor:
    """``q``: (T, Hq, D); ``k, v``: (T, Hkv, D) of this step's tokens → (T, Hq * D).

    Writes the step's K/V into the cache first, so every query sees its own token.
    """
    _, num_heads, head_dim = q.shape
    num_kv_heads = k.shape[1]
    rep = num_heads // num_kv_heads
    cache.write(layer, meta.slot_mapping, k, v)
    outs: list[torch.Tensor] = []
    for g in meta.decode_groups:
        n = g.end - g.start
        kc, vc = cache.gather(layer, g.block_tables)  # (g, L, Hkv, D)
        qg = q[g.start : g.end].view(n, num_kv_heads, rep, head_dim)
        o = F.scaled_dot_product_attention(qg, kc.transpose(1, 2), vc.transpose(1, 2), attn_mask=g.mask)
        outs.append(o.reshape(n, num_heads * head_dim))  # (g, Hkv, rep, D): head h = kv * rep + r
    for p in meta.prefills:
        n = p.end - p.start
        qp = q[p.start : p.end].transpose(0, 1).unsqueeze(0)  # (1, Hq, n, D)
        if p.block_ids is None:
            kp = k[p.start : p.end].transpose(0, 1).unsqueeze(0)  # (1, Hkv, n, D)
            vp = v[p.start : p.end].transpose(0, 1).unsqueeze(0)
        else:
            total = p.context_len + n
            kc, vc = cache.gather(layer, p.block_ids)  # (nb * bs, Hkv, D)
            kp = kc[:total].transpose(0, 1).unsqueeze(0)
            vp = vc[:total].transpose(0, 1).unsqueeze(0)
        o = F.scaled_dot_product_attention(
            qp, kp, vp, attn_mask=p.mask, is_causal=p.mask is None and p.block_ids is None, enable_gqa=rep > 1
        )
        outs.append(o[0].transpose(0, 1).reshape(n, num_heads * head_dim))
    return outs[0] if len(outs) == 1 else torch.cat(outs)
