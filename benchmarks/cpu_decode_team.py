"""The CPU decode kernel's OpenMP team: one call's time at each team size, for batches of 1, 2 and 8 sequences, on
a quiet machine and beside one busy process (``accelkit/serve/attention/cpu.py`` hands out one sequence per work
item, so the engine asks for at most as many threads as the step has sequences).

Each call is one layer's decode attention over a paged float32 cache (``--heads`` query heads, ``--kv-heads`` KV
heads of 64, blocks of 16 scattered at random, every sequence at ``--context`` tokens), timed with
``time.perf_counter`` around the C call. Team sizes alternate in rounds of 200 calls so that drift in the machine's
load falls on each alike; the busy neighbour is a pure-Python loop in another process. The mean is what a step
pays over many calls: a team that waits at its barrier for a thread taken off its core shows up there and in the
tail, not in the median.

    .venv/bin/python benchmarks/cpu_decode_team.py [--calls 4000] [--out benchmarks/results/cpu_decode_team.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = Path(__file__).resolve().parent / "results" / "cpu_decode_team.json"
HEAD_DIM, BLOCK, NUM_BLOCKS = 64, 16, 1024


def make_call(kernel: Any, n: int, *, heads: int, kv_heads: int, context: int, team: int) -> Any:
    gen = torch.Generator().manual_seed(n)
    kc = torch.randn(NUM_BLOCKS, BLOCK, kv_heads, HEAD_DIM, generator=gen)
    vc = torch.randn(NUM_BLOCKS, BLOCK, kv_heads, HEAD_DIM, generator=gen)
    per_seq = -(-context // BLOCK)
    tables = np.random.default_rng(n).permutation(NUM_BLOCKS)[: n * per_seq].reshape(n, per_seq).astype(np.int64)
    lens = np.full(n, context, dtype=np.int64)
    q = torch.randn(n, heads, HEAD_DIM, generator=gen)
    out = torch.empty(n, heads * HEAD_DIM)

    def call() -> None:
        kernel(q.data_ptr(), q.stride(0), kc.data_ptr(), vc.data_ptr(), tables.ctypes.data, tables.strides[0] // 8,
               lens.ctypes.data, n, heads, kv_heads, HEAD_DIM, BLOCK, HEAD_DIM**-0.5, 0, out.data_ptr(), team)

    return call


def summary(times: list[float]) -> dict[str, float]:
    times = sorted(times)
    return {"mean_us": round(statistics.fmean(times) * 1e6, 2), "p50_us": round(times[len(times) // 2] * 1e6, 2),
            "p99_us": round(times[int(len(times) * 0.99)] * 1e6, 2), "max_us": round(times[-1] * 1e6, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=4000, help="calls per point (default 4000)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--context", type=int, default=256)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    from accelkit.hardware.detect import environment
    from accelkit.serve.attention.cpu import decode_kernel

    kernel, problem = decode_kernel()
    if kernel is None:
        sys.exit(f"error: the CPU decode kernel is not available here ({problem})")
    teams = sorted({1, min(2, os.cpu_count() or 1), os.cpu_count() or 1})
    rows = []
    for busy in (False, True):
        neighbour = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
        try:
            time.sleep(0.5 if busy else 0)
            for n in (1, 2, 8):
                calls = {t: make_call(kernel, n, heads=args.heads, kv_heads=args.kv_heads, context=args.context,
                                      team=t) for t in teams}
                times: dict[int, list[float]] = {t: [] for t in teams}
                for call in calls.values():
                    for _ in range(50):
                        call()
                while len(times[teams[0]]) < args.calls:
                    for t, call in calls.items():
                        for _ in range(200):
                            started = time.perf_counter()
                            call()
                            times[t].append(time.perf_counter() - started)
                for t in teams:
                    rows.append({"busy_neighbour": busy, "sequences": n, "team": t, **summary(times[t])})
                    print(rows[-1], file=sys.stderr)
        finally:
            if neighbour is not None:
                neighbour.kill()
                neighbour.wait()
    doc = {
        "benchmark": "cpu_decode_team",
        "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]]),
        "settings": {"calls": args.calls, "heads": args.heads, "kv_heads": args.kv_heads, "head_dim": HEAD_DIM,
                     "context": args.context, "block_size": BLOCK},
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "rows": rows,
        "environment": environment(with_torch=True),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
