"""Benchmark: the planner's layout search over >= 1,000 candidates (issue 3: "well under a second").

Searches llama-3.1-70b training on 64 × H100 with unfused attention (so selective recompute is a
separate choice): every (tp, pp, dp, ZeRO stage, micro-batch, recompute, sequence parallel) layout is
evaluated — memory, step time, MFU, energy — and ranked. Also times the minimum-device search of
`plan --compare` for four accelerators. Writes benchmarks/results/plan_search.json (or --out) with raw samples
and the environment.

    .venv/bin/python benchmarks/plan_search.py [--out PATH]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from accelkit.core import Cluster, Recipe, Workload, summarize
from accelkit.hardware import get_device
from accelkit.hardware.detect import environment
from accelkit.models import get_preset
from accelkit.plan import PlanOptions, compare, make_context, search_ctx
from accelkit.plan.search import enumerate_layouts

OUT = Path(__file__).parent / "results" / "plan_search.json"
WARMUP, RUNS = 3, 20


def _time(fn, runs: int = RUNS) -> list[float]:
    for _ in range(WARMUP):
        fn()
    samples = []
    for _ in range(runs):
        t0 = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - t0) / 1e9)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT,
                        help=f"where the JSON goes (default: benchmarks/results/{OUT.name}, the committed result)")
    args = parser.parse_args()
    workload = Workload(model=get_preset("llama-3.1-70b"), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))
    ctx = make_context(workload, Cluster(device=get_device("h100"), num_devices=64),
                       PlanOptions(attention="math", use_calibration=False))
    candidates = len(list(enumerate_layouts(ctx, 64, {}, 1024)))
    search_s = _time(lambda: search_ctx(ctx, num_devices=64, global_batch=1024))
    compare_s = _time(lambda: compare(workload, ["h100", "h200", "mi300x", "b200"],
                                      options=PlanOptions(use_calibration=False), basis="min-devices"), runs=5)
    search, cmp = summarize(search_s), summarize(compare_s)
    result = {
        "benchmark": "plan_search",
        "workload": "llama-3.1-70b train, seq 4096, global batch 1024, 64 × H100-SXM5-80GB, attention=math",
        "candidates": candidates,
        "search_s": search.to_dict(),
        "candidates_per_s": candidates / search.median,
        "compare_4_hardware_min_devices_s": cmp.to_dict(),
        "samples": {"search_s": search_s, "compare_s": compare_s},
        "timer": "time.perf_counter_ns, 3 warm-up runs discarded",
        "environment": environment(with_torch=False),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{candidates} candidates: search median {search.median * 1e3:.1f} ms (p90 {search.p90 * 1e3:.1f} ms, "
          f"CV {search.cv * 100:.1f}%), {result['candidates_per_s']:,.0f} candidates/s; "
          f"compare over 4 hardware (min devices) median {cmp.median * 1e3:.1f} ms → {args.out}")


if __name__ == "__main__":
    main()
