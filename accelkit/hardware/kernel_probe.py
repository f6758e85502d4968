"""The planner's two other kernel classes, measured on this device beside the matmul and copy probes:

* **elementwise bandwidth** — ``torch.add(a, b, out=c)`` over a large buffer (reads two, writes one): the
  bandwidth residual adds, norms, activations and rotary kernels really reach, as a fraction of the
  catalog's HBM bandwidth (on a CPU or a GPU the catalog lacks: of the measured copy bandwidth);
* **attention efficiency** — causal ``scaled_dot_product_attention`` forward + backward at head dim 128
  (64 on a CPU), in the planner's FLOP convention: useful causal FLOPs (½ of 4·b·s²·H·d forward) × 3.5
  (backward 2.5×, it recomputes QKᵀ), as a fraction of the dense 16-bit peak (on a CPU: of the probe's
  measured fp32 matmul; on a GPU the catalog lacks: of its bf16 one — the attention's own dtype), and that
  fraction divided by the causal block factor s/(s+128) — the long-sequence figure the planner's prior is written
  in.

``accelkit.plan.calibrate`` uses both in place of the published priors when the probe's device matches the
planned one. torch is imported by the functions only (the planner never imports this module).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelkit.core import DeviceSpec, summarize
from accelkit.timing import LoopConfig, time_loop

#: the planner's causal block size (accelkit/plan/priors.py FLASH_BLOCK), kept here to stay below plan/
FLASH_BLOCK = 128
FLASH_PASSES = 3.5  # forward + 2.5× backward


def attention_shape(device: str) -> dict[str, int]:
    """(batch, heads, seq, head_dim): a long-sequence shape on GPUs, a small one on CPUs."""
    if device == "cpu":
        return {"batch": 1, "heads": 4, "seq": 512, "head_dim": 64}
    return {"batch": 4, "heads": 32, "seq": 4096, "head_dim": 128}


def attention_flops(shape: dict[str, int]) -> float:
    """Useful FLOPs of one causal forward + backward (the planner's convention)."""
    b, h, s, d = shape["batch"], shape["heads"], shape["seq"], shape["head_dim"]
    return FLASH_PASSES * 0.5 * 4.0 * b * s * s * h * d


def _elementwise_fn(numel: int, device: str) -> tuple[Callable[[], object], int]:
    import torch

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    a = torch.ones(numel, dtype=dtype, device=device)
    b = torch.ones_like(a)
    c = torch.empty_like(a)
    return (lambda: torch.add(a, b, out=c)), 3 * numel * a.element_size()


def _attention_fn(shape: dict[str, int], device: str) -> Callable[[], object]:
    import torch
    import torch.nn.functional as F

    dtype = torch.float32 if device == "cpu" else torch.bfloat16
    dims = (shape["batch"], shape["heads"], shape["seq"], shape["head_dim"])
    q, k, v = (torch.randn(*dims, dtype=dtype, device=device, requires_grad=True) for _ in range(3))
    grad = torch.randn(*dims, dtype=dtype, device=device)

    def step() -> object:
        for t in (q, k, v):
            t.grad = None
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        out.backward(grad)  # type: ignore[no-untyped-call]  # torch leaves Tensor.backward unannotated
        return out

    return step


def attention_reference(device: str, catalog: DeviceSpec | None, matmul: dict[str, Any]) -> tuple[float | None, str]:
    """(TFLOP/s, what it is) the attention figure is a fraction of: the catalog's dense 16-bit peak on a catalog GPU;
    elsewhere this probe's matmul of the attention's own dtype — fp32 on a CPU, bf16 on a GPU (or fp16 where no bf16
    was probed). A GPU the catalog does not know (H100 NVL, L4) once had its bf16 attention divided by its fp32
    matmul: 'of ref' read several hundred percent."""
    if catalog is not None:
        peak = catalog.peak("bf16") or catalog.peak("fp16")
        return (peak / 1e12 if peak else None), "catalog dense bf16 peak"
    for dtype in ("fp32",) if device == "cpu" else ("bf16", "fp16"):
        if tflops := (matmul.get(dtype) or {}).get("tflops"):
            return tflops, f"this probe's {dtype} matmul"
    return None, f"this probe's {'fp32' if device == 'cpu' else 'bf16'} matmul"


def probe_kernels(device: str, loop: LoopConfig, *, catalog: DeviceSpec | None, copy_gbps: float,
                  matmul: dict[str, Any], elementwise_bytes: int,
                  on_step: Callable[[str], None] | None = None) -> tuple[dict[str, Any], dict[str, list[float]]]:
    """Measure elementwise bandwidth and attention efficiency; (details, raw samples)."""
    numel = max(1 << 16, elementwise_bytes // 4)  # each operand as large as the copy probe's buffer (past the caches)
    if on_step:
        on_step(f"elementwise add, 3 × {elementwise_bytes >> 20} MiB")
    fn, moved = _elementwise_fn(numel, device)
    result = time_loop(fn, loop, device=device)
    del fn  # its three buffers: freed before the attention probe allocates (hw probe's peak_bytes counts one phase)
    gbps = [moved / t / 1e9 for t in result.samples_s]
    stats = summarize(gbps)
    reference = catalog.memory_bandwidth_bytes_per_s / 1e9 if catalog else copy_gbps
    elementwise = {"gbps": stats.median, "stats": stats.to_dict(), "bytes_per_iteration": moved,
                   "reference_gbps": reference,
                   "reference": "catalog HBM bandwidth" if catalog else "this probe's copy bandwidth",
                   "fraction_of_peak": stats.median / reference if reference else None}

    shape = attention_shape(device)
    if on_step:
        on_step(f"causal attention fwd+bwd {shape['batch']}×{shape['heads']}×{shape['seq']}×{shape['head_dim']}")
    result = time_loop(_attention_fn(shape, device), loop, device=device)
    flops = attention_flops(shape)
    tflops = [flops / t / 1e12 for t in result.samples_s]
    astats = summarize(tflops)
    peak_tflops, peak_what = attention_reference(device, catalog, matmul)
    fraction = astats.median / peak_tflops if peak_tflops else None
    useful = shape["seq"] / (shape["seq"] + FLASH_BLOCK)
    attention = {"tflops": astats.median, "stats": astats.to_dict(), "shape": shape, "causal": True,
                 "flop_convention": "useful causal FLOPs × 3.5 (forward + backward)", "reference_tflops": peak_tflops,
                 "reference": peak_what, "fraction_of_peak": fraction,
                 "fraction_at_long_sequence": fraction / useful if fraction is not None else None}
    return {"elementwise": elementwise, "attention": attention}, {"elementwise_gbps": gbps, "attention_tflops": tflops}
