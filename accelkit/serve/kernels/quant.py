# mypy: disable-error-code="no-untyped-def, untyped-decorator"
# (Triton reads a kernel's parameter annotations as its signature: tl.constexpr marks compile-time values, so
# kernel parameters carry no Python type hints.)
"""KV-cache codes inside kernels: fp8 e4m3 and int8 with a per-token-per-head scale, encoded and decoded
with integer arithmetic only — bit-identical to ``tensor.to(torch.float8_e4m3fn)`` / ``round().to(int8)``,
and independent of the GPU's fp8 instructions (so the same kernel runs on SM80, SM90 and the interpreter).

e4m3fn: 1 sign, 4 exponent (bias 7), 3 mantissa bits; codes grow monotonically with the magnitude, so
rounding up into the next exponent is just code + 1. Max finite 448 (0x7E); callers clamp before encoding.
"""

from __future__ import annotations

import triton
import triton.language as tl

KV_NONE, KV_FP8, KV_INT8 = 0, 1, 2  # the KV_QUANT constexpr of the kernels


@triton.jit
def _round_half_even(x):
    """Round a float32 tensor with |x| < 2**30 to the nearest integer, ties to even → int32."""
    t = x.to(tl.int32)  # truncates toward zero
    frac = x - t.to(tl.float32)  # exact; same sign as x
    af = tl.abs(frac)
    away = (af > 0.5) | ((af == 0.5) & ((t & 1) == 1))
    step = tl.where(x < 0, -1, 1)
    return tl.where(away, t + step, t)


@triton.jit
def fp8_e4m3_encode(x):
    """float32 in [-448, 448] → e4m3fn code in an int32 (0..255), round to nearest even."""
    xbits = x.to(tl.int32, bitcast=True)
    sign = (xbits >> 31) & 1
    a = tl.abs(x)
    bits = a.to(tl.int32, bitcast=True)
    r = bits + 0x7FFFF + ((bits >> 20) & 1)  # round the 23-bit mantissa to 3 bits, ties to even
    normal = (((r >> 23) - 120) << 3) | ((r >> 20) & 7)  # exponent rebased 127 → 7
    sub = _round_half_even(a * 512.0)  # below 2**-6: steps of 2**-9; 8 == the smallest normal's code
    code = tl.where(a < 0.015625, sub, normal)
    return code | (sign << 7)


@triton.jit
def fp8_e4m3_decode(code):
    """e4m3fn codes (any integer type holding 0..255) → float32, exact."""
    c = code.to(tl.int32) & 0xFF
    e = (c >> 3) & 15
    m = c & 7
    normal = (((e + 120) << 23) | (m << 20)).to(tl.float32, bitcast=True)
    val = tl.where(e == 0, m.to(tl.float32) * 0.001953125, normal)
    return tl.where((c >> 7) == 1, -val, val)


@triton.jit
def int8_encode(x):
    """float32 in [-127, 127] → int32 code, round half to even (as ``torch.round``)."""
    return _round_half_even(x)


@triton.jit
def kv_decode(codes, KV_QUANT: tl.constexpr):
    """Stored K/V → float32 values before scaling (a plain cast when the cache is unquantized)."""
    if KV_QUANT == 1:
        return fp8_e4m3_decode(codes)
    else:
        return codes.to(tl.float32)
