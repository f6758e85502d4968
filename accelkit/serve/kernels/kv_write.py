# mypy: disable-error-code="no-untyped-def, untyped-decorator"
# (Triton reads a kernel's parameter annotations as its signature: tl.constexpr marks compile-time values, so
# kernel parameters carry no Python type hints.)
"""The KV-cache write of one layer: K and V of a step's tokens into their slots in one kernel, quantizing
for fp8/int8 caches. Bit-identical to the PyTorch path of ``kv_cache.py``: the same float32 amax, IEEE
divisions, float16 scale and round-to-nearest-even codes.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from accelkit.serve.kernels.quant import KV_FP8, KV_INT8, KV_NONE, fp8_e4m3_encode, int8_encode


@triton.jit
def _store_token(x, cache_ptrs, scale_ptrs, mask, mask_h, QMAX: tl.constexpr, MIN_SCALE: tl.constexpr,
                 KV_QUANT: tl.constexpr):
    """``x``: (HEADS, D) float32 of one token → its cache slot (codes + one float16 scale per head)."""
    if KV_QUANT == 0:
        tl.store(cache_ptrs, x.to(cache_ptrs.dtype.element_ty), mask=mask)
    else:
        amax = tl.max(tl.abs(x), axis=1)
        scale = tl.maximum(tl.math.div_rn(amax, QMAX), MIN_SCALE).to(tl.float16)
        scaled = tl.math.div_rn(x, scale.to(tl.float32)[:, None])
        scaled = tl.minimum(tl.maximum(scaled, -QMAX), QMAX)
        if KV_QUANT == 1:
            codes = fp8_e4m3_encode(scaled).to(tl.uint8)
        else:
            codes = int8_encode(scaled).to(tl.int8)
        tl.store(cache_ptrs, codes, mask=mask)
        tl.store(scale_ptrs, scale, mask=mask_h)


@triton.jit
def _kv_write_kernel(
    K, V, K_CACHE, V_CACHE, K_SCALE, V_SCALE, SLOTS,
    stride_kt, stride_kh, stride_vt, stride_vh, stride_cs, stride_ss,
    NUM_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, HEADS_P2: tl.constexpr, DIM_P2: tl.constexpr,
    QMAX: tl.constexpr, MIN_SCALE: tl.constexpr, KV_QUANT: tl.constexpr,
):
    t = tl.program_id(0)  # one program per token: all its KV heads, K and V
    slot = tl.load(SLOTS + t).to(tl.int64)
    offs_h = tl.arange(0, HEADS_P2)
    offs_d = tl.arange(0, DIM_P2)
    mask_h = offs_h < NUM_HEADS
    mask = mask_h[:, None] & (offs_d[None, :] < HEAD_DIM)
    cache_off = slot * stride_cs + offs_h[:, None] * HEAD_DIM + offs_d[None, :]
    scale_off = slot * stride_ss + offs_h
    k = tl.load(K + t * stride_kt + offs_h[:, None] * stride_kh + offs_d[None, :], mask=mask, other=0.0)
    _store_token(k.to(tl.float32), K_CACHE + cache_off, K_SCALE + scale_off, mask, mask_h, QMAX, MIN_SCALE, KV_QUANT)
    v = tl.load(V + t * stride_vt + offs_h[:, None] * stride_vh + offs_d[None, :], mask=mask, other=0.0)
    _store_token(v.to(tl.float32), V_CACHE + cache_off, V_SCALE + scale_off, mask, mask_h, QMAX, MIN_SCALE, KV_QUANT)


def kv_write(
    k: torch.Tensor, v: torch.Tensor, slot_mapping: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    k_scale: torch.Tensor | None = None, v_scale: torch.Tensor | None = None, *, kind: str = "auto",
    qmax: float = 1.0, min_scale: float = 1e-7,
) -> None:
    """``k, v``: (T, Hkv, D) (head dim contiguous); caches of one layer ``(num_blocks, block_size, Hkv, D)``,
    scales ``(num_blocks, block_size, Hkv)`` for ``kind`` fp8/int8; ``slot_mapping``: (T,) int64."""
    num_tokens, num_heads, head_dim = k.shape
    if num_tokens == 0:
        return
    assert k.stride(-1) == 1 and v.stride(-1) == 1 and k_cache.is_contiguous() and v_cache.is_contiguous()
    quant = {"auto": KV_NONE, "fp8": KV_FP8, "int8": KV_INT8}[kind]
    if quant == KV_NONE:
        k_scale = v_scale = k_cache  # never read: the pointers only need a valid type
    assert k_scale is not None and v_scale is not None
    _kv_write_kernel[(num_tokens,)](
        k, v, k_cache, v_cache, k_scale, v_scale, slot_mapping,
        k.stride(0), k.stride(1), v.stride(0), v.stride(1), num_heads * head_dim, num_heads,
        NUM_HEADS=num_heads, HEAD_DIM=head_dim, HEADS_P2=triton.next_power_of_2(num_heads),
        DIM_P2=triton.next_power_of_2(head_dim), QMAX=qmax, MIN_SCALE=min_scale, KV_QUANT=quant,
    )
