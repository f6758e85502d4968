"""Three pieces of a CPU decode step, each beside what it replaced, at the shapes of ``benchmarks/vs_vllm.py``'s batch-64
decode (4 query heads over 2 KV heads, head_dim 64, blocks of 16, contexts of 102-581 tokens, vocabulary 8,192 and
32,000):

* attention for one layer: the ``cpu`` backend's decodes (the compiled kernel reading K/V in place) against the
  ``sdpa`` backend's (the decodes grouped by length, each group's blocks gathered — into reused scratch, as it now
  does, and into fresh tensors, as it did — then SDPA with the padding mask), each the real backend on a real
  ``KVCache``, its per-step ``prepare`` outside the timing;
* the greedy pick: ``greedy_ids`` (``max``) against ``argmax``;
* a random row's draw at temperature 1.0 after the softmax: ``inverse_transform`` (one uniform per row) against
  the exponential race (a uniform per vocabulary entry, ``-log(1 - U)``, divide, pick).

Each is timed in this process, interleaved A B per repeat, median of ``--repeats`` calls, wall and CPU time, on
``--threads`` torch threads (default 1: the CPU time is then what the work costs, whatever else runs).

    .venv/bin/python benchmarks/cpu_hot_paths.py [--threads 1] [--repeats 30]

Writes benchmarks/results/cpu_hot_paths.json (with the environment and the load average around the run).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch

from accelkit.hardware.detect import environment
from accelkit.serve.attention import make_attention_backend
from accelkit.serve.attention.cpu import decode_kernel
from accelkit.serve.kv_cache import KVCache
from accelkit.serve.sampler import _exponential_, greedy_ids, inverse_transform

sys.path.insert(0, str(Path(__file__).resolve().parent))
from attention_backends import BLOCK, make_step  # (the paged step layout that benchmark builds)

OUT = Path(__file__).resolve().parent / "results" / "cpu_hot_paths.json"
BATCH, HEADS, KV_HEADS, HEAD_DIM = 64, 4, 2, 64


def _time(pair: dict[str, Callable[[], object]], repeats: int) -> dict[str, dict[str, float]]:
    """Median wall and CPU milliseconds of each function, called in turn (A B A B ...) after one warm-up each."""
    for fn in pair.values():
        fn()
    samples: dict[str, list[tuple[float, float]]] = {k: [] for k in pair}
    for _ in range(repeats):
        for name, fn in pair.items():
            w, c = time.perf_counter(), time.process_time()
            fn()
            samples[name].append(((time.perf_counter() - w) * 1e3, (time.process_time() - c) * 1e3))
    return {k: {"wall_ms": round(statistics.median(s[0] for s in v), 3),
                "cpu_ms": round(statistics.median(s[1] for s in v), 3)} for k, v in samples.items()}


def attention(repeats: int) -> dict[str, object]:
    """The two CPU backends' decode path for one layer, as the engine calls it (``prepare`` once per step, outside
    the timing), and the ``sdpa`` path with its gathers into fresh tensors (no scratch), as it was."""
    _, problem = decode_kernel()
    if problem is not None:
        raise SystemExit(f"the CPU decode kernel did not build: {problem}")
    gen = torch.Generator().manual_seed(0)
    lens = sorted((torch.randint(32, 512, (BATCH,), generator=gen) + 70).tolist())
    num_blocks = BATCH * -(-max(lens) // BLOCK) + 8
    cache = KVCache(num_layers=1, num_blocks=num_blocks, block_size=BLOCK, num_kv_heads=KV_HEADS, head_dim=HEAD_DIM,
                    dtype=torch.float32, device=torch.device("cpu"))
    slots = num_blocks * BLOCK
    cache.write(0, torch.arange(slots), *(torch.randn(slots, KV_HEADS, HEAD_DIM, generator=gen) for _ in range(2)))
    step = make_step([1] * BATCH, [n - 1 for n in lens], num_blocks=num_blocks, device=torch.device("cpu"))
    q = torch.randn(BATCH, HEADS, HEAD_DIM, generator=gen)
    calls = {label: make_attention_backend(name, cache, num_heads=HEADS, head_dim=HEAD_DIM, sliding_window=None)
             for label, name in (("cpu_kernel", "cpu"), ("gather_scratch_sdpa", "sdpa"), ("gather_fresh_sdpa", "sdpa"))}
    calls["gather_fresh_sdpa"].scratch = None  # type: ignore[attr-defined]  (gathers into new tensors per call)
    metas = {name: backend.prepare(step) for name, backend in calls.items()}

    def call(name: str) -> torch.Tensor:
        return torch.cat(calls[name]._decodes(q, 0, metas[name]))  # type: ignore[attr-defined]

    max_err = float((call("cpu_kernel") - call("gather_scratch_sdpa")).abs().max())
    times = _time({name: functools.partial(call, name) for name in calls}, repeats)
    return {"what": "one layer's decode attention, batch 64", "context_tokens": sum(lens),
            "groups_sdpa": len(metas["gather_scratch_sdpa"].decode_groups), "max_abs_difference": max_err, **times}


def sampling(vocab: int, repeats: int) -> dict[str, object]:
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(BATCH, vocab, generator=gen)
    probs = logits.softmax(-1)

    def race() -> torch.Tensor:
        noise = torch.empty_like(probs).uniform_(generator=gen)
        return greedy_ids(probs.clone().div_(_exponential_(noise)))

    def inverse() -> torch.Tensor:
        return inverse_transform(probs.clone(), torch.empty(BATCH, 1).uniform_(generator=gen))

    picks = _time({"argmax": lambda: logits.argmax(dim=-1), "greedy_ids_max": lambda: greedy_ids(logits)}, repeats)
    draws = _time({"race_uniform_log1p": race, "inverse_transform": inverse}, repeats)
    return {"what": f"batch {BATCH} x vocabulary {vocab}", "greedy": picks, "random_draw": draws}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    load_before = os.getloadavg()
    doc = {"benchmark": "cpu_hot_paths", "command": f"benchmarks/cpu_hot_paths.py --threads {args.threads} "
           f"--repeats {args.repeats}", "threads": args.threads, "attention": attention(args.repeats),
           "sampling": [sampling(v, args.repeats) for v in (8192, 32000)],
           "loadavg_before": load_before, "loadavg_after": os.getloadavg(), "environment": environment()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2, default=str) + "\n")
    print(json.dumps({k: doc[k] for k in ("attention", "sampling")}, indent=1))


if __name__ == "__main__":
    main()
