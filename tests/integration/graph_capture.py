"""What a CUDA-graph capture refuses, checked on a CPU.

A captured region must never make the host wait for the device (``.item()``, ``int(t)``, ``.tolist()``,
``nonzero``, a boolean-mask index, ``unique``…: capture fails with ``operation not permitted when stream is
capturing``), and must not bring host data in (``torch.tensor(list)``: its value would be frozen into the
graph). ``CaptureRules`` records every such operation issued inside its ``with`` block — by aten op through a
dispatch mode, plus the Python-level reads (``tolist``, ``numpy``) that reach no op on a CPU tensor.

Triton's interpreter (``TRITON_INTERPRET=1``) reads and writes kernel arguments through the host; operations it
issues itself are not the engine's and are skipped (on a GPU a launch is one asynchronous call).
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten
_SYNCING = {aten._local_scalar_dense, aten.item, aten.nonzero, aten.masked_select, aten.unique_consecutive, aten._unique,
            aten._unique2, aten.unique_dim, aten.equal, aten.is_nonzero}
_HOST_DATA = {aten.lift_fresh, aten.lift_fresh_copy}
_TRITON = f"{os.sep}triton{os.sep}"
_HOST_READS = ("tolist", "numpy", "__array__")


def _inside_triton() -> bool:
    frame = sys._getframe(2)
    while frame is not None:
        if _TRITON in frame.f_code.co_filename:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


def _where() -> str:
    """The innermost accelkit frame that issued it (else the innermost frame outside this module and torch)."""
    frames = [f for f in traceback.extract_stack()[:-3] if f"{os.sep}torch{os.sep}" not in f.filename]
    ours = [f for f in frames if f"{os.sep}accelkit{os.sep}" in f.filename] or frames
    return f"{ours[-1].filename}:{ours[-1].lineno} ({ours[-1].line})" if ours else "?"


def _why(func: Any, args: tuple, kwargs: dict) -> str | None:
    packet = func.overloadpacket
    if packet in _SYNCING:
        return f"{func} waits for the device"
    if packet in _HOST_DATA:
        return f"{func}: a tensor made from host data inside the region"
    if packet is aten.repeat_interleave and func._overloadname != "self_int" and kwargs.get("output_size") is None:
        return f"{func} without output_size waits for the device"
    masks = packet in (aten.index, aten.index_put, aten.index_put_) and len(args) > 1 and any(
        isinstance(i, torch.Tensor) and i.dtype == torch.bool for i in args[1])
    if masks:
        return f"{func} with a boolean mask waits for the device (it calls nonzero)"
    return None


class CaptureRules(TorchDispatchMode):
    """``with rules: region()`` → ``rules.violations``: one line per operation a graph capture would refuse."""

    def __init__(self) -> None:
        super().__init__()
        self.violations: list[str] = []
        self._saved: dict[str, Any] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        why = _why(func, args, kwargs)
        if why is not None and not _inside_triton():
            self.violations.append(f"{why} at {_where()}")
        return func(*args, **kwargs)

    def _host_read(self, name: str) -> Any:
        original = self._saved[name]

        def read(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if not _inside_triton():
                self.violations.append(f"Tensor.{name}() copies to the host at {_where()}")
            return original(tensor, *args, **kwargs)

        return read

    def __enter__(self) -> CaptureRules:
        for name in _HOST_READS:
            self._saved[name] = getattr(torch.Tensor, name)
            setattr(torch.Tensor, name, self._host_read(name))
        super().__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        super().__exit__(*exc)
        for name, original in self._saved.items():
            setattr(torch.Tensor, name, original)
        self._saved.clear()
