"""The reference backend: gather the paged K/V into new tensors and let PyTorch SDPA do the math.

Planned on the host from :class:`StepTensors`' numpy arrays, once per step, and shared by every layer:

* single-token rows (sorted by context length by the runner) are cut into a few groups of similar
  context length; each group is one gather of its block tables and one SDPA call, with the query heads
  folded per KV head — ``q: (g, Hkv, rep, D)`` against ``k: (g, Hkv, L, D)`` — so GQA needs no repeat
  of K/V and padding stays small;
* a prompt chunk with no cached context attends causally to its own fresh K/V (``is_causal``); one that
  continues a chunk or a prefix-cache hit gathers its context with a causal mask offset by its length.

Exact on CPU (the engine's token-identical tests against transformers run on it) and runnable on CUDA,
where its gathered copies and per-group launches make it the slow path (and it cannot be graph-captured).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn.functional as F

from accelkit.serve.attention.base import AttentionBackend, StepTensors
from accelkit.serve.kv_cache import GatherScratch

_MAX_PADDING = 1.25  # a decode group is cut when padding would exceed 25% of its real context


@dataclass(slots=True)
class DecodeGroup:
    start: int  # token rows [start, end) of the step
    end: int
    block_tables: torch.Tensor  # (g, nb) int64, padded with block 0
    mask: torch.Tensor  # (g, 1, 1, nb * block_size) additive: 0 = attend, -inf = not


@dataclass(slots=True)
class PrefillChunk:
    start: int
    end: int
    context_len: int  # tokens of this sequence already in the cache before the chunk
    block_ids: torch.Tensor | None  # (nb,) blocks covering context + chunk; None when context_len == 0
    mask: torch.Tensor | None  # (n, context_len + n) additive (0 / -inf); None = plain causal


@dataclass(slots=True)
class SdpaMetadata:
    slot_mapping: torch.Tensor  # (T,) int64 cache slot of each token of the step
    decode_groups: list[DecodeGroup] = field(default_factory=list)
    prefills: list[PrefillChunk] = field(default_factory=list)


def _additive(attend: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A boolean mask as SDPA makes it from one, 0 where True and -inf elsewhere: made once per step here instead
    of once per layer and group inside SDPA."""
    return torch.zeros(attend.shape, dtype=dtype).masked_fill_(~attend, float("-inf")).to(device)


class SdpaAttention(AttentionBackend):
    name = "sdpa"
    supports_cuda_graphs = False
    sorts_decodes = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.scratch = GatherScratch()  # one layer's gathered K/V at a time: SDPA reads it before the next gather

    def prepare(self, step: StepTensors) -> SdpaMetadata:
        meta = SdpaMetadata(slot_mapping=step.slot_mapping)
        self._plan_decodes(step, meta)
        self._plan_prefills(step, meta)
        return meta

    def _plan_decodes(self, step: StepTensors, meta: SdpaMetadata) -> None:
        bs, window = self.cache.block_size, self.sliding_window
        device = step.slot_mapping.device
        lens = step.seq_lens_np
        tables = step.block_tables_np
        groups: list[list[int]] = []
        for i in range(step.num_decodes):
            if groups:
                group = groups[-1]
                real = int(lens[group].sum()) + int(lens[i])
                if (len(group) + 1) * int(lens[i]) <= _MAX_PADDING * real or len(group) < 4:
                    group.append(i)
                    continue
            groups.append([i])
        for group in groups:
            g_lens = torch.from_numpy(lens[group[0] : group[-1] + 1].copy())[:, None]
            nb = -(-int(g_lens.max()) // bs)
            key_pos = torch.arange(nb * bs)[None, :]
            attend = key_pos < g_lens
            if window is not None:
                attend &= key_pos > g_lens - 1 - window
            block_tables = torch.from_numpy(tables[group[0] : group[-1] + 1, :nb].copy())
            meta.decode_groups.append(
                DecodeGroup(group[0], group[-1] + 1, block_tables.to(device), _additive(attend[:, None, None, :], self.cache.dtype, device))
            )

    def _plan_prefills(self, step: StepTensors, meta: SdpaMetadata) -> None:
        bs, window = self.cache.block_size, self.sliding_window
        device = step.slot_mapping.device
        lens = step.seq_lens_np
        tables = step.block_tables_np
        starts = step.query_start_np
        for i in range(step.num_decodes, step.num_seqs):
            start, end = int(starts[i]), int(starts[i + 1])
            n, total = end - start, int(lens[i])
            begin = total - n
            block_ids: torch.Tensor | None = None
            mask: torch.Tensor | None = None
            if begin > 0 or (window is not None and n > window):
                q_pos = torch.arange(begin, total)[:, None]
                k_pos = torch.arange(total)[None, :]
                mask = k_pos <= q_pos
                if window is not None:
                    mask &= k_pos > q_pos - window
                mask = _additive(mask, self.cache.dtype, device)
            if begin > 0:
                block_ids = torch.from_numpy(tables[i, : -(-total // bs)].copy()).to(device)
            meta.prefills.append(PrefillChunk(start, end, begin, block_ids, mask))

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, meta: SdpaMetadata) -> torch.Tensor:
        _, num_heads, head_dim = q.shape
        num_kv_heads = k.shape[1]
        rep = num_heads // num_kv_heads
        cache = self.cache
        cache.write(layer, meta.slot_mapping, k, v)  # first, so that every query sees its own token
        outs = self._decodes(q, layer, meta)
        for p in meta.prefills:
            n = p.end - p.start
            qp = q[p.start : p.end].transpose(0, 1).unsqueeze(0)  # (1, Hq, n, D)
            if p.block_ids is None:  # (as the cache holds them: a quantized cache's codes decoded)
                kp = cache.as_stored(k[p.start : p.end]).transpose(0, 1).unsqueeze(0)  # (1, Hkv, n, D)
                vp = cache.as_stored(v[p.start : p.end]).transpose(0, 1).unsqueeze(0)
            else:
                total = p.context_len + n
                kc, vc = cache.gather(layer, p.block_ids, self.scratch)  # (nb * bs, Hkv, D)
                kp = kc[:total].transpose(0, 1).unsqueeze(0)
                vp = vc[:total].transpose(0, 1).unsqueeze(0)
            o = F.scaled_dot_product_attention(
                qp, kp, vp, attn_mask=p.mask, is_causal=p.mask is None and p.block_ids is None, enable_gqa=rep > 1
            )
            outs.append(o[0].transpose(0, 1).reshape(n, num_heads * head_dim))
        return outs[0] if len(outs) == 1 else torch.cat(outs)

    def _decodes(self, q: torch.Tensor, layer: int, meta: SdpaMetadata) -> list[torch.Tensor]:
        """The single-token rows' outputs, (rows, Hq * D) each, in row order."""
        _, num_heads, head_dim = q.shape
        num_kv_heads = self.cache.num_kv_heads
        rep = num_heads // num_kv_heads
        outs: list[torch.Tensor] = []
        for g in meta.decode_groups:
            n = g.end - g.start
            kc, vc = self.cache.gather(layer, g.block_tables, self.scratch)  # (g, L, Hkv, D)
            qg = q[g.start : g.end].view(n, num_kv_heads, rep, head_dim)
            o = F.scaled_dot_product_attention(qg, kc.transpose(1, 2), vc.transpose(1, 2), attn_mask=g.mask)
            outs.append(o.reshape(n, num_heads * head_dim))  # (g, Hkv, rep, D): head h = kv * rep + r
        return outs
