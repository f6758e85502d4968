# mypy: disable-error-code="no-untyped-def, untyped-decorator"
# (Triton reads a kernel's parameter annotations as its signature: tl.constexpr marks compile-time values, so
# kernel parameters carry no Python type hints.)
"""The small ops of a decoder layer, one kernel each where PyTorch launches five to ten:

* ``rms_norm`` — optionally adding the residual first (``h = residual + x``; both outputs written);
* ``rope_kv_write`` — rotary embedding of q (in place) and k, and the K/V cache write of the rotated k
  and v, quantizing for fp8/int8 caches (``kv_write.py``'s store);
* ``silu_mul`` — ``silu(gate) * up`` of the fused gate/up projection.

Each rounds where the ``transformers`` modules round (to the model dtype after the residual add, after
``x * rsqrt(var)``, after each RoPE product, after SiLU), so in bfloat16 they follow the same numerics up to
float32 reduction order and approximate rsqrt/exp; the engine's CPU path keeps the PyTorch ops.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from accelkit.serve.kernels.kv_write import _store_token
from accelkit.serve.kernels.quant import KV_FP8, KV_INT8, KV_NONE


@triton.jit
def _rms_norm_kernel(X, RES, W, OUT, RES_OUT, stride_x, stride_r, stride_o, stride_ro, n, eps,
                     HAS_RESIDUAL: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(X + row * stride_x + offs, mask=mask, other=0.0)
    if HAS_RESIDUAL:
        r = tl.load(RES + row * stride_r + offs, mask=mask, other=0.0)
        x = (x.to(tl.float32) + r.to(tl.float32)).to(X.dtype.element_ty)
        tl.store(RES_OUT + row * stride_ro + offs, x, mask=mask)
    xf = x.to(tl.float32)
    var = tl.sum(xf * xf, axis=0) / n
    y = (xf * tl.rsqrt(var + eps)).to(X.dtype.element_ty)
    w = tl.load(W + offs, mask=mask, other=0.0)
    tl.store(OUT + row * stride_o + offs, (w.to(tl.float32) * y.to(tl.float32)).to(OUT.dtype.element_ty), mask=mask)


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, residual: torch.Tensor | None = None
             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(norm(h), h)`` with ``h = residual + x`` (or ``x``); ``x``: (T, N) rows contiguous."""
    rows, n = x.shape
    out = torch.empty_like(x)
    res_out = torch.empty_like(x) if residual is not None else x
    if rows:
        res = residual if residual is not None else x
        _rms_norm_kernel[(rows,)](
            x, res, weight, out, res_out, x.stride(0), res.stride(0), out.stride(0), res_out.stride(0), n, eps,
            HAS_RESIDUAL=residual is not None, BLOCK=triton.next_power_of_2(n), num_warps=8 if n >= 4096 else 4,
        )
    return out, res_out


@triton.jit
def _silu_mul_kernel(GU, OUT, stride_gu, stride_o, n, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    offs = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    g = tl.load(GU + row * stride_gu + offs, mask=mask, other=0.0).to(tl.float32)
    u = tl.load(GU + row * stride_gu + n + offs, mask=mask, other=0.0)
    act = (g / (1.0 + tl.exp(-g))).to(OUT.dtype.element_ty)
    tl.store(OUT + row * stride_o + offs, (act.to(tl.float32) * u.to(tl.float32)).to(OUT.dtype.element_ty), mask=mask)


def silu_mul(gate_up: torch.Tensor) -> torch.Tensor:
    """``gate_up``: (T, 2I) → ``silu(gate) * up``: (T, I)."""
    rows, two_n = gate_up.shape
    n = two_n // 2
    out = torch.empty((rows, n), dtype=gate_up.dtype, device=gate_up.device)
    if rows:
        block = min(1024, triton.next_power_of_2(n))
        _silu_mul_kernel[(rows, triton.cdiv(n, block))](gate_up, out, gate_up.stride(0), out.stride(0), n, BLOCK=block)
    return out


@triton.jit
def _rotate(x_ptrs_base, offs_h, offs_d, stride_h, cos, sin, mask, HALF: tl.constexpr, DTYPE: tl.constexpr):
    """RoPE of a (heads, D) tile: ``x * cos + rotate_half(x) * sin``, each product rounded to the dtype."""
    x = tl.load(x_ptrs_base + offs_h[:, None] * stride_h + offs_d[None, :], mask=mask, other=0.0)
    partner = tl.where(offs_d < HALF, offs_d + HALF, offs_d - HALF)
    xr = tl.load(x_ptrs_base + offs_h[:, None] * stride_h + partner[None, :], mask=mask, other=0.0)
    xr = tl.where((offs_d < HALF)[None, :], -xr.to(tl.float32), xr.to(tl.float32))
    a = (x.to(tl.float32) * cos[None, :]).to(DTYPE)
    b = (xr * sin[None, :]).to(DTYPE)
    return (a.to(tl.float32) + b.to(tl.float32)).to(DTYPE)


@triton.jit
def _rope_kv_write_kernel(
    QKV, POSITIONS, COS, SIN, K_CACHE, V_CACHE, K_SCALE, V_SCALE, SLOTS,
    stride_t, stride_cs, stride_ss,
    NUM_HEADS: tl.constexpr, NUM_KV_HEADS: tl.constexpr, HEAD_DIM: tl.constexpr, HEADS_P2: tl.constexpr,
    KV_HEADS_P2: tl.constexpr, DIM_P2: tl.constexpr, QMAX: tl.constexpr, MIN_SCALE: tl.constexpr,
    KV_QUANT: tl.constexpr,
):
    t = tl.program_id(0).to(tl.int64)  # one program per token: its q heads, k heads and v heads
    DTYPE: tl.constexpr = QKV.dtype.element_ty
    HALF: tl.constexpr = HEAD_DIM // 2
    pos = tl.load(POSITIONS + t)
    offs_d = tl.arange(0, DIM_P2)
    d_ok = offs_d < HEAD_DIM
    cos = tl.load(COS + pos * HEAD_DIM + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    sin = tl.load(SIN + pos * HEAD_DIM + offs_d, mask=d_ok, other=0.0).to(tl.float32)
    row = QKV + t * stride_t

    offs_h = tl.arange(0, HEADS_P2)
    mask_q = (offs_h < NUM_HEADS)[:, None] & d_ok[None, :]
    q = _rotate(row, offs_h, offs_d, HEAD_DIM, cos, sin, mask_q, HALF, DTYPE)
    tl.store(row + offs_h[:, None] * HEAD_DIM + offs_d[None, :], q, mask=mask_q)  # in place

    offs_kh = tl.arange(0, KV_HEADS_P2)
    mask_kh = offs_kh < NUM_KV_HEADS
    mask_kv = mask_kh[:, None] & d_ok[None, :]
    k = _rotate(row + NUM_HEADS * HEAD_DIM, offs_kh, offs_d, HEAD_DIM, cos, sin, mask_kv, HALF, DTYPE)
    v = tl.load(row + (NUM_HEADS + NUM_KV_HEADS) * HEAD_DIM + offs_kh[:, None] * HEAD_DIM + offs_d[None, :],
                mask=mask_kv, other=0.0)
    slot = tl.load(SLOTS + t).to(tl.int64)
    cache_off = slot * stride_cs + offs_kh[:, None] * HEAD_DIM + offs_d[None, :]
    scale_off = slot * stride_ss + offs_kh
    _store_token(k.to(tl.float32), K_CACHE + cache_off, K_SCALE + scale_off, mask_kv, mask_kh, QMAX, MIN_SCALE, KV_QUANT)
    _store_token(v.to(tl.float32), V_CACHE + cache_off, V_SCALE + scale_off, mask_kv, mask_kh, QMAX, MIN_SCALE, KV_QUANT)


def rope_kv_write(
    qkv: torch.Tensor, positions: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, slot_mapping: torch.Tensor,
    k_cache: torch.Tensor, v_cache: torch.Tensor, k_scale: torch.Tensor | None, v_scale: torch.Tensor | None, *,
    num_heads: int, kind: str = "auto", qmax: float = 1.0, min_scale: float = 1e-7,
) -> torch.Tensor:
    """Rotate q in place inside ``qkv`` (T, (Hq + 2 Hkv) D) and write rotated k and v to the cache slots.

    ``cos, sin``: (max_len, D) tables in the model dtype; returns the q view (T, Hq, D).
    """
    num_tokens = qkv.shape[0]
    _, _, num_kv_heads, head_dim = k_cache.shape
    assert qkv.stride(1) == 1 and head_dim % 2 == 0
    if num_tokens:
        quant = {"auto": KV_NONE, "fp8": KV_FP8, "int8": KV_INT8}[kind]
        if quant == KV_NONE:
            k_scale = v_scale = k_cache  # never read
        _rope_kv_write_kernel[(num_tokens,)](
            qkv, positions, cos, sin, k_cache, v_cache, k_scale, v_scale, slot_mapping,
            qkv.stride(0), num_kv_heads * head_dim, num_kv_heads,
            NUM_HEADS=num_heads, NUM_KV_HEADS=num_kv_heads, HEAD_DIM=head_dim,
            HEADS_P2=triton.next_power_of_2(num_heads), KV_HEADS_P2=triton.next_power_of_2(num_kv_heads),
            DIM_P2=triton.next_power_of_2(head_dim), QMAX=qmax, MIN_SCALE=min_scale, KV_QUANT=quant,
        )
    return qkv[:, : num_heads * head_dim].view(num_tokens, num_heads, head_dim)
