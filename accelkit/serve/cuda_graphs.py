"""Decode steps replayed from CUDA graphs, one per batch-size bucket.

A decode-only step of ``n`` sequences runs as the graph of the smallest captured size ``B >= n``: the
runner writes the real rows and ``B - n`` padding rows into the persistent input buffers at the layout of
``B`` (``input_buffers.py``), uploads them, and replays the graph — embedding, every layer, final norm and
LM head in one launch. Padding rows are harmless by construction: token 0 at position 0, context length
1, their K/V written to the runner's *scratch block* (allocated past the blocks the block manager hands
out) and attending only to it; their logits are never read.

Prefill and mixed steps, and decode batches larger than the largest bucket, run eagerly. On CPU (or with
``capture=False``) the same padded path runs eagerly — how the tests check the buckets, the padding and
the static layout without a GPU.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

import torch

log = logging.getLogger("accelkit.serve")

MAX_GRAPH_BATCH_SIZE = 512


def graph_batch_sizes(max_size: int) -> list[int]:
    """Captured batch sizes: 1, 2, 4, 8, then every 8 up to 64, then every 16, and ``max_size`` itself."""
    sizes = [s for s in (1, 2, 4) if s < max_size]
    sizes += [s for s in range(8, 65, 8) if s < max_size]
    sizes += [s for s in range(80, max_size, 16)]
    return [*sizes, max_size]


class DecodeGraphs:
    """The decode forward for each bucket; ``run`` replays (or, without capture, runs) the right one."""

    def __init__(self, forward: Callable[[int, Any], torch.Tensor], prepare: Callable[[int], Any], *,
                 max_batch_size: int, capture: bool) -> None:
        """``prepare(B)`` fills the buffers with B padding rows and returns the attention metadata of a
        B-row decode step; ``forward(B, meta)`` runs the model on the buffers' views → logits (B, vocab)."""
        self.sizes = graph_batch_sizes(max_batch_size)
        self.max_batch_size = max_batch_size
        self.capture = capture
        self._forward, self._prepare = forward, prepare
        self._graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self._logits: dict[int, torch.Tensor] = {}

    def bucket(self, num_seqs: int) -> int | None:
        """The smallest captured size holding ``num_seqs`` rows; None when the batch is too large."""
        if num_seqs > self.max_batch_size:
            return None
        return next(s for s in self.sizes if s >= num_seqs)

    def capture_all(self) -> None:
        """Capture every bucket, largest first (later, smaller graphs reuse the shared memory pool)."""
        if not self.capture:
            return
        t0 = time.perf_counter()
        pool = torch.cuda.graph_pool_handle()
        for size in sorted(self.sizes, reverse=True):
            meta = self._prepare(size)
            self._forward(size, meta)  # warm-up: compiles kernels, sizes cuBLAS workspaces, outside the graph
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool):
                self._logits[size] = self._forward(size, meta)
            self._graphs[size] = graph
        torch.cuda.synchronize()
        log.info("captured %d CUDA graphs for decode batch sizes %s in %.1f s", len(self.sizes),
                 f"{self.sizes[0]}..{self.sizes[-1]}", time.perf_counter() - t0)

    def run(self, size: int, meta: Any) -> torch.Tensor:
        """Logits (size, vocab) of a padded decode step whose inputs are already in the buffers."""
        graph = self._graphs.get(size)
        if graph is None:
            return self._forward(size, meta)
        graph.replay()
        return self._logits[size]
