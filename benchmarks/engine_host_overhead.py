"""What the engine's host does per step, with the model forward taken out.

On a fast accelerator a decode step's GPU work is 1–2 ms (the issue's 1B Llama at batch 128, ~1K context,
on an H200), so everything the host does around it — schedule → prepare → [GPU] → sample sync → postprocess
→ deliver — must be a small fraction of that for the step to stay GPU-bound. This benchmark measures that
host work on any CPU: it drives the real ``LLMEngine`` (scheduler, block manager, sequences, detokenizer,
outputs, the runner's ``prepare`` with the Triton backend's metadata and the decode-graph bucket padding a
CUDA run uses, the sampler's argmax + host read) with **only ``ModelRunner.forward`` replaced**: a stand-in
that returns rows of a precomputed random logits table (no model computation, no KV writes) so the sampled
tokens are deterministic and varied. Everything else is the engine's own code.

Measured per decode step at batch 1/32/128/256 (prompts of 960–1087 tokens, so ~1K context), per phase
(wall and this thread's CPU time), for two paths:

- ``offline``: ``LLM.generate`` (every request added up front, outputs collected at the end);
- ``streaming``: ``EngineLoop`` as the HTTP server drives it — requests added with a callback that does
  what the server's does (``MetricsBridge.on_output`` for the Prometheus metrics, then the hand-over to an
  asyncio loop running in another thread that consumes the outputs: the server's ``Mailbox`` where the tree
  has one, else ``call_soon_threadsafe`` per output as the server did before it), and ``on_step`` feeding
  ``MetricsBridge.on_step``;
- ``offline-overlap`` / ``streaming-overlap``: the same with ``overlap_postprocess=True`` (the engine's default
  on CUDA), where a step's postprocessing runs inside the next step, between the sampler's launch and its
  host read. ``host_us_outside_device_window`` is the host time a device step cannot hide: everything but
  that postprocessing (all of it without overlap). What the device then waits for per step.

``--compare REF`` runs the same measurement on the ``accelkit`` package of git revision REF (exported with
``git archive``) in interleaved worker processes (REF, this tree, this tree, REF, ...) and reports the ratio
per batch size. Per-step figures are medians over the measured steady-state decode steps.

    .venv/bin/python benchmarks/engine_host_overhead.py [--compare 74498db] [--repeats 2] [--steps 48]

Writes benchmarks/results/engine_host_overhead.json (with the environment).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
OUT = Path(__file__).resolve().parent / "results" / "engine_host_overhead.json"
BATCH_SIZES = (1, 32, 128, 256)
PATHS = ("offline", "streaming", "offline-overlap", "streaming-overlap")
PROMPT_RANGE = (960, 1088)  # ~1K context
MAX_NUM_BATCHED_TOKENS = 8192  # the engine settings
MAX_NUM_SEQS = 256
LOGITS_ROWS = 4096  # rows of the stand-in logits table, walked through step by step
# phases, in step order; a phase missing from a revision's engine is simply absent from its record
# deliver_in_window: delivery from inside a step (overlapped postprocessing hands its outputs over there)
PHASES = ("schedule", "prepare", "forward_standin", "sample", "update", "postprocess", "outputs", "deliver_in_window",
          "deliver", "on_step")


# ---- the worker: one process, one accelkit tree ------------------------------------------------------
class Recorder:
    """Per-step phase timers: wall (perf_counter) and this thread's CPU time (thread_time) per phase.

    ``engine.step`` opens a record; the phase wrappers add to the latest one (deliver and on_step run after
    the step that produced their outputs, so they land in its record). Nested phases (``outputs`` inside
    ``postprocess``) are subtracted from their parent when reported."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []
        self.active = False
        self.in_step = False

    def _add(self, name: str, wall: float, cpu: float) -> None:
        if name == "deliver" and self.in_step:
            name = "deliver_in_window"
        if self.active and self.records:
            rec = self.records[-1]
            w, c = rec["phases"].get(name, (0.0, 0.0))
            rec["phases"][name] = (w + wall, c + cpu)

    def wrap(self, obj: Any, attr: str, name: str) -> bool:
        fn = getattr(obj, attr, None)
        if fn is None:
            return False

        def timed(*args: Any, **kwargs: Any) -> Any:
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                self._add(name, time.perf_counter() - w0, time.thread_time() - c0)

        setattr(obj, attr, timed)
        return True

    def wrap_step(self, engine: Any) -> None:
        fn = engine.step

        def step(*args: Any, **kwargs: Any) -> Any:
            if self.active:
                self.records.append({"phases": {}, "num_seqs": 0, "num_tokens": 0})
            w0, c0 = time.perf_counter(), time.thread_time()
            self.in_step = True
            try:
                out = fn(*args, **kwargs)
            finally:
                self.in_step = False
            if self.active:
                rec = self.records[-1]
                rec["step"] = (time.perf_counter() - w0, time.thread_time() - c0)
                rec["num_outputs"] = len(out)
            return out

        engine.step = step

    def wrap_schedule(self, scheduler: Any) -> None:
        fn = scheduler.schedule

        def schedule() -> Any:
            w0, c0 = time.perf_counter(), time.thread_time()
            batch = fn()
            self._add("schedule", time.perf_counter() - w0, time.thread_time() - c0)
            if self.active and self.records:
                self.records[-1]["num_seqs"] = len(batch.seqs)
                self.records[-1]["num_tokens"] = sum(batch.num_tokens)
            return batch

        scheduler.schedule = schedule


def install_standin_forward(runner: Any, vocab: int) -> None:
    """Replace the model forward: logits rows from a fixed random table, advancing each step (no compute)."""
    import torch

    gen = torch.Generator().manual_seed(0)
    table = torch.randn(LOGITS_ROWS + MAX_NUM_SEQS, vocab, generator=gen)
    state = {"offset": 0}

    def forward(step: Any) -> Any:
        n = len(step.sample_batch_rows)
        if n == 0:
            return None
        offset = state["offset"]
        state["offset"] = (offset + 1) % LOGITS_ROWS
        return table[offset : offset + n]

    runner.forward = forward


def build_llm(model_dir: str, kv_bytes: int, *, overlap: bool) -> Any:
    from accelkit.serve import LLM

    extra = {"overlap_postprocess": True} if overlap else {}  # (a tree before it has no such field)
    llm = LLM(model_dir, attention_backend="triton", max_num_seqs=MAX_NUM_SEQS,
              max_num_batched_tokens=MAX_NUM_BATCHED_TOKENS, kv_cache_memory_bytes=kv_bytes, max_model_len=2048,
              **extra)
    # the decode path a CUDA run takes: batch-size buckets, padded rows, the fixed layout (run eagerly here;
    # the forward is the stand-in anyway)
    llm.engine.runner.enable_decode_graphs(capture=False)
    install_standin_forward(llm.engine.runner, llm.engine.model_args.vocab_size)
    return llm


def make_prompts(batch: int, vocab: int, seed: int, length: int | None = None) -> list[list[int]]:
    """``batch`` random prompts: ``length`` tokens each, or (None) each of a length drawn from PROMPT_RANGE."""
    import random

    rng = random.Random(seed)
    return [[rng.randrange(4, vocab) for _ in range(length or rng.randrange(*PROMPT_RANGE))] for _ in range(batch)]


def instrument(llm: Any, rec: Recorder, *, forward: str = "forward_standin", time_read: bool = False) -> None:
    """Time the engine's phases in ``rec``; the runner's forward under the name ``forward``. The sampler's host read
    is the step's sync, counted in "other" — or, with ``time_read`` (a CPU forward is synchronous: the read is a
    copy, not a wait), in "sample"."""
    engine = llm.engine
    rec.wrap_step(engine)
    rec.wrap_schedule(engine.scheduler)
    rec.wrap(engine.runner, "prepare", "prepare")
    rec.wrap(engine.runner, "forward", forward)
    if not rec.wrap(engine.runner.sampler, "launch", "sample"):
        rec.wrap(engine.runner, "sample", "sample")  # a tree before the launch/read split
    if time_read:
        from accelkit.serve.sampler import Sampler

        read = Sampler.read  # called on the class (a static method): time it there

        def timed_read(pending: Any) -> Any:
            w0, c0 = time.perf_counter(), time.thread_time()
            try:
                return read(pending)
            finally:
                rec._add("sample", time.perf_counter() - w0, time.thread_time() - c0)

        Sampler.read = staticmethod(timed_read)  # type: ignore[method-assign]
    rec.wrap(engine.scheduler, "update", "update")
    # the output processor (a tree before it had these as the engine's own methods)
    processor = getattr(engine, "output_processor", None)
    if processor is None or not rec.wrap(processor, "process", "postprocess"):
        rec.wrap(engine, "_postprocess", "postprocess")
    rec.wrap(processor if processor is not None else engine, "_output", "outputs")


def run_offline(llm: Any, batch: int, max_tokens: int, rec: Recorder, params: Any = None,
                prompt_tokens: int | None = None) -> dict[str, Any]:
    """``LLM.generate`` of ``batch`` prompts (``prompt_tokens`` long, or PROMPT_RANGE), ``params`` (default: greedy,
    EOS ignored), timed."""
    from accelkit.serve import SamplingParams

    prompts = make_prompts(batch, llm.engine.model_args.vocab_size, seed=batch, length=prompt_tokens)
    params = params or SamplingParams.greedy(max_tokens, ignore_eos=True)
    rec.active = True
    w0, c0 = time.perf_counter(), time.thread_time()
    outs = llm.generate(prompts, params)
    wall, cpu = time.perf_counter() - w0, time.thread_time() - c0
    rec.active = False
    assert all(len(o.token_ids) == max_tokens for o in outs)
    return {"wall_s": wall, "cpu_s": cpu, "num_output_tokens": sum(len(o.token_ids) for o in outs),
            "text_chars": sum(len(o.text) for o in outs)}


def run_streaming(llm: Any, batch: int, max_tokens: int, rec: Recorder, params: Any = None,
                  prompt_tokens: int | None = None, loop: Any = None) -> dict[str, Any]:
    """EngineLoop with the server's per-output work: metrics bridge + the hand-over into asyncio. ``params`` and
    ``prompt_tokens`` as :func:`run_offline`'s. ``loop``: a running EngineLoop of ``llm.engine`` (made by
    ``EngineLoop.build``, as the server makes it: left running); None: a new ``EngineLoop(llm.engine)`` on an engine
    built on this thread, started and stopped here."""
    from prometheus_client import CollectorRegistry

    from accelkit.monitor.serving import ServingMetrics
    from accelkit.serve import EngineLoop, SamplingParams
    from accelkit.serve.server.state import MetricsBridge

    bridge = MetricsBridge(ServingMetrics(CollectorRegistry()), "bench")
    prompts = make_prompts(batch, llm.engine.model_args.vocab_size, seed=batch, length=prompt_tokens)
    params = params or SamplingParams.greedy(max_tokens, ignore_eos=True)
    aloop = asyncio.new_event_loop()
    queue: asyncio.Queue[Any] = asyncio.Queue()
    counts = {"outputs": 0, "finished": 0, "chars": 0}
    done = threading.Event()

    async def consume() -> None:
        while counts["finished"] < batch:
            out = await queue.get()
            counts["outputs"] += 1
            counts["chars"] += len(out.new_text)
            counts["finished"] += out.finished
        done.set()

    thread = threading.Thread(target=aloop.run_until_complete, args=(consume(),), daemon=True)
    thread.start()

    own_loop = loop is None
    if loop is None:
        loop = EngineLoop(llm.engine)
    loop.on_step = bridge.on_step
    import accelkit.serve.server.state as server_state

    # the server's delivery in this tree: its Mailbox (one event-loop wake-up per step) where it has one; a
    # revision before the mailbox did one call_soon_threadsafe per output
    mailbox_cls: Any = getattr(server_state, "Mailbox", None)
    if mailbox_cls is not None:
        box = mailbox_cls(aloop)
        loop.add_flush_hook(box.flush)

        def callback(out: Any) -> None:  # what the server's sink does, on the engine thread
            bridge.on_output(out)
            box.put(queue, out)
    else:
        def callback(out: Any) -> None:
            bridge.on_output(out)
            aloop.call_soon_threadsafe(queue.put_nowait, out)

    rec.wrap(loop, "_deliver", "deliver")
    rec.wrap(loop, "_deliver_all", "deliver")
    rec.wrap(loop, "on_step", "on_step")
    rec.active = True
    w0 = time.perf_counter()
    if own_loop:
        loop.start()
    for p in prompts:
        loop.add_request(p, params, callback=callback)
    assert done.wait(1800), "the streaming run did not finish"
    wall = time.perf_counter() - w0
    if own_loop:
        loop.stop()
    elif mailbox_cls is not None:
        loop.remove_flush_hook(box.flush)
    rec.active = False
    thread.join(10)
    return {"wall_s": wall, "num_outputs": counts["outputs"], "text_chars": counts["chars"]}


def summarize(records: list[dict[str, Any]], batch: int, skip: int, steps: int, *, overlap: bool) -> dict[str, Any]:
    """Medians per phase over steady-state decode steps (all ``batch`` sequences, one token each)."""
    decode = [r for r in records if "step" in r and r["num_seqs"] == batch and r["num_tokens"] == batch]
    chosen = decode[skip : skip + steps]
    if not chosen:
        raise RuntimeError(f"no steady-state decode step at batch {batch} ({len(records)} steps recorded)")
    out: dict[str, Any] = {"num_steps": len(chosen), "num_decode_steps_seen": len(decode), "phases_us": {}}
    for i, kind in enumerate(("wall", "cpu")):
        per_phase: dict[str, list[float]] = defaultdict(list)
        totals, outside = [], []
        for r in chosen:
            ph = {k: v[i] for k, v in r["phases"].items()}
            if "outputs" in ph and "postprocess" in ph:  # nested: report postprocess without output building
                ph["postprocess"] = max(0.0, ph["postprocess"] - ph["outputs"])
            step = r["step"][i]
            inner = sum(v for k, v in ph.items() if k not in ("deliver", "on_step"))
            ph["other"] = max(0.0, step - inner)  # inbox, isolation wrapper, glue
            for k, v in ph.items():
                per_phase[k].append(v)
            total = step + ph.get("deliver", 0.0) + ph.get("on_step", 0.0)
            totals.append(total - ph.get("forward_standin", 0.0))  # the forward is excluded
            # with overlap, postprocessing runs between the sampler's launch and its read: a device step at
            # least that long hides it; everything else is host time the device waits for
            hidden = ph.get("postprocess", 0.0) + ph.get("outputs", 0.0) + ph.get("deliver_in_window", 0.0) if overlap else 0.0
            outside.append(totals[-1] - hidden)
        out["phases_us"][kind] = {k: round(statistics.median(v) * 1e6, 1) for k, v in per_phase.items()}
        out[f"host_us_per_step_{kind}"] = round(statistics.median(totals) * 1e6, 1)
        out[f"host_us_per_step_{kind}_p10_p90"] = [round(v * 1e6, 1) for v in _quantiles(totals)]
        out[f"host_us_outside_device_window_{kind}"] = round(statistics.median(outside) * 1e6, 1)
    return out


def _quantiles(values: list[float]) -> tuple[float, float]:
    if len(values) < 2:
        return values[0], values[0]
    q = statistics.quantiles(values, n=10)
    return q[0], q[-1]


def worker(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(1)
    result: dict[str, Any] = {"cells": {}}
    for batch in args.batch_sizes:
        for path in args.paths:
            max_tokens = -(-batch * PROMPT_RANGE[1] // MAX_NUM_BATCHED_TOKENS) + args.skip + args.steps + 16
            kv_bytes = 4 * 2**20 + batch * (PROMPT_RANGE[1] + max_tokens + 32) * 512  # tiny-llama fp32: 512 B/token
            overlap = path.endswith("-overlap")
            try:
                llm = build_llm(args.model_dir, kv_bytes, overlap=overlap)
            except TypeError:  # EngineConfig without overlap_postprocess: a tree before it
                print(f"  [{args.label}] {path}: this tree cannot overlap postprocessing; skipped", file=sys.stderr)
                continue
            rec = Recorder()
            instrument(llm, rec)
            run = run_offline if path.startswith("offline") else run_streaming
            # a short warm-up run of the same path (first-call costs: numpy views, layouts, imports)
            run(llm, min(batch, 8), 8, Recorder())
            rec.records.clear()
            whole = run(llm, batch, max_tokens, rec)
            cell = summarize(rec.records, batch, args.skip, args.steps, overlap=overlap)
            cell.update(whole)
            cell["max_tokens"] = max_tokens
            result["cells"][f"{path}/{batch}"] = cell
            print(f"  [{args.label}] {path:17s} batch {batch:3d}: host {cell['host_us_per_step_cpu']:8.1f} µs/step (cpu), "
                  f"{cell['host_us_per_step_wall']:8.1f} µs (wall), outside the device window "
                  f"{cell['host_us_outside_device_window_wall']:8.1f} µs (wall)", file=sys.stderr, flush=True)
            del llm
    Path(args.json_out).write_text(json.dumps(result))


# ---- the orchestrator ----------------------------------------------------------------------------------
def export_revision(ref: str, dest: Path) -> str:
    """``accelkit`` of git revision ``ref`` under ``dest``; returns the commit."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", ref], check=True, capture_output=True,
                            text=True).stdout.strip()
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "accelkit"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return commit


def run_worker(tree: Path, label: str, model_dir: Path, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "TRITON_INTERPRET": "1", "OMP_NUM_THREADS": "1",
           "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--model-dir", str(model_dir),
           "--json-out", str(out), "--label", label, "--skip", str(args.skip), "--steps", str(args.steps),
           "--batch-sizes", *map(str, args.batch_sizes), "--paths", *args.paths]
    subprocess.run(cmd, check=True, env=env, cwd=str(tree))
    return json.loads(out.read_text())


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per cell: the median over repeats of each figure (repeats are whole worker runs)."""
    cells: dict[str, Any] = {}
    for key in runs[0]["cells"]:
        items = [r["cells"][key] for r in runs if key in r["cells"]]
        merged: dict[str, Any] = {"repeats": len(items)}
        for kind in ("wall", "cpu"):
            merged[f"host_us_per_step_{kind}"] = round(statistics.median(i[f"host_us_per_step_{kind}"] for i in items), 1)
            merged[f"host_us_per_step_{kind}_each_repeat"] = [i[f"host_us_per_step_{kind}"] for i in items]
            outside = [i[f"host_us_outside_device_window_{kind}"] for i in items]
            merged[f"host_us_outside_device_window_{kind}"] = round(statistics.median(outside), 1)
            # the share the device waits for, per repeat: robust to a machine slower in one repeat than another
            merged[f"outside_device_window_share_{kind}"] = round(statistics.median(
                o / i[f"host_us_per_step_{kind}"] for o, i in zip(outside, items, strict=True)), 3)
            names = sorted({k for i in items for k in i["phases_us"][kind]}, key=(*PHASES, "other").index)
            merged.setdefault("phases_us", {})[kind] = {
                k: round(statistics.median(i["phases_us"][kind].get(k, 0.0) for i in items), 1) for k in names}
        for k in ("wall_s", "cpu_s", "num_output_tokens", "num_outputs", "text_chars", "max_tokens", "num_steps"):
            if k in items[0]:
                merged[k] = items[0][k] if k in ("num_output_tokens", "num_outputs", "text_chars", "max_tokens",
                                                 "num_steps") else round(statistics.median(i[k] for i in items), 3)
        cells[key] = merged
    return cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", metavar="REF", help="also measure the accelkit of this git revision (before)")
    ap.add_argument("--repeats", type=int, default=2, help="worker runs per tree (interleaved ABBA with --compare)")
    ap.add_argument("--steps", type=int, default=48, help="steady-state decode steps measured per cell")
    ap.add_argument("--skip", type=int, default=4, help="decode steps skipped before measuring")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES))
    ap.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    ap.add_argument("--label", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        worker(args)
        return

    sys.path.insert(0, str(ROOT))
    from accelkit.hardware.detect import environment
    from accelkit.serve.testing import save_tiny_model

    with tempfile.TemporaryDirectory(prefix="accelkit-host-") as tmp:
        tmp_path = Path(tmp)
        model_dir = save_tiny_model(tmp_path / "model", "tiny-llama")
        trees: list[tuple[str, Path, str]] = [("this tree", ROOT, _head())]
        if args.compare:
            base = tmp_path / "base"
            base.mkdir()
            trees.insert(0, ("before", base, export_revision(args.compare, base)))
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in trees}
        order = []
        for r in range(args.repeats):  # ABBA: drift hits both trees alike
            order += trees if r % 2 == 0 else trees[::-1]
        load_before = os.getloadavg()
        for i, (label, tree, _) in enumerate(order):
            print(f"run {i + 1}/{len(order)}: {label}", file=sys.stderr, flush=True)
            runs[label].append(run_worker(tree, label, model_dir, args, tmp_path / f"run{i}.json"))
        load_after = os.getloadavg()

    results = {label: {"commit": commit, "cells": merge(runs[label])} for label, _, commit in trees}
    doc: dict[str, Any] = {
        "benchmark": "engine_host_overhead",
        "method": (
            "the real LLMEngine (scheduler, block manager, sequences, detokenizer, outputs, ModelRunner.prepare with "
            "the Triton backend's metadata and the CUDA-graph bucket padding, the sampler's argmax and host read) "
            "with ModelRunner.forward replaced by a stand-in returning rows of a precomputed random logits table: "
            "THE MODEL FORWARD IS EXCLUDED (no compute, no KV writes). Per steady-state decode step (every sequence "
            "decoding): wall and thread-CPU time per phase, median over the measured steps, then median over "
            "repeats (whole worker processes, one torch thread). host_us_per_step = step time + deliver + on_step "
            "- the stand-in forward. offline = LLM.generate; streaming = EngineLoop with the HTTP server's per-output "
            "work (MetricsBridge.on_output + the tree's server hand-over into an asyncio consumer thread: Mailbox, or "
            "call_soon_threadsafe per output before it) and on_step. *-overlap: the same with overlap_postprocess=True "
            "(the default on CUDA): a step's postprocessing (detokenizing, stop strings, outputs) runs inside the next "
            "step, between the sampler's launch and its host read. host_us_outside_device_window = host_us_per_step "
            "minus that postprocessing (0 subtracted without overlap): the host time a device step cannot hide, "
            "provided the device step lasts at least as long as the postprocessing"),
        "model": "tiny-llama preset (2 layers, vocab 512, word-level tokenizer built locally), fp32, CPU",
        "engine": {"max_num_seqs": MAX_NUM_SEQS, "max_num_batched_tokens": MAX_NUM_BATCHED_TOKENS,
                   "attention_backend": "triton (prepare only; TRITON_INTERPRET=1)", "decode_graph_buckets": True,
                   "prompt_tokens": list(PROMPT_RANGE), "sampling": "greedy, ignore_eos"},
        "steps_measured": args.steps, "steps_skipped": args.skip, "repeats": args.repeats,
        "load_average_before_after": [round(load_before[0], 2), round(load_after[0], 2)],
        "results": results,
        "environment": environment(with_torch=True),
    }
    if args.compare:
        before, after = results["before"]["cells"], results["this tree"]["cells"]
        doc["ratio_before_over_after"] = {
            key: {kind: round(before[key][f"host_us_per_step_{kind}"] / after[key][f"host_us_per_step_{kind}"], 2)
                  for kind in ("cpu", "wall")} for key in after if key in before}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    _print_table(doc)
    print(f"wrote {args.out}", file=sys.stderr)


def _head() -> str:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", str(ROOT), "status", "--porcelain", "accelkit"], capture_output=True,
                           text=True).stdout.strip()
    return out + ("+uncommitted" if dirty else "")


def _print_table(doc: dict[str, Any]) -> None:
    results = doc["results"]
    labels = list(results)
    ratios = doc.get("ratio_before_over_after", {})
    print(f"{'path/batch':22s}" + "".join(f"{label + ' µs/step (cpu)':>26s}" for label in labels)
          + f"{'outside device window':>24s}" + ("   ratio" if len(labels) == 2 else ""))
    for key, cell in results[labels[-1]]["cells"].items():
        row = f"{key:22s}" + "".join(
            f"{results[label]['cells'][key]['host_us_per_step_cpu']:26.1f}" if key in results[label]["cells"]
            else f"{'-':>26s}" for label in labels)
        row += f"{cell['host_us_outside_device_window_cpu']:14.1f} ({cell['outside_device_window_share_cpu']:.0%})"
        if key in ratios:
            row += f"   {ratios[key]['cpu']:.2f}×"
        print(row)


if __name__ == "__main__":
    main()
