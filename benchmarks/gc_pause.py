"""How long one full garbage collection stops a server's process, with its startup heap walked and frozen
(``accelkit.serve.heap.frozen_heap``, which ``accelkit serve`` enters once it is built).

The process builds what ``accelkit serve`` builds before it takes requests — torch, transformers, FastAPI, the
engine and its loop thread, the app — with ``build_server``, for the tiny byte-level test model (or ``--model``),
then times ``--repeats`` full collections (``gc.collect()``, which holds the interpreter lock: the engine's step and
the event loop wait for it) as the heap is, then as many inside ``frozen_heap``. Python starts a full collection by
itself whenever enough objects have outlived two younger ones, so the first figure is a pause a busy server takes
now and then.

    .venv/bin/python benchmarks/gc_pause.py [--model DIR] [--out benchmarks/results/gc_pause.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
OUT = ROOT / "benchmarks" / "results" / "gc_pause.json"


def collections_ms(repeats: int) -> list[float]:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        gc.collect()
        times.append((time.perf_counter() - start) * 1e3)
    return times


def summary(times: list[float]) -> dict[str, float]:
    return {"median": statistics.median(times), "min": min(times), "max": max(times)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", type=Path, help="a model directory (default: the tiny byte-level test model)")
    parser.add_argument("--repeats", type=int, default=7, help="full collections timed each way")
    parser.add_argument("--out", type=Path, default=OUT, help=f"the result JSON (default: {OUT.relative_to(ROOT)})")
    args = parser.parse_args()
    if args.repeats < 1:
        parser.error(f"--repeats {args.repeats}: give 1 or more")

    from accelkit.hardware.detect import environment
    from accelkit.serve.config import EngineConfig, ServerConfig
    from accelkit.serve.heap import frozen_heap
    from accelkit.serve.server import build_server
    from accelkit.serve.testing import save_bytelevel_model

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model or save_bytelevel_model(Path(tmp) / "m", seed=2)
        _, state = build_server(EngineConfig(model=str(model), kv_cache_memory_bytes=8 << 20, max_model_len=256),
                                ServerConfig(served_model_name="m"))
        try:
            tracked = len(gc.get_objects())
            before = collections_ms(args.repeats)
            with frozen_heap() as frozen:
                after = collections_ms(args.repeats)
        finally:
            state.loop.stop(timeout=10)
            state.engine.shutdown()
    doc = {
        "benchmark": "gc_pause",
        "command": "python benchmarks/gc_pause.py " + " ".join(sys.argv[1:]),
        "model": str(args.model) if args.model else "save_bytelevel_model(seed=2): tiny Llama, 512-token BPE",
        "objects_tracked": tracked,
        "objects_frozen": frozen,
        "full_collection_ms": {"heap_as_built": summary(before), "startup_heap_frozen": summary(after)},
        "runs_ms": {"heap_as_built": before, "startup_heap_frozen": after},
        "load_average": [round(v, 2) for v in os.getloadavg()],
        "environment": environment(with_torch=True),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print(f"full collection: {summary(before)['median']:.1f} ms over {tracked:,} objects as built, "
          f"{summary(after)['median']:.2f} ms with {frozen:,} frozen; wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
