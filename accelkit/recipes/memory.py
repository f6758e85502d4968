"""Measure what autograd keeps for backward: the bytes of tensors saved by the forward pass, counted
once per storage (views share storage), with parameters excluded — the activation memory that
checkpointing trades for recompute."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def saved_activation_bytes(forward: Callable[[], Any], *, exclude: torch.nn.Module | None = None) -> tuple[int, Any]:
    """Run ``forward`` under ``saved_tensors_hooks``; return (bytes saved for backward, its output).

    Storages of ``exclude``'s parameters and buffers are not counted (they exist without the forward).
    """
    skip: set[int] = set()
    if exclude is not None:
        skip = {t.untyped_storage().data_ptr() for t in (*exclude.parameters(), *exclude.buffers())}
    seen: dict[int, int] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        if tensor.layout == torch.strided and tensor.device.type != "meta":
            storage = tensor.untyped_storage()
            ptr = storage.data_ptr()
            if ptr not in skip:
                seen[ptr] = max(seen.get(ptr, 0), storage.nbytes())
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        output = forward()
    return sum(seen.values()), output
