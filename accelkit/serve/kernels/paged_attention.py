# mypy: disable-error-code="no-untyped-def, untyped-decorator"
# (Triton reads a kernel's parameter annotations as its signature: tl.constexpr marks compile-time values, so
# kernel parameters carry no Python type hints.)
"""Paged attention reading K/V in place from the block-table cache: decodes and prefill chunks (with or
without cached context), GQA, sliding window, fp8/int8 caches dequantized inside the kernel.

One kernel, two launch shapes per step (the runner lays a step out as ``[single-token rows | chunks]``):

* **decode** rows (one query token each): a program per (sequence, KV head[, split]) holds the ``rep``
  query heads that share that KV head as the rows of one tile, so each K/V byte is read once for all of
  them; with few sequences the context is cut into ``num_splits`` parts whose partial softmax results a
  second small kernel merges (split-K: enough programs to fill the GPU at batch 1);
* **prefill** chunks: a program per (sequence, KV head, tile of ``BLOCK_M // rep_p2`` query tokens), the
  rows being those tokens × their query heads; causal within the chunk, everything before it is context.

Keys are walked ``BLOCK_N`` at a time; each key's slot comes from the block table (``page * PAGE + offset``),
so any block size works and nothing is gathered into a new tensor. Quantized caches: ``q·k`` is computed on
the codes and multiplied by the key's scale afterwards, and the softmax weights are multiplied by the value
scales before ``p·v`` — the dequantization costs one multiply per key, not one per element.
Online softmax in float32 with exp2; block tables, lengths and query offsets are device tensors, so a
captured CUDA graph replays with new ones.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from accelkit.serve.kernels.quant import KV_FP8, KV_INT8, KV_NONE, kv_decode

_LOG2E = 1.4426950408889634
_NEG_BIG = tl.constexpr(-1.0e30)  # the running max starts finite: a fully masked tile then gives exp2(-inf) = 0, not NaN


# integers that change from step to step are not specialized on (no recompilation per value)
@triton.jit(do_not_specialize=["seq_offset", "bt_stride", "window", "num_splits", "stride_pt", "stride_ph"])
def _paged_attention_kernel(
    Q, OUT, K_CACHE, V_CACHE, K_SCALE, V_SCALE, BLOCK_TABLES, SEQ_LENS, QUERY_START, PART_O, PART_LSE,
    seq_offset, bt_stride, qk_scale, window, num_splits,
    stride_qt, stride_qh, stride_ot, stride_oh, stride_cs, stride_ss, stride_pt, stride_ph,
    HEAD_DIM: tl.constexpr, DIM_P2: tl.constexpr, REP: tl.constexpr, REP_P2: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, PAGE: tl.constexpr, KV_QUANT: tl.constexpr,
    SLIDING: tl.constexpr, SPLIT_K: tl.constexpr, DOT_PRECISION: tl.constexpr, UPCAST: tl.constexpr,
):
    BLOCK_Q: tl.constexpr = BLOCK_M // REP_P2
    seq = seq_offset + tl.program_id(0)
    kvh = tl.program_id(1)
    tile = tl.program_id(2) // num_splits
    split = tl.program_id(2) % num_splits
    # token counts fit int32 (loop bounds and masks stay 32-bit); addresses are computed in int64
    q_start = tl.load(QUERY_START + seq).to(tl.int32)
    q_len = tl.load(QUERY_START + seq + 1).to(tl.int32) - q_start
    if tile * BLOCK_Q >= q_len:
        return
    seq_len = tl.load(SEQ_LENS + seq).to(tl.int32)
    ctx = seq_len - q_len  # tokens in the cache before this step's first query token

    offs_m = tl.arange(0, BLOCK_M)
    qi = tile * BLOCK_Q + offs_m // REP_P2  # query token of each row, within the sequence's chunk
    head = kvh * REP + offs_m % REP_P2
    row_ok = (qi < q_len) & (offs_m % REP_P2 < REP)
    offs_d = tl.arange(0, DIM_P2)
    d_ok = offs_d < HEAD_DIM
    q_rows = (q_start + qi).to(tl.int64)
    q = tl.load(Q + q_rows[:, None] * stride_qt + head[:, None] * stride_qh + offs_d[None, :],
                mask=row_ok[:, None] & d_ok[None, :], other=0.0)
    if UPCAST:
        q = q.to(tl.float32)
    q_pos = ctx + qi

    # keys [lo, hi): up to the tile's last query; from the window's start of its first query
    hi = ctx + tl.minimum((tile + 1) * BLOCK_Q, q_len)
    lo = hi * 0
    if SLIDING:
        lo = tl.maximum(ctx + tile * BLOCK_Q - window + 1, 0)
    if SPLIT_K:
        per = tl.cdiv(tl.cdiv(hi - lo, num_splits), BLOCK_N) * BLOCK_N
        lo = lo + split * per
        hi = tl.minimum(hi, lo + per)

    m_i = tl.full([BLOCK_M], _NEG_BIG, tl.float32)
    l_i = tl.zeros([BLOCK_M], tl.float32)
    acc = tl.zeros([BLOCK_M, DIM_P2], tl.float32)
    table = BLOCK_TABLES + seq.to(tl.int64) * bt_stride
    for start in range(lo, hi, BLOCK_N):
        offs_n = start + tl.arange(0, BLOCK_N)
        n_ok = offs_n < hi
        page = tl.load(table + offs_n // PAGE, mask=n_ok, other=0).to(tl.int64)
        slot = page * PAGE + offs_n % PAGE
        kv_off = slot[:, None] * stride_cs + kvh * HEAD_DIM + offs_d[None, :]
        kv_mask = n_ok[:, None] & d_ok[None, :]
        k = tl.load(K_CACHE + kv_off, mask=kv_mask, other=0)
        if KV_QUANT != 0:
            k = kv_decode(k, KV_QUANT)
        k = k.to(q.dtype)
        s = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION)
        if KV_QUANT != 0:
            s = s * tl.load(K_SCALE + slot * stride_ss + kvh, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        s = s * qk_scale
        ok = n_ok[None, :] & (offs_n[None, :] <= q_pos[:, None])
        if SLIDING:
            ok = ok & (offs_n[None, :] > q_pos[:, None] - window)
        s = tl.where(ok, s, float("-inf"))
        m_new = tl.maximum(m_i, tl.max(s, 1))
        alpha = tl.exp2(m_i - m_new)
        p = tl.exp2(s - m_new[:, None])
        l_i = l_i * alpha + tl.sum(p, 1)
        v = tl.load(V_CACHE + kv_off, mask=kv_mask, other=0)
        if KV_QUANT != 0:
            v = kv_decode(v, KV_QUANT)
            p = p * tl.load(V_SCALE + slot * stride_ss + kvh, mask=n_ok, other=0.0).to(tl.float32)[None, :]
        v = v.to(q.dtype)
        acc = acc * alpha[:, None] + tl.dot(p.to(q.dtype), v, input_precision=DOT_PRECISION)
        m_i = m_new

    out = acc / tl.where(l_i > 0, l_i, 1.0)[:, None]  # l_i == 0 only for a split that got no keys
    mask = row_ok[:, None] & d_ok[None, :]
    if not SPLIT_K:
        tl.store(OUT + q_rows[:, None] * stride_ot + head[:, None] * stride_oh + offs_d[None, :],
                 out.to(OUT.dtype.element_ty), mask=mask)
    else:
        part = q_rows * stride_pt + head * stride_ph + split
        tl.store(PART_O + part[:, None] * HEAD_DIM + offs_d[None, :], out, mask=mask)
        lse = tl.where(l_i > 0, m_i + tl.log2(tl.where(l_i > 0, l_i, 1.0)), float("-inf"))
        tl.store(PART_LSE + part, lse, mask=row_ok)


@triton.jit(do_not_specialize=["num_splits", "stride_pt", "stride_ph"])
def _merge_splits_kernel(
    OUT, PART_O, PART_LSE, num_splits, stride_ot, stride_oh, stride_pt, stride_ph, NUM_HEADS: tl.constexpr,
    HEADS_P2: tl.constexpr, HEAD_DIM: tl.constexpr, DIM_P2: tl.constexpr,
):
    t = tl.program_id(0)  # one program per decode token: all its query heads, split by split
    offs_h = tl.arange(0, HEADS_P2)
    offs_d = tl.arange(0, DIM_P2)
    h_ok = offs_h < NUM_HEADS
    mask = h_ok[:, None] & (offs_d < HEAD_DIM)[None, :]
    base = t.to(tl.int64) * stride_pt + offs_h * stride_ph
    lse_max = tl.full([HEADS_P2], float("-inf"), tl.float32)
    for s in range(0, num_splits):  # a split without keys has lse -inf
        lse_max = tl.maximum(lse_max, tl.load(PART_LSE + base + s, mask=h_ok, other=float("-inf")))
    lse_max = tl.where(h_ok, lse_max, 0.0)
    total = tl.zeros([HEADS_P2], tl.float32)
    acc = tl.zeros([HEADS_P2, DIM_P2], tl.float32)
    for s in range(0, num_splits):
        w = tl.exp2(tl.load(PART_LSE + base + s, mask=h_ok, other=float("-inf")) - lse_max)
        part = tl.load(PART_O + (base + s)[:, None] * HEAD_DIM + offs_d[None, :], mask=mask, other=0.0)
        acc += part * w[:, None]
        total += w
    out = acc / tl.where(total > 0, total, 1.0)[:, None]
    tl.store(OUT + t.to(tl.int64) * stride_ot + offs_h[:, None] * stride_oh + offs_d[None, :],
             out.to(OUT.dtype.element_ty), mask=mask)


MAX_SPLITS = 16
# (keys per loop iteration, warps); chosen without a GPU to measure on — benchmarks/attention_backends.py
# sweeps alternatives on a GPU
DECODE_TILE = (64, 4)
PREFILL_TILE = (64, 4)


def decode_num_splits(num_seqs: int, num_kv_heads: int, num_sms: int) -> int:
    """Context splits per decode sequence: enough programs for about two waves of the GPU's SMs."""
    want = -(-2 * num_sms // max(1, num_seqs * num_kv_heads))
    return min(MAX_SPLITS, triton.next_power_of_2(want)) if want > 1 else 1


def paged_attention(
    q: torch.Tensor, out: torch.Tensor, k_cache: torch.Tensor, v_cache: torch.Tensor,
    k_scale: torch.Tensor | None, v_scale: torch.Tensor | None, *, block_tables: torch.Tensor,
    seq_lens: torch.Tensor, query_start: torch.Tensor, seq_offset: int, num_seqs: int, max_query_len: int,
    scale: float, sliding_window: int | None = None, kind: str = "auto", num_splits: int = 1,
    tile: tuple[int, int] | None = None,
) -> None:
    """Attention of ``num_seqs`` sequences starting at ``seq_offset`` into ``out``.

    ``q, out``: (T, Hq, D); caches of one layer ``(num_blocks, block_size, Hkv, D)``; scales
    ``(num_blocks, block_size, Hkv)`` float16 for fp8/int8; ``block_tables``: (S, W) int64 (row stride
    any); ``seq_lens``: (S,) context length including this step's tokens; ``query_start``: (S + 1,) token
    offsets of each sequence's queries in ``q``. ``num_splits > 1`` only for single-token rows.
    ``tile``: (keys per iteration, warps) instead of the defaults (``benchmarks/attention_backends.py`` sweeps it).
    """
    if num_seqs == 0:
        return
    _, num_heads, head_dim = q.shape
    _, page, num_kv_heads, _ = k_cache.shape
    rep = num_heads // num_kv_heads
    rep_p2 = triton.next_power_of_2(rep)
    quant = {"auto": KV_NONE, "fp8": KV_FP8, "int8": KV_INT8}[kind]
    if num_splits > 1 and (max_query_len != 1 or seq_offset != 0 or num_splits > MAX_SPLITS):
        raise ValueError(f"num_splits > 1 (at most {MAX_SPLITS}) is for the single-token rows at the start of a step")
    dim_p2 = max(16, triton.next_power_of_2(head_dim))  # tl.dot needs K >= 16
    if max_query_len == 1:  # decode: one token's query heads are the tile's rows
        block_m, (block_n, num_warps) = max(16, rep_p2), tile or DECODE_TILE
    else:
        block_m, (block_n, num_warps) = max(64, rep_p2), tile or PREFILL_TILE
        num_splits = 1
    block_q = block_m // rep_p2
    num_tiles = -(-max_query_len // block_q)
    if k_scale is None or v_scale is None:
        k_scale = v_scale = k_cache  # never read
    part_o = part_lse = out
    if num_splits > 1:
        rows = q.shape[0]
        part_o = torch.empty((rows, num_heads, num_splits, head_dim), dtype=torch.float32, device=q.device)
        part_lse = torch.empty((rows, num_heads, num_splits), dtype=torch.float32, device=q.device)
    precision = "ieee" if q.dtype == torch.float32 else "tf32"
    # Triton's interpreter multiplies bfloat16 tiles as raw uint16: there, and only there, dot in float32
    upcast = q.dtype == torch.bfloat16 and type(_paged_attention_kernel).__name__ == "InterpretedFunction"
    _paged_attention_kernel[(num_seqs, num_kv_heads, num_tiles * num_splits)](
        q, out, k_cache, v_cache, k_scale, v_scale, block_tables, seq_lens, query_start, part_o, part_lse,
        seq_offset, block_tables.stride(0), scale * _LOG2E, sliding_window or 0, num_splits,
        q.stride(0), q.stride(1), out.stride(0), out.stride(1), num_kv_heads * head_dim, num_kv_heads,
        num_heads * num_splits if num_splits > 1 else 0, num_splits,
        HEAD_DIM=head_dim, DIM_P2=dim_p2, REP=rep, REP_P2=rep_p2, BLOCK_M=block_m,
        BLOCK_N=block_n, PAGE=page, KV_QUANT=quant, SLIDING=sliding_window is not None, SPLIT_K=num_splits > 1,
        DOT_PRECISION=precision, UPCAST=upcast, num_warps=num_warps,
    )
    if num_splits > 1:  # single-token rows at the start of the step: sequence i is token row i
        _merge_splits_kernel[(num_seqs,)](
            out, part_o, part_lse, num_splits, out.stride(0), out.stride(1), num_heads * num_splits, num_splits,
            NUM_HEADS=num_heads, HEADS_P2=triton.next_power_of_2(num_heads), HEAD_DIM=head_dim, DIM_P2=dim_p2,
        )
