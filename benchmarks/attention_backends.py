"""Paged attention backends, one layer's call at serving shapes: ``sdpa`` (gather the block tables into new
tensors + PyTorch SDPA — the reference) vs ``triton`` (kernels reading K/V in place from the cache).

Each case is one layer of Llama-3.2-1B's attention (32 query heads, 8 KV heads, head_dim 64, bf16) over a
paged cache (block size 16, blocks scattered at random), with a bf16 or an fp8 cache:

* decode: B sequences of one query token each at context L (B = 1, 16, 128; L = 1024, 4096 at B = 128);
* prefill with cached context: one 512-token chunk after 1536 cached tokens;
* fresh prompts: 8 prompts of 1024 tokens (SDPA runs flash attention per prompt on its own K/V).

Timed per call with CUDA events (``accelkit.timing``), the K/V cache write included (it is part of
every backend's call), so an eager launch-bound path pays for its launches; kernels per call counted with
``torch.profiler``. For decode at B = 16 and 128 and the prefill chunk, the attention kernel alone is also
timed per tile shape (keys per iteration × warps), to check ``DECODE_TILE`` / ``PREFILL_TILE``. Writes ``results/serve_attention_backends.json``. This is what the choice of the
Triton backend (docs/engine.md) is checked against: on a GPU run directly, or as the optional last part of
``GPU_CHECK_PARTS=...,attention_backends scripts/gpu_check.sh``.

    .venv/bin/python benchmarks/attention_backends.py                       # CUDA
    TRITON_INTERPRET=1 .venv/bin/python benchmarks/attention_backends.py --smoke   # tiny shapes, CPU (a smoke run)
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np
import torch

from accelkit.hardware.detect import environment
from accelkit.hardware.device import resolve_device
from accelkit.serve.attention import StepTensors, make_attention_backend
from accelkit.serve.kv_cache import kv_cache_class
from accelkit.timing import LoopConfig, time_loop

OUT = Path(__file__).resolve().parent / "results" / "serve_attention_backends.json"
HEADS, KV_HEADS, HEAD_DIM, BLOCK = 32, 8, 64, 16


def make_step(q_lens: list[int], ctx_lens: list[int], *, num_blocks: int, device: torch.device, seed: int = 0
              ) -> StepTensors:
    """A step of sequences with ``ctx_lens[i]`` cached tokens then ``q_lens[i]`` new ones; decodes first."""
    rng = np.random.default_rng(seed)
    totals = [c + q for c, q in zip(ctx_lens, q_lens, strict=True)]
    width = max(-(-t // BLOCK) for t in totals)
    needed = sum(-(-t // BLOCK) for t in totals)
    assert needed <= num_blocks, (needed, num_blocks)
    order = rng.permutation(num_blocks)[:needed]
    tables = np.zeros((len(q_lens), width), dtype=np.int64)
    used = 0
    positions, slots = [], []
    for i, (q, total) in enumerate(zip(q_lens, totals, strict=True)):
        nb = -(-total // BLOCK)
        tables[i, :nb] = order[used : used + nb]
        used += nb
        pos = np.arange(total - q, total)
        positions.append(pos)
        slots.append(tables[i, pos // BLOCK] * BLOCK + pos % BLOCK)
    query_start = np.concatenate([[0], np.cumsum(q_lens)]).astype(np.int64)
    seq_lens = np.asarray(totals, dtype=np.int64)

    def dev(a: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(np.ascontiguousarray(a)).to(device)

    return StepTensors(
        num_tokens=int(query_start[-1]), num_seqs=len(q_lens), num_decodes=sum(1 for q in q_lens if q == 1),
        max_query_len=max((q for q in q_lens if q != 1), default=0), seq_lens_np=seq_lens,
        query_start_np=query_start, block_tables_np=tables, positions=dev(np.concatenate(positions)),
        slot_mapping=dev(np.concatenate(slots)), seq_lens=dev(seq_lens), query_start=dev(query_start),
        block_tables=dev(tables),
    )


def count_kernels(fn: Any) -> int:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return sum(1 for e in prof.events() if e.device_type == DeviceType.CUDA and not e.name.startswith(("Memcpy", "Memset")))


def run_case(name: str, q_lens: list[int], ctx_lens: list[int], *, kind: str, device: torch.device,
             loop: LoopConfig, dtype: torch.dtype, sweep: bool = False) -> dict[str, Any]:
    total_tokens = sum(q + c for q, c in zip(q_lens, ctx_lens, strict=True))
    num_blocks = -(-total_tokens // BLOCK) + len(q_lens) + 1
    cache = kv_cache_class(kind)(num_layers=1, num_blocks=num_blocks, block_size=BLOCK, num_kv_heads=KV_HEADS,
                                 head_dim=HEAD_DIM, dtype=dtype, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    fill = torch.randn(num_blocks * BLOCK, KV_HEADS, HEAD_DIM, generator=gen, device=device, dtype=dtype)
    cache.write(0, torch.arange(num_blocks * BLOCK, device=device), fill, fill)
    step = make_step(q_lens, ctx_lens, num_blocks=num_blocks, device=device)
    t = step.num_tokens
    q = torch.randn(t, HEADS, HEAD_DIM, generator=gen, device=device, dtype=dtype)
    k, v = (torch.randn(t, KV_HEADS, HEAD_DIM, generator=gen, device=device, dtype=dtype) for _ in range(2))
    out: dict[str, Any] = {"case": name, "kv_cache_dtype": kind, "num_seqs": len(q_lens), "query_tokens": t,
                           "context_tokens": sum(ctx_lens)}
    reference = None
    for backend_name in ("sdpa", "triton"):
        backend = make_attention_backend(backend_name, cache, num_heads=HEADS, head_dim=HEAD_DIM, sliding_window=None)
        meta = backend.prepare(step)

        def call(backend: Any = backend, meta: Any = meta) -> torch.Tensor:
            return backend.forward(q, k, v, 0, meta)

        result = call()
        if reference is None:
            reference = result.float()
        err = (result.float() - reference).abs().max().item()
        timed = time_loop(call, loop, device=str(device))
        median = float(np.median(timed.samples_s))
        out[backend_name] = {"median_ms": round(median * 1e3, 4), "iterations": len(timed.samples_s),
                             "max_abs_diff_vs_sdpa": err}
        if device.type == "cuda":
            out[backend_name]["kernels_per_call"] = count_kernels(call)
        print(f"[attention_backends] {name:<34} {kind:<4} {backend_name:<6} {median * 1e3:8.3f} ms"
              f"  (max |diff| vs sdpa {err:.2e})", file=sys.stderr, flush=True)
    out["speedup_triton_vs_sdpa"] = round(out["sdpa"]["median_ms"] / out["triton"]["median_ms"], 2)
    if sweep:  # the attention kernel alone, per (keys per iteration, warps)
        out["triton_tiles"] = sweep_tiles(step, q, cache, kind=kind, device=device, loop=loop)
    return out


def sweep_tiles(step: StepTensors, q: torch.Tensor, cache: Any, *, kind: str, device: torch.device,
                loop: LoopConfig) -> list[dict[str, Any]]:
    from accelkit.serve.kernels.paged_attention import decode_num_splits, paged_attention

    decode = step.num_decodes == step.num_seqs
    num_sms = torch.cuda.get_device_properties(device).multi_processor_count if device.type == "cuda" else 4
    splits = decode_num_splits(step.num_seqs, KV_HEADS, num_sms) if decode else 1
    out = torch.empty_like(q)
    k_scale, v_scale = cache.scales(0)
    rows = []
    for block_n, warps in ((32, 2), (32, 4), (64, 2), (64, 4), (64, 8), (128, 4), (128, 8)):
        def call(block_n: int = block_n, warps: int = warps) -> None:
            paged_attention(q, out, cache.k[0], cache.v[0], k_scale, v_scale, block_tables=step.block_tables,
                            seq_lens=step.seq_lens, query_start=step.query_start, seq_offset=0,
                            num_seqs=step.num_seqs, max_query_len=1 if decode else step.max_query_len,
                            scale=HEAD_DIM**-0.5, kind=kind, num_splits=splits, tile=(block_n, warps))

        timed = time_loop(call, loop, device=str(device))
        rows.append({"block_n": block_n, "num_warps": warps, "median_ms": round(float(np.median(timed.samples_s)) * 1e3, 4)})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--smoke", action="store_true", help="tiny shapes (runs on a CPU under TRITON_INTERPRET=1)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    device = torch.device(resolve_device("auto"))
    if device.type != "cuda" and not args.smoke:
        ap.error("needs a CUDA device (or --smoke with TRITON_INTERPRET=1 for a smoke run on a CPU)")
    dtype = torch.bfloat16
    if args.smoke:
        cases = {"decode B=2 L=40": ([1, 1], [40, 17]), "prefill 24 after 20": ([24], [20])}
        loop = LoopConfig(warmup_iterations=1, warmup_time_s=0.0, min_iterations=2, min_time_s=0.0)
    else:
        cases = {
            "decode B=1 L=1024": ([1], [1023]),
            "decode B=16 L=1024": ([1] * 16, [1023] * 16),
            "decode B=128 L=1024": ([1] * 128, [1023] * 128),
            "decode B=128 L=4096": ([1] * 128, [4095] * 128),
            "prefill chunk 512 after 1536": ([512], [1536]),
            "fresh prompts 8 x 1024": ([1024] * 8, [0] * 8),
        }
        loop = LoopConfig(warmup_iterations=5, warmup_time_s=0.2, min_iterations=20, min_time_s=0.5)
    sweep = {"decode B=128 L=1024", "decode B=16 L=1024", "prefill chunk 512 after 1536", "decode B=2 L=40"}
    results = [run_case(name, q, c, kind=kind, device=device, loop=loop, dtype=dtype, sweep=name in sweep)
               for kind in ("auto", "fp8") for name, (q, c) in cases.items()]
    doc = {
        "benchmark": "serve_attention_backends",
        "definition": "median per-call time of one layer's paged attention incl. the K/V cache write (CUDA events)",
        "shape": {"num_heads": HEADS, "num_kv_heads": KV_HEADS, "head_dim": HEAD_DIM, "block_size": BLOCK,
                  "dtype": str(dtype).removeprefix("torch.")},
        "smoke": args.smoke,
        "results": results,
        "environment": environment(with_torch=True),
    }
    out_path = args.out or (None if args.smoke else OUT)
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"[attention_backends] wrote {out_path}", file=sys.stderr)
    else:
        print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
