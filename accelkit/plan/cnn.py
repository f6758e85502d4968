"""CNN tracing: per-layer FLOPs and activation sizes from the real module, built on the meta device
(no memory, no weights). The only planner module that imports torch; ``context`` loads it lazily."""

from __future__ import annotations

import functools
from typing import Any

from accelkit.core import ModelSpec
from accelkit.models.build import build_model

DEFAULT_IMAGE_SIZE = 224


@functools.lru_cache(maxsize=16)
def trace_cnn(model: ModelSpec, *, dtype_bytes: int = 4) -> dict[str, Any]:
    """Per-sample forward FLOPs (FlopCounterMode rules), bytes saved for backward (saved_tensors_hooks,
    one count per storage), and a per-layer table of conv/linear FLOPs and output bytes."""
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    size = model.image_size or DEFAULT_IMAGE_SIZE
    dtype = {4: torch.float32, 2: torch.bfloat16}[dtype_bytes]
    module = build_model(model, device="meta", dtype=dtype).train()
    rows: list[dict[str, Any]] = []
    leaves = (torch.nn.Conv2d, torch.nn.Linear)
    outputs: dict[str, int] = {}

    def hook(name: str) -> Any:
        def record(mod: torch.nn.Module, args: Any, out: torch.Tensor) -> None:
            outputs[name] = out.numel() // out.shape[0] * out.element_size()
        return record

    handles = [m.register_forward_hook(hook(n)) for n, m in module.named_modules() if isinstance(m, leaves)]
    kept: list[torch.Tensor] = []  # hold every saved tensor so ids stay unique while we count
    seen: set[int] = set()
    saved = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal saved
        if isinstance(t, torch.nn.Parameter):
            return t
        base = t._base if t._base is not None else t
        if id(base) not in seen:
            seen.add(id(base))
            kept.append(base)
            saved += base.numel() * base.element_size()
        return t

    x = torch.empty(1, model.num_channels, size, size, device="meta", dtype=dtype)
    counter = FlopCounterMode(display=False)
    with counter, torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        module(x)
    for h in handles:
        h.remove()
    by_module = counter.get_flop_counts()
    for name, mod in module.named_modules():
        if isinstance(mod, leaves):
            flops = sum(by_module.get(f"{type(module).__name__}.{name}", {}).values())
            rows.append({"layer": name, "type": type(mod).__name__, "forward_flops": int(flops),
                         "output_bytes": outputs.get(name, 0)})
    return {
        "image_size": size,
        "forward_flops": float(counter.get_total_flops()),
        "saved_bytes": float(saved),
        "largest_output_bytes": float(max(outputs.values(), default=0)),
        "layers": rows,
    }
