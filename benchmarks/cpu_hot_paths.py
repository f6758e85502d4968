"""Three pieces of a CPU decode step, each beside what it replaced, at the shapes of ``benchmarks/vs_vllm.py``'s batch-64
decode (4 query heads over 2 KV heads, head_dim 64, blocks of 16, contexts of 102-581 tokens, vocabulary 8,192 and
32,000):

* attention for one layer: the ``cpu`` backend's compiled kernel reading K/V in place, against the ``sdpa``
  backend's path (the decodes grouped by length, each group's blocks gathered — into reused scratch, as it now
  does, and into fresh tensors, as it did — then SDPA with the padding mask);
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
import json
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from accelkit.hardware.detect import environment
from accelkit.serve.attention.cpu import decode_kernel
from accelkit.serve.sampler import _exponential_, greedy_ids, inverse_transform

OUT = Path(__file__).resolve().parent / "results" / "cpu_hot_paths.json"
BATCH, HEADS, KV_HEADS, HEAD_DIM, BLOCK = 64, 4, 2, 64, 16


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


def _groups(lens: list[int]) -> list[tuple[int, int]]:
    """The sdpa backend's grouping of length-sorted decodes: cut where padding would pass 25% (or at 4+ rows)."""
    groups: list[list[int]] = []
    for i, n in enumerate(lens):
        if groups and ((len(groups[-1]) + 1) * n <= 1.25 * (sum(lens[j] for j in groups[-1]) + n) or len(groups[-1]) < 4):
            groups[-1].append(i)
        else:
            groups.append([i])
    return [(g[0], g[-1] + 1) for g in groups]


def attention(repeats: int) -> dict[str, object]:
    kernel, problem = decode_kernel()
    if kernel is None:
        raise SystemExit(f"the CPU decode kernel did not build: {problem}")
    gen = torch.Generator().manual_seed(0)
    lens = sorted((torch.randint(32, 512, (BATCH,), generator=gen) + 70).tolist())
    width = -(-max(lens) // BLOCK)
    num_blocks = BATCH * width + 8
    kc, vc = (torch.randn(num_blocks, BLOCK, KV_HEADS, HEAD_DIM, generator=gen) for _ in range(2))
    tables = torch.randperm(num_blocks, generator=gen)[: BATCH * width].view(BATCH, width).contiguous()
    q = torch.randn(BATCH, HEADS, HEAD_DIM, generator=gen)
    lens_t = torch.tensor(lens)
    groups = _groups(lens)
    rep = HEADS // KV_HEADS
    scratch = torch.empty(2, BATCH * width * BLOCK * KV_HEADS * HEAD_DIM)

    def sdpa(reuse: bool) -> torch.Tensor:
        outs = []
        for s, e in groups:
            nb = -(-lens[e - 1] // BLOCK)
            ids = tables[s:e, :nb].reshape(-1)
            shape = (e - s, nb * BLOCK, KV_HEADS, HEAD_DIM)
            if reuse:
                n = ids.numel() * BLOCK * KV_HEADS * HEAD_DIM
                k = torch.index_select(kc, 0, ids, out=scratch[0, :n].view(-1, BLOCK, KV_HEADS, HEAD_DIM)).view(shape)
                v = torch.index_select(vc, 0, ids, out=scratch[1, :n].view(-1, BLOCK, KV_HEADS, HEAD_DIM)).view(shape)
            else:
                k, v = kc.index_select(0, ids).view(shape), vc.index_select(0, ids).view(shape)
            attend = (torch.arange(nb * BLOCK)[None] < lens_t[s:e, None])[:, None, None, :]
            mask = torch.zeros(attend.shape).masked_fill_(~attend, float("-inf"))
            qg = q[s:e].view(e - s, KV_HEADS, rep, HEAD_DIM)
            outs.append(F.scaled_dot_product_attention(qg, k.transpose(1, 2), v.transpose(1, 2), attn_mask=mask)
                        .reshape(e - s, -1))
        return torch.cat(outs)

    tables_np, lens_np = tables.numpy().astype(np.int64), np.asarray(lens, dtype=np.int64)

    def cpu() -> torch.Tensor:
        out = torch.empty(BATCH, HEADS * HEAD_DIM)
        kernel(q.data_ptr(), q.stride(0), kc.data_ptr(), vc.data_ptr(), tables_np.ctypes.data, width, lens_np.ctypes.data,
               BATCH, HEADS, KV_HEADS, HEAD_DIM, BLOCK, HEAD_DIM**-0.5, 0, out.data_ptr(), torch.get_num_threads())
        return out

    max_err = float((cpu() - sdpa(True)).abs().max())
    times = _time({"cpu_kernel": cpu, "gather_scratch_sdpa": lambda: sdpa(True),
                   "gather_fresh_sdpa": lambda: sdpa(False)}, repeats)
    return {"what": "one layer's decode attention, batch 64", "context_tokens": sum(lens),
            "groups_sdpa": len(groups), "max_abs_difference": max_err, **times}


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
