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

    def host_views(self, layout: Layout) -> dict[str, np.ndarray]:
        """numpy views to fill; call :meth:`wait_for_copy` first (the last copy may still read them)."""
        if layout.size > self.capacity:
            raise ValueError(f"a step of {layout} needs {layout.size} int64 slots; the buffers hold {self.capacity}")
        views = {name: self.host_np[sl] for name, sl in layout.slices().items()}
        views["block_tables"] = views["block_tables"].reshape(layout.num_seqs, layout.width)
        return views

    def device_views(self, layout: Layout) -> dict[str, torch.Tensor]:
        views = {name: self.device[sl] for name, sl in layout.slices().items()}
        views["block_tables"] = views["block_tables"].view(layout.num_seqs, layout.width)
        return views

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
