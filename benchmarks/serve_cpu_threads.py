"""How many torch threads `accelkit serve` should step with on a CPU: served throughput and latency at each
``--cpu-threads``, and what the server's process burns per request (docs/engine.md, "Threads on a CPU").

`benchmarks/cpu_threads.py` times the offline engine alone. A server is more: its event loop (HTTP, JSON, the
tokenizer) and any compile threads share the cores with the engine's torch threads, and GNU OpenMP's threads spin
for a while at the end of each parallel region before they sleep — through the Python part of every step, when
nothing else runs on their core. This script starts `accelkit serve --cpu-threads N` for each model and each N
(1 … usable cores), interleaved over ``--rounds`` rounds, and measures, against each server:

* ``sequential``: ``--sequential`` plain 4-token completions one after another (after 20 discarded): the wall time
  of each and the server process's CPU time (user + system, every thread) per request. CPU above wall time is a
  second thread busy beside the first.
* ``rate_inf``: `accelkit loadtest` — 64 prompts of 256 words, 128 tokens each (``--ignore-eos``), all at once:
  output tokens/s, TTFT and TPOT p50. What the cores deliver at saturation.
* ``rate_1``: the same client at 1 request/s (16 prompts): TPOT p50 and p99 at low load.

Models (random Llama weights, fp32, made here): ``tiny`` (2 layers, hidden 64: per-step Python dominates),
``4L-h256`` (`benchmarks/serve_throughput.py`'s CPU model, the one beside vLLM in `vs_vllm.py`) and ``8L-h512``
(hidden 512, 8 layers: matmuls worth splitting). ``OMP_NUM_THREADS`` and ``OMP_WAIT_POLICY`` are removed from the
servers' environment so that ``--cpu-threads`` alone sets the count and GNU OpenMP waits as it does by default.

    .venv/bin/python benchmarks/serve_cpu_threads.py [--models tiny 4L-h256 8L-h512] [--rounds 2]
        [--out benchmarks/results/serve_cpu_threads.json]

The JSON keeps every round, the medians over rounds, the load average before and after, and the environment.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from vs_vllm import free_port, serving_process  # noqa: E402  (a server process's start and stop, shared)

OUT = Path(__file__).resolve().parent / "results" / "serve_cpu_threads.json"
SHAPES: dict[str, dict[str, Any]] = {
    "tiny": {"hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
             "num_key_value_heads": 2, "head_dim": 16},
    "4L-h256": {},  # serve_throughput's CPU model as it is
    "8L-h512": {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 8, "num_attention_heads": 8,
                "num_key_value_heads": 4, "head_dim": 64},
}
LOADS = {"rate_inf": ("inf", 64), "rate_1": ("1", 16)}


def log(msg: str) -> None:
    print(f"[serve_cpu_threads] {msg}", file=sys.stderr, flush=True)


def build(work: Path, names: list[str]) -> dict[str, Path]:
    import serve_throughput as st

    out = {}
    for name in names:
        setup = dict(st.SETUPS["cpu"])
        setup["model"] = {**setup["model"], **SHAPES[name]}
        out[name] = st.build_model(work / name, setup, "cpu")
    return out


def sequential(url: str, pid: int, count: int) -> dict[str, float]:
    """``count`` 4-token completions one after another: wall and server CPU ms per request."""
    import httpx
    import psutil

    proc = psutil.Process(pid)
    body = {"model": "m", "prompt": "a b c", "max_tokens": 4, "ignore_eos": True}
    with httpx.Client(timeout=60) as client:
        for _ in range(20):
            client.post(f"{url}/v1/completions", json=body).raise_for_status()
        cpu0, wall0 = proc.cpu_times(), time.perf_counter()
        for _ in range(count):
            client.post(f"{url}/v1/completions", json=body).raise_for_status()
        cpu1, wall1 = proc.cpu_times(), time.perf_counter()
    cpu_s = cpu1.user + cpu1.system - cpu0.user - cpu0.system
    return {"wall_ms_per_request": (wall1 - wall0) / count * 1e3, "server_cpu_ms_per_request": cpu_s / count * 1e3}


def loadtest(url: str, rate: str, prompts: int) -> dict[str, float]:
    """`accelkit loadtest` against ``url``: the figures kept from its JSON."""
    cmd = [sys.executable, "-m", "accelkit", "loadtest", "--base-url", url, "--model", "m", "--dataset", "random",
           "--random-input-len", "256", "--random-output-len", "128", "--num-prompts", str(prompts),
           "--request-rate", rate, "--ignore-eos", "--json", "--no-save", "--no-progress"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if out.returncode != 0:
        raise RuntimeError(f"accelkit loadtest exited {out.returncode}: {out.stderr[-1500:]}")
    curve = json.loads(out.stdout)["details"]["curve"][0]
    if curve["failed"]:
        raise RuntimeError(f"accelkit loadtest: {curve['failed']} requests failed at rate {rate}")
    return {"output_tok_s": curve["output_throughput"], "ttft_ms_p50": curve["ttft_ms"]["p50"],
            "tpot_ms_p50": curve["tpot_ms"]["p50"], "tpot_ms_p99": curve["tpot_ms"]["p99"]}


def point(model_dir: Path, threads: int, log_file: Path, count: int) -> dict[str, Any]:
    port = free_port()
    cmd = [sys.executable, "-m", "accelkit", "serve", "--model", str(model_dir), "--port", str(port),
           "--served-model-name", "m", "--dtype", "float32", "--kv-cache-memory", "1GiB",
           "--max-num-batched-tokens", "2048", "--max-num-seqs", "256", "--no-progress", "--cpu-threads", str(threads)]
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
    env["PYTHONPATH"] = str(ROOT)
    before = [round(v, 2) for v in os.getloadavg()]
    with serving_process(cmd, log_file, port, env=env) as (proc, _):
        url = f"http://127.0.0.1:{port}"
        row: dict[str, Any] = {"sequential": sequential(url, proc.pid, count)}
        for name, (rate, prompts) in LOADS.items():
            row[name] = loadtest(url, rate, prompts)
    row["loadavg"] = {"before": before, "after": [round(v, 2) for v in os.getloadavg()]}
    return row


def medians(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    return {part: {key: statistics.median(r[part][key] for r in runs) for key in runs[0][part]}
            for part in ("sequential", *LOADS)}


def main() -> None:
    from accelkit.core.device import usable_cores
    from accelkit.hardware.detect import environment

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", choices=list(SHAPES), nargs="+", default=list(SHAPES))
    parser.add_argument("--threads", type=int, nargs="+", default=None, help="default: 1 … usable cores")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--sequential", type=int, default=200, help="4-token requests timed one after another")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    threads = args.threads or list(range(1, usable_cores() + 1))
    if args.rounds < 1 or args.sequential < 1 or min(threads) < 1:
        parser.error(f"--rounds {args.rounds} --sequential {args.sequential} --threads {threads}: each must be ≥ 1")
    load_before = [round(v, 2) for v in os.getloadavg()]
    rows: dict[str, dict[str, list[dict[str, Any]]]] = {m: {str(t): [] for t in threads} for m in args.models}
    with tempfile.TemporaryDirectory() as tmp:
        models = build(Path(tmp), args.models)
        for r in range(args.rounds):  # interleaved: every model and thread count once per round
            for name, model_dir in models.items():
                for t in threads:
                    row = point(model_dir, t, Path(tmp) / "server.log", args.sequential)
                    rows[name][str(t)].append(row)
                    seq, inf, one = row["sequential"], row["rate_inf"], row["rate_1"]
                    log(f"round {r + 1} {name} threads {t}: 4-token request {seq['wall_ms_per_request']:.2f} ms wall, "
                        f"{seq['server_cpu_ms_per_request']:.2f} ms server CPU; rate inf {inf['output_tok_s']:.0f} "
                        f"tok/s; rate 1 TPOT p50 {one['tpot_ms_p50']:.2f} ms")
    doc = {
        "benchmark": "serve_cpu_threads",
        "command": "python benchmarks/serve_cpu_threads.py " + " ".join(sys.argv[1:]),
        "settings": {"models": {m: SHAPES[m] or "serve_throughput.SETUPS['cpu']['model']" for m in args.models},
                     "dtype": "float32", "threads": threads, "rounds": args.rounds,
                     "sequential_requests": args.sequential, "loads": LOADS,
                     "loadtest": "random dataset, 256 words in, 128 tokens out, --ignore-eos"},
        "load_average": {"before": load_before, "after": [round(v, 2) for v in os.getloadavg()]},
        "medians": {m: {t: medians(runs) for t, runs in per.items()} for m, per in rows.items()},
        "runs": rows,
        "environment": environment(with_torch=True),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
