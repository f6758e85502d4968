"""How much does the `accelkit bench` harness add to what it measures?

Only the measured window matters: load, first call, warm-up and statistics happen outside it by
construction. Inside it the harness does three things a bare loop does not: a ``perf_counter_ns`` pair
and an append per iteration (``time_block``), the stopping-rule check, and the memory/energy counters
read around every block. This benchmark times one prebuilt workload (tiny-bert fp32 forward on the CPU:
the same module, inputs and memory) both ways, interleaved block by block — bare, harness, harness,
bare, … (ABBA, so a linear drift cancels) — with blocks of the size the runner uses (about a tenth of
``min_time``), so that both sides see the same machine even when other jobs share it. Each pair gives
one overhead figure, 1 − harness throughput ÷ bare throughput; the median and p25–p75 are reported.
It then runs the full ``run_benchmark`` once on the same workload, for the record. Target: under 2 %.

    .venv/bin/python benchmarks/harness_overhead.py [--pairs 200] [--block-s 0.1]

Writes benchmarks/results/harness_overhead.json (with the environment).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from accelkit.bench.runner import BenchConfig, run_benchmark
from accelkit.bench.trackers import energy_tracker, memory_tracker
from accelkit.bench.variants import Variant
from accelkit.bench.workloads import make_workload
from accelkit.bench.workloads.bert import Bert
from accelkit.core.stats import percentile
from accelkit.hardware.detect import environment
from accelkit.timing import LoopConfig, time_block

OUT = Path(__file__).resolve().parent / "results" / "harness_overhead.json"


class _Prebuilt(Bert):
    """The bert workload whose prepare() returns the one module built up front."""

    def __init__(self, inner: Bert, prepared):  # type: ignore[no-untyped-def]
        super().__init__(inner.config)
        self._prepared = prepared

    def prepare(self, variant, device, *, seed):  # type: ignore[no-untyped-def]
        return self._prepared


def bare_block(fn, iterations: int) -> float:  # type: ignore[no-untyped-def]
    """Seconds for ``iterations`` back-to-back calls: the least a measurement can add."""
    t0 = time.perf_counter()
    for _ in range(iterations):
        fn()
    return time.perf_counter() - t0


def harness_block(fn, iterations: int, trackers) -> float:  # type: ignore[no-untyped-def]
    """One block exactly as the runner measures it: counters started, timed block, counters read."""
    for t in trackers:
        t.start()
    block = time_block(fn, device="cpu", iterations=iterations)
    for t in trackers:
        t.stop()
    return block.wall_s


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pairs", type=int, default=200)
    parser.add_argument("--block-s", type=float, default=0.1, help="seconds per block (the runner: min_time / 10)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=128)
    args = parser.parse_args()

    import torch

    workload = make_workload("bert", {"size": "tiny", "batch_size": args.batch_size, "seq_len": args.seq_len})
    prepared = workload.prepare(Variant(), "cpu", seed=0)
    fn, items = prepared.steps[0].fn, prepared.steps[0].items
    for _ in range(30):  # warm-up on the measured shapes
        fn()
    per_call = bare_block(fn, 20) / 20
    k = max(1, round(args.block_s / per_call))
    trackers = [t for t in (memory_tracker("cpu")[0], energy_tracker("cpu")[0]) if t is not None]

    pairs = []
    for p in range(args.pairs):
        if p % 2 == 0:  # ABBA: bare first in even pairs, harness first in odd ones
            b = bare_block(fn, k)
            h = harness_block(fn, k, trackers)
        else:
            h = harness_block(fn, k, trackers)
            b = bare_block(fn, k)
        pairs.append({"bare_s": b, "harness_s": h, "overhead": 1 - b / h})  # 1 − (k/h)/(k/b)
    overheads = sorted(x["overhead"] for x in pairs)
    summary = {"median": percentile(overheads, 50), "p25": percentile(overheads, 25), "p75": percentile(overheads, 75)}
    bare_tput = k * items * len(pairs) / sum(x["bare_s"] for x in pairs)
    harness_tput = k * items * len(pairs) / sum(x["harness_s"] for x in pairs)

    # the whole harness once on the same module, for the record (its measured window is the code above)
    loop = LoopConfig(warmup_iterations=10, warmup_time_s=1.0, min_iterations=20, min_time_s=3.0)
    run = run_benchmark(_Prebuilt(workload, prepared), [Variant()],
                        BenchConfig(device="cpu", loop=loop, predict=False, auto_probe=False, accuracy=False))
    full = run.variants[0].to_json()

    doc = {
        "benchmark": "harness_overhead",
        "method": ("blocks of k calls of one prebuilt tiny-bert fp32 forward, timed bare (one perf_counter pair) and "
                   "through the harness's measured-phase path (memory/energy counters + accelkit.timing."
                   "time_block), interleaved ABBA; overhead per pair = 1 − harness throughput / bare throughput"),
        "workload": workload.label,
        "iterations_per_block": k,
        "pairs": len(pairs),
        "trackers": [type(t).__name__ for t in trackers],
        "threshold": 0.02,
        "overhead": summary,
        "throughput_items_per_s": {"bare": bare_tput, "harness": harness_tput,
                                   "overhead_of_totals": 1 - harness_tput / bare_tput},
        "passed": summary["median"] < 0.02,
        "full_run_benchmark": {"throughput": full["throughput"], "latency_s": full["latency_s"],
                               "phases": full["phases"], "noise": full["noise"]},
        "samples": pairs,
        "torch_threads": torch.get_num_threads(),
        "environment": environment(with_torch=True),
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"{len(pairs)} interleaved pairs of {k} calls: bare {bare_tput:,.1f} vs harness {harness_tput:,.1f} "
          f"samples/s; overhead median {summary['median'] * 100:+.3f}% (p25 {summary['p25'] * 100:+.3f}%, "
          f"p75 {summary['p75'] * 100:+.3f}%) → {'PASS' if doc['passed'] else 'FAIL'} (< 2%)")
    print(f"full run_benchmark on the same module: {full['throughput']['value']:,.1f} samples/s "
          f"(CV {full['latency_s']['cv'] * 100:.1f}%, {full['noise']}); wrote {OUT}")


if __name__ == "__main__":
    main()
