"""How many torch threads a CPU engine should step with: decode time per token at each thread count, on a quiet
machine and beside one other busy process (``accelkit serve --cpu-threads``; docs/engine.md, "Threads on a CPU").

Each point runs the offline engine (``accelkit.serve.LLM``) in its own process with ``cpu_threads`` set: a batch of
``--batch`` prompts of 16 tokens, 64 greedy tokens each, three times, the median taken. The busy neighbour is a
pure-Python loop in another process (what a tokenizer, an HTTP server or a second job does to a core). Points are
interleaved (every thread count once, then again) so that drift in the machine's load falls on all of them alike.

    .venv/bin/python benchmarks/cpu_threads.py [--models tiny small] [--batch 1 8] [--rounds 2]

``tiny`` is the test suite's 2-layer, hidden-64 Llama; ``small`` is hidden 512, 8 layers (about 30M parameters):
a model whose matmuls have work to split. Writes benchmarks/results/cpu_threads.json (with the environment).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = Path(__file__).resolve().parent / "results" / "cpu_threads.json"
MODELS = {"tiny": {}, "small": {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 8,
                                 "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 64}}
NEW_TOKENS = 64

CHILD = r"""
import json, statistics, sys, time
from accelkit.serve import LLM, SamplingParams
model, threads, batch, new = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
llm = LLM(model, kv_cache_memory_bytes=64 << 20, max_model_len=256, cpu_threads=threads)
prompts = [[5 + (i * 7 + j) % 400 for j in range(16)] for i in range(batch)]
params = SamplingParams(temperature=0.0, max_tokens=new, ignore_eos=True)
llm.generate(prompts, params, use_tqdm=False)  # warm-up
times = []
for _ in range(3):
    start = time.perf_counter()
    llm.generate(prompts, params, use_tqdm=False)
    times.append(time.perf_counter() - start)
print(json.dumps({"ms_per_step": statistics.median(times) / new * 1e3}))
"""


def run_point(model_dir: Path, threads: int, batch: int) -> float:
    out = subprocess.run([sys.executable, "-c", CHILD, str(model_dir), str(threads), str(batch), str(NEW_TOKENS)], capture_output=True,
                         text=True, check=True, cwd=ROOT)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["ms_per_step"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", choices=sorted(MODELS), nargs="+", default=["tiny", "small"])
    parser.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--threads", type=int, nargs="+", default=None, help="default: 1 … usable cores")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    from accelkit.core.device import usable_cores
    from accelkit.hardware.detect import environment
    from accelkit.serve.testing import save_tiny_model

    threads = args.threads or list(range(1, usable_cores() + 1))
    if min(threads) < 1 or min(args.batch) < 1 or args.rounds < 1:
        parser.error("--threads, --batch and --rounds take positive numbers")
    load_before = [round(v, 2) for v in os.getloadavg()]
    points: dict[tuple[str, str, int, int], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {m: save_tiny_model(Path(tmp) / m, seed=0, **MODELS[m]) for m in args.models}
        for _ in range(args.rounds):
            for neighbour in ("quiet", "one busy process"):
                busy = (subprocess.Popen([sys.executable, "-c", "while True: pass"])
                        if neighbour != "quiet" else None)
                try:
                    for model, model_dir in dirs.items():
                        for batch in args.batch:
                            for n in threads:
                                ms = run_point(model_dir, n, batch)
                                points.setdefault((model, neighbour, batch, n), []).append(ms)
                                print(f"{model:5s} {neighbour:16s} batch {batch:3d}  {n} thread(s): {ms:7.2f} ms a "
                                      "step", file=sys.stderr, flush=True)
                finally:
                    if busy is not None:
                        busy.kill()
                        busy.wait()
    rows = [{"model": k[0], "neighbour": k[1], "batch": k[2], "threads": k[3], "ms_per_step_runs": v,
             "ms_per_step": statistics.median(v)} for k, v in points.items()]
    doc = {
        "benchmark": "cpu_threads",
        "command": "python benchmarks/cpu_threads.py " + " ".join(sys.argv[1:]),
        "settings": {"models": {m: MODELS[m] for m in args.models}, "new_tokens": NEW_TOKENS,
                     "prompt_tokens": 16, "dtype": "float32", "rounds": args.rounds},
        "load_average": {"before": load_before, "after": [round(v, 2) for v in os.getloadavg()]},
        "rows": rows,
        "environment": environment(with_torch=True),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
