"""The engine's Triton kernels against the PyTorch reference: fp8/int8 codes bit-identical to torch's casts,
the KV write bit-identical to ``KVCache.write``, paged attention (decode, prefill with and without cached
context, GQA, sliding window, split-K, block sizes 16 and 5, non-power-of-two lengths, fp8/int8 caches)
against a float64 attention over the dequantized cache, and the fused layer ops against the model's
PyTorch modules. On a CPU they run under Triton's interpreter (tiny shapes: it is slow); on a machine with
CUDA they compile for the GPU."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are first imported (they read it then)

pytest.importorskip("triton")

from accelkit.serve.kernels.fused import rms_norm, rope_kv_write, silu_mul
from accelkit.serve.kernels.kv_write import kv_write
from accelkit.serve.kernels.paged_attention import decode_num_splits, paged_attention
from accelkit.serve.kernels.quant import fp8_e4m3_decode, fp8_e4m3_encode, int8_encode
from accelkit.serve.kv_cache import Fp8KVCache, Int8KVCache, KVCache
from accelkit.serve.models.llama import RMSNorm, rotate_half

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
# Under the interpreter, bfloat16 tiles are multiplied in float32 (its bf16 dot is broken) and float32 →
# bfloat16 casts truncate: bf16 results are checked against tolerances, the bit-exact checks run in fp32.
CACHES = {"auto": KVCache, "fp8": Fp8KVCache, "int8": Int8KVCache}


# ---- codes --------------------------------------------------------------------------------------------
def _codec_kernel():
    import triton
    import triton.language as tl

    @triton.jit
    def codec(x_ptr, fp8_ptr, back_ptr, int8_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        mask = offs < n
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        code = fp8_e4m3_encode(x)
        tl.store(fp8_ptr + offs, code.to(tl.uint8), mask=mask)
        tl.store(back_ptr + offs, fp8_e4m3_decode(code), mask=mask)
        tl.store(int8_ptr + offs, int8_encode(tl.minimum(tl.maximum(x, -127.0), 127.0)).to(tl.int8), mask=mask)

    return codec


def test_fp8_and_int8_codes_match_torch_casts_bit_for_bit():
    every = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float()
    every = every[torch.isfinite(every)].unique()  # all 253 finite e4m3 values (±0 once)
    midpoints = (every[1:] + every[:-1]) / 2  # ties: round half to even
    gen = torch.Generator().manual_seed(0)
    spread = torch.cat([torch.randn(2000, generator=gen) * s for s in (1e-4, 1e-2, 1.0, 30.0, 200.0)])
    halves = torch.arange(-255, 256) / 2  # int8 ties
    x = torch.cat([every, midpoints, spread, halves, torch.tensor([-0.0, 2.0**-10, 3 * 2.0**-10])]).clamp(-448, 448)
    x = x.to(DEVICE)
    n = x.numel()
    fp8 = torch.empty(n, dtype=torch.uint8, device=DEVICE)
    back = torch.empty(n, device=DEVICE)
    int8 = torch.empty(n, dtype=torch.int8, device=DEVICE)
    _codec_kernel()[(-(-n // 1024),)](x, fp8, back, int8, n, BLOCK=1024)
    ref = x.to(torch.float8_e4m3fn)
    assert torch.equal(fp8, ref.view(torch.uint8))
    assert torch.equal(back, ref.float())
    assert torch.equal(int8, x.clamp(-127, 127).round().to(torch.int8))


# ---- KV write -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("kind", ["auto", "fp8", "int8"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_kv_write_is_bit_identical_to_the_torch_path(kind, dtype):
    cls = CACHES[kind]
    dims = {"num_layers": 2, "num_blocks": 6, "block_size": 4, "num_kv_heads": 3, "head_dim": 20}
    ref, got = (cls(**dims, dtype=dtype, device=DEVICE) for _ in range(2))
    gen = torch.Generator().manual_seed(1)
    qkv = (torch.randn(7, 5 * 3 * 20, generator=gen) * 3).to(DEVICE, dtype)
    k, v = qkv[:, :60].view(7, 3, 20), qkv[:, 60:120].view(7, 3, 20)  # strided views, as the model passes them
    k[0, 1] = 0  # an all-zero head gets the minimum scale
    slots = torch.tensor([0, 5, 6, 11, 23, 17, 2], device=DEVICE)
    ref.write(1, slots, k, v)
    k_scale, v_scale = got.scales(1)
    kv_write(k, v, slots, got.k[1], got.v[1], k_scale, v_scale, kind=kind, qmax=cls.qmax)
    assert torch.equal(ref.k, got.k) and torch.equal(ref.v, got.v)
    if kind != "auto":
        assert torch.equal(ref.k_scale, got.k_scale) and torch.equal(ref.v_scale, got.v_scale)


# ---- paged attention ----------------------------------------------------------------------------------
def _reference(q, cache, tables, seq_lens, query_start, window):
    """float64 attention of each sequence's queries over its dequantized cached context (causal)."""
    out = torch.zeros(q.shape, dtype=torch.float64)
    rep = q.shape[1] // cache.num_kv_heads
    for s, total in enumerate(seq_lens):
        a, b = query_start[s], query_start[s + 1]
        k, v = cache.gather(0, torch.tensor(tables[s][: -(-total // cache.block_size)], device=q.device))
        k = k[:total].double().cpu().repeat_interleave(rep, 1)
        v = v[:total].double().cpu().repeat_interleave(rep, 1)
        scores = torch.einsum("thd,lhd->htl", q[a:b].double().cpu(), k) * q.shape[-1] ** -0.5
        q_pos = torch.arange(total - (b - a), total)[:, None]
        k_pos = torch.arange(total)[None, :]
        allowed = k_pos <= q_pos
        if window is not None:
            allowed &= k_pos > q_pos - window
        out[a:b] = torch.einsum("htl,lhd->thd", scores.masked_fill(~allowed, float("-inf")).softmax(-1), v)
    return out


CASES = {
    # name: (kind, dtype, block size, heads q/kv, window, num_splits, query lengths | context lengths)
    "fp32-mixed": ("auto", torch.float32, 16, (4, 2), None, 1, [1, 1, 1, 37, 20], [45, 1, 70, 37, 53]),
    "fp32-mha-page5": ("auto", torch.float32, 5, (2, 2), None, 1, [1, 1, 13], [17, 3, 29]),
    "fp32-gqa8-window": ("auto", torch.float32, 16, (8, 1), 7, 1, [1, 1, 9], [40, 6, 25]),
    "fp32-split-k": ("auto", torch.float32, 16, (4, 2), None, 4, [1, 1, 1], [45, 1, 100]),
    "bf16-mixed": ("auto", torch.bfloat16, 16, (4, 2), None, 1, [1, 1, 33], [50, 2, 33]),
    "fp8-bf16": ("fp8", torch.bfloat16, 16, (4, 2), None, 1, [1, 1, 21], [50, 9, 40]),
    "fp8-page3-window-split": ("fp8", torch.float32, 3, (4, 2), 9, 2, [1, 1], [31, 10]),
    "int8-fp32": ("int8", torch.float32, 16, (4, 2), None, 1, [1, 1, 18], [33, 70, 18]),
}
TOLERANCE = {torch.float32: 2e-5, torch.bfloat16: 3e-2}


@pytest.mark.parametrize("name", list(CASES))
def test_paged_attention_matches_float64_reference(name):
    kind, dtype, page, (num_heads, num_kv_heads), window, splits, q_lens, seq_lens = CASES[name]
    head_dim, num_blocks = 16, 64
    cache = CACHES[kind](num_layers=1, num_blocks=num_blocks, block_size=page, num_kv_heads=num_kv_heads,
                         head_dim=head_dim, dtype=dtype, device=DEVICE)
    gen = torch.Generator().manual_seed(2)
    slots = num_blocks * page
    k_all, v_all = (torch.randn(slots, num_kv_heads, head_dim, generator=gen).to(DEVICE, dtype) for _ in range(2))
    cache.write(0, torch.arange(slots, device=DEVICE), k_all, v_all)
    order = torch.randperm(num_blocks, generator=gen).tolist()  # scattered blocks
    width = max(-(-n // page) for n in seq_lens) + 1  # a wider table than needed, as the runner's can be
    tables, used = [], 0
    for n in seq_lens:
        nb = -(-n // page)
        tables.append(order[used : used + nb] + [0] * (width - nb))
        used += nb
    query_start = [0]
    for n in q_lens:
        query_start.append(query_start[-1] + n)
    q = torch.randn(query_start[-1], num_heads, head_dim, generator=gen).to(DEVICE, dtype)
    out = torch.full_like(q, float("nan"))
    args = dict(block_tables=torch.tensor(tables, device=DEVICE), seq_lens=torch.tensor(seq_lens, device=DEVICE),
                query_start=torch.tensor(query_start, device=DEVICE), scale=head_dim**-0.5, sliding_window=window,
                kind=kind)
    k_scale, v_scale = cache.scales(0)
    num_decodes = sum(1 for n in q_lens if n == 1)
    paged_attention(q, out, cache.k[0], cache.v[0], k_scale, v_scale, seq_offset=0, num_seqs=num_decodes,
                    max_query_len=1, num_splits=splits, **args)
    paged_attention(q, out, cache.k[0], cache.v[0], k_scale, v_scale, seq_offset=num_decodes,
                    num_seqs=len(q_lens) - num_decodes, max_query_len=max(q_lens[num_decodes:], default=0), **args)
    ref = _reference(q, cache, tables, seq_lens, query_start, window)
    err = (out.double().cpu() - ref).abs().max().item()
    assert err < TOLERANCE[dtype], f"{name}: max abs error {err:.3g}"


def test_split_k_is_asked_for_only_when_the_batch_cannot_fill_the_gpu():
    assert decode_num_splits(128, 8, num_sms=132) == 1
    assert decode_num_splits(1, 8, num_sms=132) == 16  # capped
    assert decode_num_splits(8, 8, num_sms=132) == 8  # 264 programs wanted / 64 → 5 → next power of two
    assert decode_num_splits(0, 8, num_sms=132) >= 1
    with pytest.raises(ValueError, match="num_splits"):
        q = torch.zeros(3, 2, 16, device=DEVICE)
        z = torch.zeros(1, 16, 2, 16, device=DEVICE)
        paged_attention(q, q, z, z, None, None, block_tables=torch.zeros(1, 1, dtype=torch.long), seq_lens=z,
                        query_start=z, seq_offset=0, num_seqs=1, max_query_len=3, scale=1.0, num_splits=2)


# ---- fused layer ops ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_rms_norm_with_residual_matches_the_module(dtype):
    gen = torch.Generator().manual_seed(3)
    norm = RMSNorm(96, 1e-5).to(DEVICE, dtype)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(96, generator=gen) + 0.5)
    x, residual = (torch.randn(5, 96, generator=gen).to(DEVICE, dtype) for _ in range(2))
    with torch.no_grad():
        for res in (None, residual):
            want_h = x if res is None else res + x
            got, got_h = rms_norm(x, norm.weight, norm.eps, res)
            if dtype == torch.float32 or DEVICE.type == "cuda":
                assert torch.equal(got_h, want_h)  # the residual add rounds exactly as PyTorch does
            else:  # Triton's interpreter truncates float32 → bfloat16 instead of rounding to nearest even
                torch.testing.assert_close(got_h, want_h, atol=0, rtol=2**-7)
            # fp32: reduction order only; bf16: ~1 ulp (the rounding before the weight can differ), 2 when truncating
            tol = {"atol": 1e-5, "rtol": 1e-5 if dtype == torch.float32 else 2**-7 if DEVICE.type == "cuda" else 2**-6}
            torch.testing.assert_close(got, norm(got_h)[0], **tol)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_fused_silu_mul_matches_torch(dtype):
    gate_up = torch.randn(4, 2 * 80, generator=torch.Generator().manual_seed(4)).to(DEVICE, dtype)
    gate, up = gate_up.split(80, dim=-1)
    tol = {"atol": 1e-6, "rtol": 1e-5} if dtype == torch.float32 else {}
    torch.testing.assert_close(silu_mul(gate_up), torch.nn.functional.silu(gate) * up, **tol)


@pytest.mark.parametrize("kind", ["auto", "int8"])
def test_fused_rope_and_kv_write_match_rope_then_cache_write(kind):
    num_heads, num_kv_heads, head_dim, tokens = 4, 2, 16, 6
    gen = torch.Generator().manual_seed(5)
    qkv = torch.randn(tokens, (num_heads + 2 * num_kv_heads) * head_dim, generator=gen).to(DEVICE)
    positions = torch.tensor([0, 3, 4, 9, 10, 31], device=DEVICE)
    angles = torch.rand(32, head_dim // 2, generator=gen).to(DEVICE) * 6
    cos, sin = torch.cat([angles.cos()] * 2, -1), torch.cat([angles.sin()] * 2, -1)
    slots = torch.tensor([7, 1, 2, 30, 31, 12], device=DEVICE)
    dims = {"num_layers": 1, "num_blocks": 8, "block_size": 4, "num_kv_heads": num_kv_heads, "head_dim": head_dim}
    ref, got = (CACHES[kind](**dims, dtype=torch.float32, device=DEVICE) for _ in range(2))

    q, k, v = qkv.clone().split([num_heads * head_dim, num_kv_heads * head_dim, num_kv_heads * head_dim], -1)
    c, s = cos[positions].unsqueeze(1), sin[positions].unsqueeze(1)
    q = q.view(tokens, num_heads, head_dim)
    k = k.reshape(tokens, num_kv_heads, head_dim)
    q_ref = q * c + rotate_half(q) * s
    ref.write(0, slots, k * c + rotate_half(k) * s, v.reshape(tokens, num_kv_heads, head_dim))

    k_scale, v_scale = got.scales(0)
    q_got = rope_kv_write(qkv, positions, cos, sin, slots, got.k[0], got.v[0], k_scale, v_scale,
                          num_heads=num_heads, kind=kind, qmax=got.qmax)
    torch.testing.assert_close(q_got, q_ref, atol=1e-6, rtol=1e-6)
    torch.testing.assert_close(got.gather(0, torch.arange(8, device=DEVICE))[0],
                               ref.gather(0, torch.arange(8, device=DEVICE))[0], atol=1e-6, rtol=1e-6)
