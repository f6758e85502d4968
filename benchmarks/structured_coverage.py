"""How much of the real world's JSON schemas structured outputs serve: a seeded sample of JSONSchemaBench
(guidance-ai/jsonschemabench, ``data/<subset>/*.json``: schemas collected from GitHub, Kubernetes, SchemaStore …,
written by no one here), each compiled by a backend the server runs (``--backend``: llguidance, the default, or
xgrammar; its ``compile``: the request validation, the schema rewrite and the engine's compile and first mask), then
walked at random through the allowed tokens, the documents that end checked with ``jsonschema`` (the reference
validator).

Reported per subset: schemas that compile, refused (and why, grouped), crashed or over the child's limits; compile
p50/p90/max; mask time per token p50/p99 (one ``fill_bitmasks`` call per step, the whole vocabulary); random walks
that ended and how many of those produced a document the schema rejects. Compile and mask times are given twice:
wall time, and the worker's CPU time (it runs nothing else) — on a shared machine the wall time adds the time the
worker waited for a core, the CPU time is what the work costs.

The vocabulary is a GPT-2-size byte-level BPE (``--vocab``, default 50,257) trained here on the dataset's own text
(no model hub), cached under ``--cache``. Each schema runs in a worker process under a wall-clock limit
(``--timeout-s``) and a resident-memory limit (``--memory-gb``); a worker past either is killed, the schema counted
as such, and a fresh worker takes the next one.

The dataset is not committed (its license and size): fetch github:guidance-ai/jsonschemabench and give its
``data`` folder:

    .venv/bin/python benchmarks/structured_coverage.py --data /path/to/jsonschemabench/data [--per-subset 55]
    .venv/bin/python benchmarks/structured_coverage.py --data ... --backend xgrammar
    .venv/bin/python benchmarks/structured_coverage.py --data ... --repeats 5   # how far the times move run to run

Writes benchmarks/results/structured_coverage.json (structured_coverage_xgrammar.json with ``--backend xgrammar``;
the backend, the sample's file names and the environment included).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import random
import statistics
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any, get_args

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from accelkit.serve.config import StructuredOutputsBackendName  # noqa: E402  (after the path)

RESULTS = Path(__file__).resolve().parent / "results"
BACKENDS = get_args(StructuredOutputsBackendName)  # (the engines accelkit serve offers)
WALK_TOKENS = 300  # tokens per random walk at most (a walk that has not ended by then is not checked)


def sample(data: Path, per_subset: int, seed: int) -> list[tuple[str, Path]]:
    """``per_subset`` schema files of each subset folder, drawn with ``seed`` from the sorted file list."""
    rng = random.Random(seed)
    out: list[tuple[str, Path]] = []
    for subset in sorted(p for p in data.iterdir() if p.is_dir()):
        files = sorted(subset.glob("*.json"))
        out += [(subset.name, f) for f in sorted(rng.sample(files, min(per_subset, len(files))))]
    return out


def tokenizer_dir(data: Path, vocab: int, cache: Path, seed: int) -> Path:
    """A byte-level BPE of ``vocab`` tokens trained on a seeded 30 MB of the dataset's text, saved once."""
    path = cache / f"bytelevel-{vocab}-{seed}"
    if (path / "tokenizer.json").exists():
        return path
    from accelkit.serve.testing import build_bytelevel_tokenizer

    rng = random.Random(seed)
    files = sorted(data.glob("*/*.json"))
    rng.shuffle(files)
    corpus, size = [], 0
    for f in files:
        text = f.read_text(errors="replace")
        corpus += text.splitlines()
        size += len(text)
        if size > 30 << 20:
            break
    tok = build_bytelevel_tokenizer(vocab_size=vocab, corpus=corpus)
    tok.save_pretrained(path)
    return path


# ---- the worker (its own process) -------------------------------------------------------------------------------

def _make_backend(name: str, tok: Any) -> Any:
    """The structured-outputs backend ``name`` over ``tok``, as ``accelkit serve --structured-outputs-backend NAME``
    makes it."""
    from accelkit.serve.structured_backends import make_backend

    return make_backend(name, tok, len(tok), [tok.eos_token_id])


def _worker(tok_path: str, seed: int, conn: Any, backend_name: str = "llguidance") -> None:
    import numpy as np
    import torch
    from transformers import AutoTokenizer

    from accelkit.serve.sampling import StructuredOutputs

    torch.set_num_threads(1)
    tok = AutoTokenizer.from_pretrained(tok_path)
    eos = tok.eos_token_id
    backend = _make_backend(backend_name, tok)
    texts = [tok.decode([i]) for i in range(len(tok))]
    closers = np.array([t in set('"}],:0123456789tfnul') for t in texts])
    width = (len(tok) + 31) // 32
    conn.send("ready")
    while True:
        job = conn.recv()
        if job is None:
            return
        text, walk_seed = job
        result: dict[str, Any] = {}
        start, cpu_start = time.perf_counter_ns(), time.process_time_ns()  # this process runs nothing else
        try:
            grammar = backend.compile(StructuredOutputs(json=text))
        except ValueError as exc:
            result.update(status="refused", error=str(exc), compile_ms=(time.perf_counter_ns() - start) / 1e6,
                          compile_cpu_ms=(time.process_time_ns() - cpu_start) / 1e6)
            conn.send(result)
            continue
        result.update(status="compiled", compile_ms=(time.perf_counter_ns() - start) / 1e6,
                      compile_cpu_ms=(time.process_time_ns() - cpu_start) / 1e6, mask_us=[], mask_cpu_us=[], walks=[])
        schema = json.loads(text)
        rng = np.random.default_rng(walk_seed)
        bitmask = torch.zeros(1, width, dtype=torch.int32)
        for _ in range(2):
            matcher = grammar.matcher()
            ids: list[int] = []
            ended = False
            for _ in range(WALK_TOKENS):
                t0, c0 = time.perf_counter_ns(), time.process_time_ns()
                backend.fill_bitmasks([(matcher, 0)], bitmask)
                result["mask_us"].append((time.perf_counter_ns() - t0) / 1e3)
                result["mask_cpu_us"].append((time.process_time_ns() - c0) / 1e3)
                bits = np.unpackbits(bitmask.numpy().view(np.uint8), bitorder="little")[: len(tok)].astype(bool)
                if bits[eos] and (bits.sum() == 1 or rng.random() < 0.5):
                    ended = True
                    break
                bits[eos] = False
                allowed = np.flatnonzero(bits)
                if not len(allowed):
                    break
                short = allowed[closers[allowed]]
                pool = short if len(short) and rng.random() < 0.7 else allowed
                pick = int(pool[rng.integers(len(pool))])
                if not matcher.accept_tokens([pick]):
                    break
                ids.append(pick)
            walk: dict[str, Any] = {"ended": ended, "tokens": len(ids)}
            if ended:
                out = tok.decode(ids)
                walk["valid"] = _valid(schema, out)
                if walk["valid"] is False:
                    walk["output"] = out[:500]
            result["walks"].append(walk)
        conn.send(result)


def _valid(schema: Any, text: str) -> bool | None:
    """Whether ``jsonschema`` accepts the document; None when it cannot judge (the schema itself is broken for it,
    or a $ref it cannot resolve)."""
    import jsonschema

    try:
        doc = json.loads(text)
    except ValueError:
        return False
    try:
        cls = jsonschema.validators.validator_for(schema)
        return bool(cls(schema, format_checker=cls.FORMAT_CHECKER).is_valid(doc))
    except Exception:  # (a schema jsonschema cannot use is no verdict on the document)
        return None


class Worker:
    """One worker process; killed past the time or memory limit (then a fresh one is started)."""

    def __init__(self, tok_path: Path, seed: int, backend: str = "llguidance") -> None:
        ctx = mp.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(str(tok_path), seed, child, backend), daemon=True)
        self.proc.start()
        if not self.conn.poll(600) or self.conn.recv() != "ready":
            raise RuntimeError("the worker did not start")

    def run(self, text: str, walk_seed: int, timeout_s: float, memory_bytes: int) -> dict[str, Any]:
        import psutil

        self.conn.send((text, walk_seed))
        ps = psutil.Process(self.proc.pid)
        deadline = time.monotonic() + timeout_s
        while not self.conn.poll(0.02):
            if time.monotonic() > deadline:
                self.kill()
                return {"status": "timeout"}
            if ps.memory_info().rss > memory_bytes:
                self.kill()
                return {"status": "memory"}
            if not self.proc.is_alive():
                return {"status": "crashed"}
        return dict(self.conn.recv())

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join()


def _cpu_details() -> dict[str, Any]:
    """The CPU as Linux's /proc/cpuinfo names it (empty elsewhere): model, clock, cache and the vector extensions
    of note. The VMs this runs on change CPUs from day to day, and "AMD EPYC" alone names several generations whose
    mask times differ by a fifth."""
    try:
        with open("/proc/cpuinfo") as f:
            fields = dict(line.split(":", 1) for line in f.read().split("\n\n", 1)[0].splitlines() if ":" in line)
    except OSError:
        return {}
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    flags = set(fields.get("flags", "").split())
    return {"cpu_model": fields.get("model name"), "cpu_mhz": fields.get("cpu MHz"),
            "cpu_cache": fields.get("cache size"),
            "cpu_isa": [f for f in ("avx2", "avx512f", "avx512_bf16", "amx_tile") if f in flags]}


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 3)


def _reason(error: str) -> str:
    """A refusal grouped: the keyword it names, or its first words."""
    if "keyword " in error:
        return "keyword " + error.split("keyword ", 1)[1].split(" ")[0]
    return " ".join(error.split(": ", 1)[-1].split()[:6])


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    compiled = [r for r in rows if r["status"] == "compiled"]
    compile_ms = [r["compile_ms"] for r in rows if "compile_ms" in r]
    compile_cpu_ms = [r["compile_cpu_ms"] for r in rows if "compile_cpu_ms" in r]
    mask_us = [m for r in compiled for m in r["mask_us"]]
    mask_cpu_us = [m for r in compiled for m in r["mask_cpu_us"]]
    walks = [w for r in compiled for w in r["walks"]]
    ended = [w for w in walks if w["ended"]]
    return {
        "schemas": len(rows),
        "compiled": len(compiled),
        "compile_rate": round(len(compiled) / len(rows), 3) if rows else None,
        "status": dict(Counter(r["status"] for r in rows)),
        "refusals": dict(Counter(_reason(r["error"]) for r in rows if r["status"] == "refused").most_common(8)),
        "compile_ms": {"p50": _pct(compile_ms, 0.5), "p90": _pct(compile_ms, 0.9),
                       "max": round(max(compile_ms), 3) if compile_ms else None},
        "mask_us_per_token": {"p50": _pct(mask_us, 0.5), "p99": _pct(mask_us, 0.99), "n": len(mask_us)},
        # the worker's CPU time (all its threads): what the work costs, whatever else the machine runs — wall time
        # on a shared machine adds the time the worker waited for a core
        "compile_cpu_ms": {"p50": _pct(compile_cpu_ms, 0.5), "p90": _pct(compile_cpu_ms, 0.9),
                           "max": round(max(compile_cpu_ms), 3) if compile_cpu_ms else None},
        "mask_cpu_us_per_token": {"p50": _pct(mask_cpu_us, 0.5), "p99": _pct(mask_cpu_us, 0.99)},
        "walks": {"total": len(walks), "ended": len(ended), "valid": sum(w.get("valid") is True for w in ended),
                  "invalid": sum(w.get("valid") is False for w in ended),
                  "unjudged": sum(w.get("valid") is None for w in ended)},
    }


def _run_sample(picked: list[tuple[str, Path]], tok_path: Path, args: argparse.Namespace,
                run: int) -> list[dict[str, Any]]:
    """Every picked schema compiled and walked once, in a fresh worker (a new one after any killed)."""
    worker = Worker(tok_path, args.seed, args.backend)
    rows: list[dict[str, Any]] = []
    for i, (subset, path) in enumerate(picked):
        result = worker.run(path.read_text(errors="replace"), args.seed + i, args.timeout_s, int(args.memory_gb * 2**30))
        if result["status"] in ("timeout", "memory", "crashed"):
            worker = Worker(tok_path, args.seed, args.backend)
        result.update(subset=subset, file=path.name)
        rows.append(result)
        print(f"[run {run + 1}/{args.repeats}: {i + 1}/{len(picked)}] {subset}/{path.name}: {result['status']} "
              f"{result.get('compile_ms', float('nan')):.1f} ms {result.get('error', '')[:100]}", file=sys.stderr,
              flush=True)
    worker.conn.send(None)
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, required=True, help="jsonschemabench's data/ folder")
    ap.add_argument("--per-subset", type=int, default=55)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--vocab", type=int, default=50_257)
    ap.add_argument("--timeout-s", type=float, default=30.0)
    ap.add_argument("--memory-gb", type=float, default=4.0)
    ap.add_argument("--cache", type=Path, default=Path("/tmp/accelkit-structured-coverage"))
    ap.add_argument("--tokenizer", type=Path, help="a Hugging Face tokenizer folder to use instead of the BPE trained "
                    "on the data (e.g. GPT-2's, made by benchmarks/gpt2_tokenizer.py)")
    ap.add_argument("--backend", choices=BACKENDS, default="llguidance",
                    help="the structured-outputs backend measured (accelkit serve --structured-outputs-backend)")
    ap.add_argument("--repeats", type=int, default=1,
                    help="run the whole sample this many times, each in fresh workers (fresh compiles, every state "
                    "reached for the first time again): the report is the first run's, with each run's compile and "
                    "mask figures under 'runs' to show how far they move on this machine")
    ap.add_argument("--out", type=Path, help="default: benchmarks/results/structured_coverage.json, "
                    "structured_coverage_xgrammar.json with --backend xgrammar")
    args = ap.parse_args()
    out = args.out or RESULTS / ("structured_coverage.json" if args.backend == "llguidance"
                                 else f"structured_coverage_{args.backend}.json")

    import importlib.metadata

    load_before = os.getloadavg()
    picked = sample(args.data, args.per_subset, args.seed)
    tok_path = args.tokenizer or tokenizer_dir(args.data, args.vocab, args.cache, args.seed)
    runs = [_run_sample(picked, tok_path, args, run) for run in range(args.repeats)]
    rows = runs[0]

    with open(tok_path / "tokenizer.json") as f:
        vocab_size = len(json.load(f)["model"]["vocab"])
    by_subset = {s: summarize([r for r in rows if r["subset"] == s]) for s in sorted({r["subset"] for r in rows})}
    report = {
        "what": f"JSONSchemaBench coverage of accelkit's structured outputs ({args.backend} backend)",
        "backend": args.backend,
        "command": " ".join(["benchmarks/structured_coverage.py", *sys.argv[1:]]),
        "machine": {"cpu": platform.processor() or platform.machine(), **_cpu_details(),
                    "python": platform.python_version(),
                    args.backend: importlib.metadata.version(args.backend), "cpus": os.cpu_count(),
                    "loadavg_before": [round(x, 2) for x in load_before],
                    "loadavg_after": [round(x, 2) for x in os.getloadavg()],
                    "note": "load averages above the CPU count mean other jobs shared the machine: read the CPU times"},
        "sample": {"per_subset": args.per_subset, "seed": args.seed, "files": [f"{s}/{p.name}" for s, p in picked]},
        "vocab_size": vocab_size,
        "tokenizer": str(args.tokenizer) if args.tokenizer else f"byte-level BPE of {args.vocab:,} tokens trained on "
                     f"the data (seed {args.seed})",
        "limits": {"timeout_s": args.timeout_s, "memory_gb": args.memory_gb, "walk_tokens": WALK_TOKENS},
        "overall": summarize(rows),
        "runs": [{k: summary[k] for k in ("compile_rate", "compile_ms", "compile_cpu_ms", "mask_us_per_token",
                                          "mask_cpu_us_per_token", "walks")}
                 for summary in map(summarize, runs)],
        "by_subset": by_subset,
        "invalid_walks": [{"file": f"{r['subset']}/{r['file']}", "output": w["output"]}
                          for r in rows if r["status"] == "compiled" for w in r["walks"] if w.get("valid") is False],
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    overall = report["overall"]
    print(json.dumps({k: overall[k] for k in ("compile_rate", "status", "compile_ms", "compile_cpu_ms",
                                              "mask_us_per_token", "mask_cpu_us_per_token", "walks")}))
    print(f"median compile {statistics.median([r['compile_ms'] for r in rows if 'compile_ms' in r]):.2f} ms; "
          f"wrote {out}")


if __name__ == "__main__":
    main()
