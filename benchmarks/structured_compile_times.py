"""How long each hostile structured-output spec of issue #28 takes to compile (or be refused) on a backend, at a real
vocabulary: the specs of :data:`accelkit.serve.testing.HOSTILE_SPECS` and the 2–9 KB all-optional schemas of
:func:`~accelkit.serve.testing.hostile_request_fields`, each compiled by the backend's own ``compile`` (what the
server's compile thread runs, without the server's wall-clock limit: the point is how long a compile holds its
thread) in a child process of its own, killed past ``--timeout-s``.

xgrammar has no compile fuel: a spec that takes longer than the server's 5 s limit is answered with a 400, and its
compile keeps running to the end on one of the server's compile workers. This gives those times.

    .venv/bin/python benchmarks/gpt2_tokenizer.py ... /tmp/gpt2-tokenizer     # GPT-2's 50,257 tokens (see there)
    .venv/bin/python benchmarks/structured_compile_times.py --tokenizer /tmp/gpt2-tokenizer --backend xgrammar

Prints one line per spec (wall and CPU seconds: the CPU time counts every thread of the engine's compile) and the
whole as JSON on the last line (``--out`` writes it to a file too).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any, get_args

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from accelkit.serve.config import StructuredOutputsBackendName

BACKENDS = get_args(StructuredOutputsBackendName)  # (the engines accelkit serve offers)


def specs() -> dict[str, dict[str, Any]]:
    """name → StructuredOutputs fields: the hostile specs, then the all-optional schemas (by their size)."""
    from accelkit.serve.testing import HOSTILE_SPECS, hostile_request_fields

    out = dict(HOSTILE_SPECS)
    for fields in hostile_request_fields():
        if "response_format" in fields:
            schema = fields["response_format"]["json_schema"]["schema"]
            out[f"all-optional-{len(json.dumps(schema)) / 1000:.1f}KB"] = {"json": schema}
    return out


def _compile(backend_name: str, tok_path: str, name: str, conn: Any) -> None:
    from transformers import AutoTokenizer

    from accelkit.serve.sampling import StructuredOutputs
    from benchmarks.structured_coverage import _make_backend

    backend = _make_backend(backend_name, AutoTokenizer.from_pretrained(tok_path))
    spec = StructuredOutputs(**specs()[name])  # (built here: a 450-deep schema is past pickle's recursion limit)
    start, cpu = time.perf_counter(), time.process_time()
    try:
        grammar = backend.compile(spec)
        result: dict[str, Any] = {"status": "compiled", "num_bytes": grammar.num_bytes}
    except ValueError as exc:
        result = {"status": "refused", "error": str(exc)[:160]}
    result.update(wall_s=round(time.perf_counter() - start, 3), cpu_s=round(time.process_time() - cpu, 3))
    conn.send(result)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", type=Path, required=True, help="a Hugging Face tokenizer folder")
    ap.add_argument("--backend", choices=BACKENDS, default="xgrammar")
    ap.add_argument("--timeout-s", type=float, default=120.0)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    ctx = mp.get_context("spawn")
    load_before = os.getloadavg()
    rows: dict[str, Any] = {}
    for name in specs():
        parent, child = ctx.Pipe()
        proc = ctx.Process(target=_compile, args=(args.backend, str(args.tokenizer), name, child), daemon=True)
        proc.start()
        rows[name] = parent.recv() if parent.poll(args.timeout_s) else {"status": "timeout", "wall_s": args.timeout_s}
        proc.kill()
        proc.join()
        print(f"{name:26s} {rows[name]['status']:9s} {rows[name].get('wall_s', 0):8.2f} s wall "
              f"{rows[name].get('cpu_s', float('nan')):8.2f} s CPU  {rows[name].get('error', '')[:90]}", flush=True)
    report = {"backend": args.backend, "tokenizer": str(args.tokenizer),
              "command": " ".join(["benchmarks/structured_compile_times.py", *sys.argv[1:]]),
              "machine": {"cpu": platform.processor() or platform.machine(), "cpus": os.cpu_count(),
                          "loadavg_before": [round(x, 2) for x in load_before],
                          "loadavg_after": [round(x, 2) for x in os.getloadavg()]},
              "specs": rows}
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps(report))


if __name__ == "__main__":
    main()
