"""What a random (temperature > 0) decode step's sampling costs, with the race's noise drawn two ways.

The sampler picks ``argmax(softmax(logits / T) / E)`` with ``E ~ Exp(1)`` per token (the exponential race: the
same distribution as ``multinomial``, without its host sync). torch's ``Tensor.exponential_`` runs one slow loop
on a CPU; ``-log(1 - U)`` of ``uniform_`` draws is the same distribution. This benchmark times, per batch size and
vocabulary, (a) the noise alone both ways and (b) the whole ``Sampler`` call at temperature 1.0 (the default of
OpenAI clients and of ``vllm bench serve``) with the sampler as it is, and with its noise swapped back to
``exponential_`` — interleaved A B B A per repeat, medians, wall and CPU time of this process.

    .venv/bin/python benchmarks/sampler_noise.py [--repeats 20] [--threads 2]

Since 83b42ca the ``Sampler`` on a CPU draws random rows by inverse transform (one uniform per row), not by the race:
run on a CPU now, both "sampler" rows measure that draw and only the "noise" rows compare the race's two noises;
``benchmarks/cpu_hot_paths.py`` compares the inverse transform with the race. The committed JSON predates it.

Writes benchmarks/results/sampler_noise_cpu.json (with the environment and the load average around the run).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

import accelkit.serve.sampler as sampler_module
from accelkit.hardware.detect import environment
from accelkit.serve.sampler import Sampler
from accelkit.serve.sampling import SamplingParams

OUT = Path(__file__).resolve().parent / "results" / "sampler_noise_cpu.json"
SHAPES = [(1, 32000), (16, 32000), (64, 8192), (64, 32000), (256, 8192), (16, 151936)]


def _time(fn: Callable[[], object], repeats: int) -> tuple[float, float]:
    """Median wall and CPU milliseconds of ``fn`` over ``repeats`` calls (after one warm-up call)."""
    fn()
    walls, cpus = [], []
    for _ in range(repeats):
        w, c = time.perf_counter(), time.process_time()
        fn()
        walls.append((time.perf_counter() - w) * 1e3)
        cpus.append((time.process_time() - c) * 1e3)
    return statistics.median(walls), statistics.median(cpus)


def _torch_exponential_(uniform: torch.Tensor) -> torch.Tensor:
    return uniform.exponential_()  # what the sampler drew before: the buffer refilled by torch's exponential_


def measure(batch: int, vocab: int, repeats: int) -> dict[str, object]:
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(batch, vocab, generator=gen)
    buf = torch.empty(batch, vocab)
    params, ids = [SamplingParams(temperature=1.0)] * batch, list(range(batch))
    sampler = Sampler(torch.device("cpu"), seed=0)
    ours = sampler_module._exponential_
    rows: dict[str, list[tuple[float, float]]] = {k: [] for k in ("noise_exponential_", "noise_uniform_log1p",
                                                                  "sampler_exponential_", "sampler_uniform_log1p")}

    def sample_with(noise: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[], object]:
        def run() -> object:
            sampler_module._exponential_ = noise
            try:
                return sampler(logits, params, ids)
            finally:
                sampler_module._exponential_ = ours
        return run

    pairs = [("noise_exponential_", lambda: buf.exponential_(generator=gen)),
             ("noise_uniform_log1p", lambda: ours(buf.uniform_(generator=gen))),
             ("sampler_exponential_", sample_with(_torch_exponential_)),
             ("sampler_uniform_log1p", sample_with(ours))]
    for r in range(repeats):  # A B B A: a drift in the machine's load cancels
        order = pairs if r % 2 == 0 else pairs[::-1]
        for name, fn in order:
            rows[name].append(_time(fn, 1))
    result: dict[str, object] = {"batch": batch, "vocab": vocab}
    for name, samples in rows.items():
        result[f"{name}_ms"] = round(statistics.median(s[0] for s in samples), 3)
        result[f"{name}_cpu_ms"] = round(statistics.median(s[1] for s in samples), 3)
    result["sampler_speedup"] = round(float(result["sampler_exponential__ms"])  # type: ignore[arg-type]
                                      / float(result["sampler_uniform_log1p_ms"]), 2)  # type: ignore[arg-type]
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    results = []
    for batch, vocab in SHAPES:
        results.append(measure(batch, vocab, args.repeats))
        print(json.dumps(results[-1]), flush=True)
    doc = {"benchmark": "sampler_noise", "command": f"benchmarks/sampler_noise.py --repeats {args.repeats} "
           f"--threads {args.threads}", "threads": args.threads, "temperature": 1.0, "results": results,
           "loadavg_before": [round(x, 2) for x in load_before],
           "loadavg_after": [round(x, 2) for x in os.getloadavg()], "environment": environment(with_torch=True)}
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
