"""Persistent buffers for a step's integer inputs: filled on the host once per step, copied in one go.

Every integer a step needs — token ids, positions, cache slots, context lengths, query offsets, the rows
whose logits are sampled, the block tables — lives in one int64 buffer, packed back to back
(:class:`Layout`); the host copy is pinned on CUDA, so the whole step's input is one asynchronous
host-to-device copy instead of a tensor (and a copy) per field or per sequence. On CPU the host buffer
*is* the device buffer. The same layout for the same shape lands at the same addresses, which is what a
CUDA graph needs: it is captured once on the device views of ``layout(B, B, W)`` and replays whatever the
host wrote there.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from accelkit.serve.sequence import Sequence

_MAX_CACHED_LAYOUTS = 256
_FIELDS = ("input_ids", "positions", "slot_mapping", "seq_lens", "query_start", "logits_indices", "block_tables")


@dataclass(frozen=True, slots=True)
class Layout:
    """Offsets of each field for ``num_tokens`` T, ``num_seqs`` S and block-table width W."""

    num_tokens: int
    num_seqs: int
    width: int

    def sizes(self) -> tuple[int, ...]:
        t, s = self.num_tokens, self.num_seqs
        return (t, t, t, s, s + 1, s, s * self.width)

    @property
    def size(self) -> int:
        return sum(self.sizes())

    def slices(self) -> dict[str, slice]:
        out, offset = {}, 0
        for name, n in zip(_FIELDS, self.sizes(), strict=True):
            out[name] = slice(offset, offset + n)
            offset += n
        return out


class InputBuffers:
    """One int64 buffer on the host (pinned on CUDA) and one on the device, sized for the largest step."""

    def __init__(self, *, max_tokens: int, max_seqs: int, max_width: int, device: torch.device) -> None:
        self.capacity = Layout(max_tokens, max_seqs, max_width).size
        self.is_cuda = device.type == "cuda"
        self.host = torch.zeros(self.capacity, dtype=torch.int64, pin_memory=self.is_cuda)
        self.host_np: np.ndarray = self.host.numpy()
        self.device = torch.zeros(self.capacity, dtype=torch.int64, device=device) if self.is_cuda else self.host
        # torch.cuda.Event is untyped in torch's stubs
        self._copied = torch.cuda.Event() if self.is_cuda else None  # type: ignore[no-untyped-call]
        self._in_flight = False
        # views per layout, reused: decode steps repeat a few shapes (graph buckets always the same ones)
        self._views: dict[Layout, tuple[dict[str, np.ndarray], dict[str, torch.Tensor]]] = {}

    def _cached(self, layout: Layout) -> tuple[dict[str, np.ndarray], dict[str, torch.Tensor]]:
        views = self._views.get(layout)
        if views is None:
            if layout.size > self.capacity:
                raise ValueError(f"a step of {layout} needs {layout.size} int64 slots; the buffers hold {self.capacity}")
            slices = layout.slices()
            host = {name: self.host_np[sl] for name, sl in slices.items()}
            host["block_tables"] = host["block_tables"].reshape(layout.num_seqs, layout.width)
            dev = {name: self.device[sl] for name, sl in slices.items()}
            dev["block_tables"] = dev["block_tables"].view(layout.num_seqs, layout.width)
            if len(self._views) >= _MAX_CACHED_LAYOUTS:
                self._views.pop(next(iter(self._views)))  # oldest first
            views = self._views[layout] = (host, dev)
        return views

    def host_views(self, layout: Layout) -> dict[str, np.ndarray]:
        """numpy views to fill; call :meth:`wait_for_copy` first (the last copy may still read them)."""
        return self._cached(layout)[0]

    def device_views(self, layout: Layout) -> dict[str, torch.Tensor]:
        return self._cached(layout)[1]

    def wait_for_copy(self) -> None:
        """Block until the previous step's copy has read the pinned host buffer (usually long done)."""
        if self._in_flight and self._copied is not None:
            self._copied.synchronize()
            self._in_flight = False

    def upload(self, layout: Layout) -> None:
        """Copy the filled prefix to the device: one asynchronous copy, ordered before the step's kernels."""
        if not self.is_cuda:
            return
        self.device[: layout.size].copy_(self.host[: layout.size], non_blocking=True)
        assert self._copied is not None
        self._copied.record()
        self._in_flight = True


class HostBlockTables:
    """A persistent host copy of each scheduled sequence's block table, one row of a pool per sequence.

    Block tables only grow by appends while a sequence runs (a preemption frees the whole table, and the
    sequence comes back with ``num_preemptions`` one higher), so a step copies only the new block ids of
    each row and then gathers all of its rows at once with one numpy indexing — instead of converting
    every sequence's Python list each step. ``release`` returns a finished sequence's row.
    """

    def __init__(self, *, max_rows: int, max_blocks: int) -> None:
        self.pool = np.zeros((max(1, max_rows), max_blocks), dtype=np.int64)
        self._free = list(range(self.pool.shape[0] - 1, -1, -1))
        self._entries: dict[int, list[int]] = {}  # seq_id → [row, num_blocks, num_preemptions, last block id]

    def row(self, seq: Sequence) -> int:
        """The pool row holding ``seq.block_table`` (synced)."""
        table = seq.block_table
        n = len(table)
        last = table[-1] if n else -1
        entry = self._entries.get(seq.seq_id)
        if entry is not None and entry[1] == n and entry[2] == seq.num_preemptions and entry[3] == last:
            return entry[0]  # unchanged since the last step (the common case: 15 of 16 decode steps)
        if not n:  # finished (its blocks freed, its row released) or never allocated: its row would hold another's
            raise ValueError(f"request {seq.request_id} has no KV blocks (finished or never allocated); it cannot run")
        if entry is None:
            entry = self._entries[seq.seq_id] = [self._take_row(), 0, seq.num_preemptions, -1]
        have = entry[1]
        # grown by appends of the same table, or a fresh table after a preemption: copy what is new
        same = entry[2] == seq.num_preemptions and have <= n and (have == 0 or self.pool[entry[0], have - 1] == table[have - 1])
        start = have if same else 0
        self.pool[entry[0], start:n] = table[start:n]
        entry[1], entry[2], entry[3] = n, seq.num_preemptions, last
        return entry[0]

    def rows(self, seqs: list[Sequence]) -> list[int]:
        """:meth:`row` of each sequence; the unchanged ones (most of them, most steps) checked inline."""
        entries = self._entries
        out = []
        for seq in seqs:
            table = seq.block_table
            entry = entries.get(seq.seq_id)
            if (entry is not None and entry[1] == len(table) and entry[2] == seq.num_preemptions
                    and entry[3] == (table[-1] if table else -1)):
                out.append(entry[0])
            else:
                out.append(self.row(seq))
        return out

    def release(self, seq_id: int) -> None:
        entry = self._entries.pop(seq_id, None)
        if entry is not None:
            self._free.append(entry[0])

    def _take_row(self) -> int:
        if not self._free:  # more live sequences than rows (preempted ones keep theirs): grow
            old = self.pool.shape[0]
            self.pool = np.concatenate([self.pool, np.zeros_like(self.pool)])
            self._free = list(range(2 * old - 1, old - 1, -1))
        return self._free.pop()
