"""Where a structured-output mask's time goes, token by token, on JSONSchemaBench schemas (the coverage benchmark's
sample, walk and tokenizer: ``benchmarks/structured_coverage.py``).

At every step of a random walk the same matcher state's mask is filled three ways, the order rotated step by step
(whichever comes first pays for lexer states reached for the first time, so each way gets a third of those):

- ``raw``: llguidance's own fill (``LLMatcher.unsafe_compute_mask_ptr``) on this thread, also timed in this
  thread's CPU time: wall time beyond it is time the thread was not running (other processes on the machine);
- ``executor``: llguidance's ``LLExecutor`` with one row (what ``fill_bitmasks`` did for every step before);
- ``ours``: ``LLGuidanceBackend.fill_bitmasks`` as the server calls it (one row: on this thread, so its CPU time
  too).

Then the mask is applied to one row of logits, the previous CPU way (numpy unpack, then torch ``~`` and
``masked_fill_``) and the current one (``apply_token_bitmask_``), alternating which goes first. Steps during which
Python's garbage collector ran are counted. One torch thread (as the coverage worker).

    .venv/bin/python benchmarks/structured_mask_breakdown.py --data /path/to/jsonschemabench/data [--per-subset 10]

Writes benchmarks/results/structured_mask_breakdown.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
OUT = Path(__file__).resolve().parent / "results" / "structured_mask_breakdown.json"


def previous_apply(logits: Any, bitmask: Any) -> None:
    """The CPU application before this benchmark: numpy unpack, then two torch ops (on torch's threads)."""
    import numpy as np
    import torch

    bits = np.unpackbits(bitmask.numpy().view(np.uint8), axis=1, count=logits.shape[1], bitorder="little")
    logits.masked_fill_(~torch.from_numpy(bits.view(np.bool_)), float("-inf"))


def pct(values: list[float], q: float) -> float | None:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 2) if ordered else None


def stats(values: list[float]) -> dict[str, Any]:
    return {"n": len(values), "p50": pct(values, 0.5), "p90": pct(values, 0.9), "p99": pct(values, 0.99),
            "p99.9": pct(values, 0.999), "max": round(max(values), 1) if values else None,
            "over_200us": sum(v > 200 for v in values), "over_1ms": sum(v > 1000 for v in values)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="jsonschemabench's data/ folder")
    ap.add_argument("--per-subset", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=50_257)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/accelkit-structured-coverage"))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()

    import llguidance
    import numpy as np
    import torch
    from structured_coverage import WALK_TOKENS, sample, tokenizer_dir
    from transformers import AutoTokenizer

    from accelkit.serve.sampling import StructuredOutputs
    from accelkit.serve.structured import apply_token_bitmask_
    from accelkit.serve.structured_llguidance import LLGuidanceBackend

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(tokenizer_dir(args.data, args.vocab, args.cache, args.seed))
    eos, vocab = tok.eos_token_id, len(tok)
    backend = LLGuidanceBackend(tok, vocab, [eos])
    width = (vocab + 31) // 32
    texts = [tok.decode([i]) for i in range(vocab)]
    closers = np.array([t in set('"}],:0123456789tfnul') for t in texts])
    # the coverage benchmark's sample, every per_subset-th file of it thinned to --per-subset a subset
    picked = [p for i, p in enumerate(sample(args.data, 55, args.seed)) if i % 55 < args.per_subset]

    gc_runs = [0]
    gc.callbacks.append(lambda phase, info: gc_runs.__setitem__(0, gc_runs[0] + (phase == "start")))
    times: dict[str, list[float]] = {k: [] for k in ("raw", "raw_cpu", "raw_preempted", "executor", "ours",
                                                     "ours_cpu", "apply_previous", "apply_ours")}
    slow_steps: list[dict[str, Any]] = []
    masks = [torch.zeros(1, width, dtype=torch.int32) for _ in range(3)]
    logits = torch.randn(1, vocab)
    steps_with_gc = schemas = 0
    for n, (subset, path) in enumerate(picked):
        try:
            grammar = backend.compile(StructuredOutputs(json=path.read_text(errors="replace")))
        except ValueError:
            continue
        schemas += 1
        rng = np.random.default_rng(args.seed + n)
        for _ in range(2):
            matcher = grammar.matcher()
            ll = matcher.matcher
            for step in range(WALK_TOKENS):
                gc_before = gc_runs[0]
                for k in range(3):
                    way = (step + k) % 3
                    if way == 0:
                        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
                        ll.unsafe_compute_mask_ptr(masks[0].data_ptr(), width * 4)
                        wall, cpu = (time.perf_counter_ns() - t0) / 1e3, (time.thread_time_ns() - c0) / 1e3
                        times["raw"].append(wall)
                        times["raw_cpu"].append(cpu)
                        times["raw_preempted"].append(max(0.0, wall - cpu))
                    elif way == 1:
                        t0 = time.perf_counter_ns()
                        backend._executor.unsafe_compute_mask_ptr([(ll, 0)], masks[1].data_ptr(), width * 4, 1)
                        times["executor"].append((time.perf_counter_ns() - t0) / 1e3)
                    else:
                        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
                        backend.fill_bitmasks([(matcher, 0)], masks[2])  # (one row: on this thread)
                        times["ours"].append((time.perf_counter_ns() - t0) / 1e3)
                        times["ours_cpu"].append((time.thread_time_ns() - c0) / 1e3)
                assert torch.equal(masks[0], masks[1]) and torch.equal(masks[0], masks[2])
                if max(times["raw"][-1], times["executor"][-1], times["ours"][-1]) > 1000:
                    slow_steps.append({"file": f"{subset}/{path.name}", "step": step,
                                       "first": ("raw", "executor", "ours")[step % 3],
                                       **{k: round(times[k][-1], 1) for k in ("raw", "raw_cpu", "executor", "ours", "ours_cpu")}})
                for k in (0, 1) if step % 2 else (1, 0):
                    x = logits.clone()
                    t0 = time.perf_counter_ns()
                    (previous_apply if k == 0 else apply_token_bitmask_)(x, masks[2])
                    times["apply_previous" if k == 0 else "apply_ours"].append((time.perf_counter_ns() - t0) / 1e3)
                steps_with_gc += gc_runs[0] > gc_before
                bits = np.unpackbits(masks[2].numpy().view(np.uint8), bitorder="little")[:vocab].astype(bool)
                if bits[eos] and (bits.sum() == 1 or rng.random() < 0.5):
                    break
                bits[eos] = False
                allowed = np.flatnonzero(bits)
                if not len(allowed):
                    break
                short = allowed[closers[allowed]]
                pool = short if len(short) and rng.random() < 0.7 else allowed
                if not matcher.accept_tokens([int(pool[rng.integers(len(pool))])]):
                    break
        print(f"[{n + 1}/{len(picked)}] {subset}/{path.name}: {len(times['raw'])} steps so far", flush=True)

    report: dict[str, Any] = {
        "what": "per-token structured-output mask time, split: llguidance's fill vs our call and application",
        "command": " ".join(["benchmarks/structured_mask_breakdown.py", *sys.argv[1:]]),
        "machine": {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(),
                    "python": platform.python_version(), "llguidance": llguidance.__version__,
                    "torch": torch.__version__, "load_average_at_end": [round(v, 2) for v in os.getloadavg()],
                    "note": "a shared 2-core VM with other jobs running (the load average above)"},
        "vocab_size": vocab, "schemas": schemas, "steps": len(times["raw"]), "steps_with_gc": steps_with_gc,
        "us_per_token": {k: stats(v) for k, v in times.items()},
        "slow_steps": slow_steps[:50],  # (steps where one way took over 1 ms: the first 50)
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    for k, v in report["us_per_token"].items():
        print(f"{k:15s} {v}")
    print(f"steps {report['steps']}, with gc {steps_with_gc}; load {report['machine']['load_average_at_end']}; "
          f"wrote {args.out}")


if __name__ == "__main__":
    main()
