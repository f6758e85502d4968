"""Gradient communication compression, measured (issue 17; docs/distributed.md "Gradient compression").

Runs the real CLI — `accelkit bench llm-train|resnet --nproc-per-node 2 --grad-compression …` on gloo (CPU), each
rank one process — and keeps, per variant: the step time (slowest rank, median and IQR/median), the bytes each rank
handed to its gradient collectives per step (counted inside torch's DDP hook / FSDP2's reduce-scatter) beside the
planner's figure for the same layout, and the quality gate (evaluation loss after K steps on the same data from the
same weights, against the uncompressed run). Then the planner's `--compare-compression` for Llama-3.1-70B on 64
H100 in 8 nodes at 100 Gb/s and on 8 H100 in one NVLink node, and Llama-3.1-8B at dp 64 over 8 nodes (arithmetic,
no hardware needed).

    PYTHONPATH=. python benchmarks/grad_compression.py [--out PATH]   # ~5 min on 2 CPU cores

Writes benchmarks/results/grad_compression_cpu.json, or --out (with the environment). Step times on a shared CPU are
noisy and the variants run one after another (not interleaved): read the bytes and the gate, not small time
differences.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
OUT = REPO / "benchmarks" / "results" / "grad_compression_cpu.json"
LOOP = ("--warmup", "3", "--warmup-time", "0.5", "--min-iterations", "20", "--min-time", "3")
RUNS: list[tuple[str, list[str]]] = [
    ("llama-ddp", ["llm-train", "--model", "tiny-llama", "--batch-size", "4", "--seq-len", "64", "--lr", "3e-3",
                   "--zero", "0", "--grad-compression", "none,bf16,powersgd", "--quality-steps", "50"]),
    ("llama-ddp-powersgd-r1-no-ef", ["llm-train", "--model", "tiny-llama", "--batch-size", "4", "--seq-len", "64",
                                     "--lr", "3e-3", "--zero", "0", "--grad-compression", "none,powersgd",
                                     "--powersgd-rank", "1", "--no-powersgd-error-feedback",
                                     "--no-powersgd-warm-start", "--powersgd-start-iter", "1", "--quality-steps", "50"]),
    ("llama-fsdp2-zero3", ["llm-train", "--model", "tiny-llama", "--batch-size", "4", "--seq-len", "64", "--lr", "3e-3",
                           "--zero", "3", "--grad-compression", "none,bf16", "--quality-steps", "50"]),
    ("resnet-ddp", ["resnet", "--size", "tiny", "--batch-size", "8", "--image-size", "32", "--lr", "0.01",
                    "--zero", "0", "--grad-compression", "none,bf16,powersgd", "--quality-steps", "50"]),
]


def accelkit(*args: str, home: str) -> dict[str, Any]:
    env = {**os.environ, "ACCELKIT_HOME": home, "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-m", "accelkit", *args], capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"accelkit {' '.join(args)} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout) if "--json" in args else {}


def summarize(name: str, doc: dict[str, Any]) -> dict[str, Any]:
    rows = []
    for v in doc["variants"]:
        comm, quality, lat = v.get("grad_comm") or {}, v.get("quality") or {}, v["latency_s"]
        rows.append({
            "variant": v["name"], "layout": v["layout"], "recipe": {k: val for k, val in v["recipe"].items()
                                                                    if k.startswith(("grad_", "powersgd_"))},
            "step_s": {"median": lat["median"], "iqr_over_median": lat["iqr_over_median"], "n": lat["n"]},
            "step_vs_none": lat["median"] / doc["variants"][0]["latency_s"]["median"],
            "throughput": v["throughput"]["value"], "unit": v["throughput"]["unit"],
            "bytes_per_step_per_rank": comm.get("measured_bytes_per_step"),
            "plain_bytes_per_step_per_rank": comm.get("gradient_bytes_per_step"),
            "sent_over_plain": comm.get("sent_over_gradient"),
            "planned_bytes_per_step_per_rank": comm.get("predicted_bytes_per_step"),
            "counted_over_planned": comm.get("ratio_per_rank"), "within_5pct": comm.get("within_tolerance"),
            "collectives_per_step": (comm.get("per_rank") or [{}])[0].get("collectives_per_step"),
            "quality": None if not quality else {
                k: quality.get(k) for k in ("role", "passed", "ratio", "eval_loss", "reference_eval_loss",
                                            "first_loss", "progress", "steps", "message")},
        })
    return {"run": name, "workload": doc["workload"], "label": doc["label"], "world_size": doc["world_size"],
            "backend": doc["variants"][0]["backend"], "refused": doc["refused"], "variants": rows}


def plan_comparison() -> list[dict[str, Any]]:
    """`accelkit plan --compare-compression` (fp32 gradient reduction under bf16, 100 Gb/s per GPU across nodes)."""
    from accelkit.core import Cluster, Recipe, Workload
    from accelkit.hardware import get_device
    from accelkit.models import get_preset
    from accelkit.plan import Layout, PlanOptions
    from accelkit.plan.compression import compare_compression

    h100 = get_device("h100")
    options = PlanOptions(use_calibration=False, grad_reduce_fp32=True)
    cases = [("llama-3.1-70b", 8192, 64, Layout(dp=8, tp=8, pp=1, zero=1, micro_batch=1, grad_accum=16, recompute="full",
                                                sequence_parallel=True)),
             ("llama-3.1-70b", 8192, 8, Layout(dp=8, tp=1, pp=1, zero=3, micro_batch=1, grad_accum=16, recompute="full")),
             ("llama-3.1-8b", 4096, 64, Layout(dp=64, tp=1, pp=1, zero=0, micro_batch=1, grad_accum=4, recompute="full"))]
    out = []
    for model, seq, n, layout in cases:
        workload = Workload(model=get_preset(model), task="train", seq_len=seq, recipe=Recipe(precision="bf16"))
        cluster = Cluster(device=h100, num_devices=n, scaleout_bandwidth_bytes_per_s=100e9 / 8)
        out.append(compare_compression(workload, cluster, layout, options))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT,
                        help=f"where the JSON goes (default: benchmarks/results/{OUT.name}, the committed result)")
    args = parser.parse_args()
    from accelkit.hardware.detect import environment

    with tempfile.TemporaryDirectory(prefix="accelkit-gradcomp-") as home:
        accelkit("hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32", home=home)  # the planner's CPU
        runs = []
        for name, args in RUNS:
            print(f"{name}: accelkit bench {' '.join(args)}", file=sys.stderr, flush=True)
            doc = accelkit("bench", *args, "--device", "cpu", "--nproc-per-node", "2", *LOOP, "--no-probe", "--json",
                           home=home)
            runs.append(summarize(name, doc))
    result = {
        "benchmark": "grad_compression",
        "what": "gradient bytes per step per rank counted inside torch's DDP comm hooks / FSDP2 reduce-scatter vs the "
                "planner, step time, and the loss gate (evaluation loss after K steps, same data and weights, vs none); "
                "2 processes on gloo (CPU)",
        "runs": runs,
        "plan_compare_compression_100gbps": plan_comparison(),
        "reproduce": "PYTHONPATH=. python benchmarks/grad_compression.py",
        "environment": environment(with_torch=True),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1, default=str) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
