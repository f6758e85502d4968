"""The fast backend: Triton kernels that read K/V in place from the paged cache (``kernels/``).

Per layer and step: one kernel that applies RoPE to q and k and writes K and V to the cache (quantizing
for fp8/int8; ``forward_qkv``, what the model calls), one attention launch over the single-token rows
(plus one merge launch when their context is split), one over the prompt chunks. The
launches read block tables, lengths and query offsets from device tensors and take only host integers
fixed for a given batch shape, which is what lets a CUDA graph captured once replay every decode step.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from accelkit.serve.attention.base import AttentionBackend, StepTensors
from accelkit.serve.kernels.fused import rope_kv_write
from accelkit.serve.kernels.kv_write import kv_write
from accelkit.serve.kernels.paged_attention import decode_num_splits, paged_attention
from accelkit.serve.kv_cache import KVCache

_CPU_SMS = 4  # under the interpreter: a small "GPU", so that tests exercise split-K too


@dataclass(slots=True)
class TritonMetadata:
    num_tokens: int
    num_decodes: int
    num_prefills: int
    max_query_len: int
    num_splits: int
    positions: torch.Tensor
    slot_mapping: torch.Tensor
    seq_lens: torch.Tensor
    query_start: torch.Tensor
    block_tables: torch.Tensor


class TritonAttention(AttentionBackend):
    name = "triton"
    supports_cuda_graphs = True
    sorts_decodes = False
    fuses_rope = True

    def __init__(self, cache: KVCache, *, num_heads: int, head_dim: int, sliding_window: int | None) -> None:
        super().__init__(cache, num_heads=num_heads, head_dim=head_dim, sliding_window=sliding_window)
        device = cache.k.device
        self.num_sms = (
            torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else _CPU_SMS
        )

    def prepare(self, step: StepTensors) -> TritonMetadata:
        return TritonMetadata(
            num_tokens=step.num_tokens, num_decodes=step.num_decodes, num_prefills=step.num_seqs - step.num_decodes,
            max_query_len=step.max_query_len,
            num_splits=decode_num_splits(step.num_decodes, self.num_kv_heads, self.num_sms),
            positions=step.positions, slot_mapping=step.slot_mapping, seq_lens=step.seq_lens, query_start=step.query_start,
            block_tables=step.block_tables,
        )

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layer: int, meta: TritonMetadata) -> torch.Tensor:
        cache = self.cache
        k_scale, v_scale = cache.scales(layer)
        kv_write(k, v, meta.slot_mapping, cache.k[layer], cache.v[layer], k_scale, v_scale, kind=cache.kind,
                 qmax=cache.qmax, min_scale=cache.min_scale)
        return self._attend(q, layer, meta)

    def forward_qkv(self, qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, layer: int, meta: TritonMetadata
                    ) -> torch.Tensor:
        cache = self.cache
        k_scale, v_scale = cache.scales(layer)
        q = rope_kv_write(qkv, meta.positions, cos, sin, meta.slot_mapping, cache.k[layer], cache.v[layer], k_scale,
                          v_scale, num_heads=self.num_heads, kind=cache.kind, qmax=cache.qmax, min_scale=cache.min_scale)
        return self._attend(q, layer, meta)

    def _attend(self, q: torch.Tensor, layer: int, meta: TritonMetadata) -> torch.Tensor:
        cache = self.cache
        k_cache, v_cache = cache.k[layer], cache.v[layer]
        k_scale, v_scale = cache.scales(layer)
        out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
        common = dict(block_tables=meta.block_tables, seq_lens=meta.seq_lens, query_start=meta.query_start,
                      scale=self.scale, sliding_window=self.sliding_window, kind=cache.kind)
        paged_attention(q, out, k_cache, v_cache, k_scale, v_scale, seq_offset=0, num_seqs=meta.num_decodes,
                        max_query_len=1, num_splits=meta.num_splits, **common)
        paged_attention(q, out, k_cache, v_cache, k_scale, v_scale, seq_offset=meta.num_decodes,
                        num_seqs=meta.num_prefills, max_query_len=meta.max_query_len, **common)
        return out.view(q.shape[0], -1)
