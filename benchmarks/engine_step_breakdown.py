"""Where the time of one engine decode step goes, with the real model forward, at batch 1, 4 and 64.

``benchmarks/engine_host_overhead.py`` measures the host's work per step with the forward replaced by a stand-in;
this one keeps everything real: the model is ``benchmarks/serve_throughput.py``'s CPU setup (a random 4-layer Llama,
hidden 256, GQA 4:2, vocab 8192, fp32), the attention backend is the one the engine picks on a CPU (``cpu``, or ``sdpa`` for trees before it; no Triton,
no decode graphs), torch runs on ``--threads`` threads (default 2). Every request has a 256-token prompt and EOS is
ignored; once all ``batch`` sequences decode (one token each per step) the steps after ``--skip`` are measured,
``--steps`` of them, per phase, in wall time (perf_counter) and this thread's CPU time (thread_time):

    schedule · prepare · forward (the model) · sample (the sampler's launch and its host read) · update (the
    scheduler's) · postprocess (detokenizing, stop checks) · outputs (building the RequestOutputs) · deliver (the
    streaming path's hand-over) · on_step (its metrics) · other (the rest of ``engine.step``: inbox, isolation, glue)

for two paths: ``offline`` (``LLM.generate``) and ``streaming`` (``EngineLoop`` as the HTTP server drives it: the
server's ``MetricsBridge`` per output and its ``Mailbox`` hand-over into an asyncio loop in another thread — the
same driver as engine_host_overhead.py's), and per ``--temperature`` (default 0 and 1.0: greedy is the argmax path;
1.0, what OpenAI clients and ``vllm bench serve`` send, is the sampler's random race). A cell's figures are medians
over its measured steps, then medians over ``--repeats`` worker processes. ``share`` is a phase's median over the
sum of all phases' medians (so the shares of a cell add up to 1).

``--compare REF`` runs the same measurement on the ``accelkit`` of git revision REF (``git archive``) in worker
processes interleaved with this tree's, ABBA (REF, this tree, this tree, REF, ...), and reports both and the ratio
REF / this tree of the step time per cell. The load average before and after each worker and the environment are
recorded.

    .venv/bin/python benchmarks/engine_step_breakdown.py --compare 34f97c6            # → results/engine_step_breakdown_cpu.json
    .venv/bin/python benchmarks/engine_step_breakdown.py --batch-sizes 1 4 --steps 4 --skip 1 --repeats 1 --out /tmp/x.json

This file imports only the standard library and engine_host_overhead.py (itself standard-library only) at the top:
the workers import the ``accelkit`` of the tree they measure.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, NoReturn

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
import engine_host_overhead as host  # noqa: E402  (the Recorder, the streaming driver's pieces, export_revision)

OUT = HERE / "results" / "engine_step_breakdown_cpu.json"
BATCH_SIZES = (1, 4, 64)
TEMPERATURES = (0.0, 1.0)
PATHS = ("offline", "streaming")
PROMPT_TOKENS = 256
ENGINE = {"max_num_batched_tokens": 2048, "max_num_seqs": 256}  # vs_vllm.py's batch budget
PHASES = ("schedule", "prepare", "forward", "sample", "update", "postprocess", "outputs", "deliver_in_window",
          "deliver", "on_step", "other")


# ---- the worker: one process, one accelkit tree ------------------------------------------------------
def sampling_params(temperature: float, max_tokens: int) -> Any:
    from accelkit.serve import SamplingParams

    return SamplingParams(temperature=temperature, max_tokens=max_tokens, ignore_eos=True)


def run(path: str, llm: Any, batch: int, max_tokens: int, rec: host.Recorder, temperature: float,
        loop: Any = None) -> dict[str, Any]:
    """engine_host_overhead's offline or streaming driver, with 256-token prompts and the sampling temperature."""
    params = sampling_params(temperature, max_tokens)
    if path == "offline":
        return host.run_offline(llm, batch, max_tokens, rec, params, prompt_tokens=PROMPT_TOKENS)
    return host.run_streaming(llm, batch, max_tokens, rec, params, prompt_tokens=PROMPT_TOKENS, loop=loop)


def summarize(records: list[dict[str, Any]], batch: int, skip: int, steps: int) -> dict[str, Any]:
    """engine_host_overhead.summarize's medians (the forward is a phase here, not left out), plus each phase's share."""
    cell = host.summarize(records, batch, skip, steps, overlap=False)
    out: dict[str, Any] = {"num_steps": cell["num_steps"], "num_decode_steps_seen": cell["num_decode_steps_seen"]}
    for kind in ("wall", "cpu"):
        out[f"step_us_{kind}"] = cell[f"host_us_per_step_{kind}"]  # step + deliver + on_step, the forward included
        out[f"step_us_{kind}_p10_p90"] = cell[f"host_us_per_step_{kind}_p10_p90"]
        phases = {k: cell["phases_us"][kind][k] for k in PHASES if k in cell["phases_us"][kind]}
        out.setdefault("phases_us", {})[kind] = phases
        out.setdefault("share", {})[kind] = shares(phases)
    return out


def shares(phases_us: dict[str, float]) -> dict[str, float]:
    """Each phase's part of the sum of the phases (0 for all when the sum is 0)."""
    total = sum(phases_us.values())
    return {k: round(v / total, 4) if total > 0 else 0.0 for k, v in phases_us.items()}


def _make_engine(made: list[Any], model_dir: str, kv_bytes: int) -> Any:
    """An LLM (kept in ``made``) and its engine, for ``EngineLoop.build`` to make on the loop's thread."""
    from accelkit.serve import LLM

    made.append(LLM(model_dir, kv_cache_memory_bytes=kv_bytes, **ENGINE))
    return made[0].engine


def worker(args: argparse.Namespace) -> None:
    import torch

    from accelkit.serve import LLM, EngineLoop

    torch.set_num_threads(args.threads)
    config = json.loads((Path(args.model_dir) / "config.json").read_text())
    kv_per_token = 2 * config["num_hidden_layers"] * config["num_key_value_heads"] * config["head_dim"] * 4  # fp32
    result: dict[str, Any] = {"cells": {}}
    for path in args.paths:
        for temperature in args.temperatures:
            for batch in args.batch_sizes:
                # prefill takes ceil(batch * 256 / 2048) steps; every sequence decodes after that
                max_tokens = -(-batch * PROMPT_TOKENS // ENGINE["max_num_batched_tokens"]) + args.skip + args.steps + 4
                kv_bytes = 16 * 2**20 + batch * (PROMPT_TOKENS + max_tokens + 32) * kv_per_token
                loop = None
                if path == "streaming" and hasattr(EngineLoop, "build"):
                    # as the server does: the engine built on the loop's thread, all its torch work on one thread
                    # (this worker process runs no other path: the main thread has no OpenMP team of its own)
                    made: list[Any] = []
                    loop = EngineLoop.build(functools.partial(_make_engine, made, args.model_dir, kv_bytes))
                    llm = made[0]
                else:
                    llm = LLM(args.model_dir, kv_cache_memory_bytes=kv_bytes, **ENGINE)
                runner = llm.engine.runner
                rec = host.Recorder()
                # the real forward as a phase; the sampler's host read in "sample" (a copy on a CPU, not a wait)
                host.instrument(llm, rec, forward="forward", time_read=True)
                run(path, llm, min(batch, 4), 8, host.Recorder(), temperature, loop)  # warm-up: first-call costs
                rec.records.clear()
                whole = run(path, llm, batch, max_tokens, rec, temperature, loop)
                if loop is not None:
                    loop.stop()
                cell = summarize(rec.records, batch, args.skip, args.steps)
                cell.update(whole)
                cell.update(max_tokens=max_tokens, attention_backend=runner.attention_backend,
                            decode_graphs=getattr(runner, "graphs", None) is not None)
                key = f"{path}/t{temperature:g}/{batch}"
                result["cells"][key] = cell
                top = sorted(cell["share"]["wall"].items(), key=lambda kv: -kv[1])[:3]
                print(f"  [{args.label}] {key:20s} step {cell['step_us_wall']:9.1f} µs wall, "
                      f"{cell['step_us_cpu']:9.1f} µs cpu; " + ", ".join(f"{k} {v:.0%}" for k, v in top),
                      file=sys.stderr, flush=True)
                del llm, runner, loop
    Path(args.json_out).write_text(json.dumps(result))


# ---- the orchestrator ----------------------------------------------------------------------------------
def run_worker(tree: Path, label: str, model_dir: Path, args: argparse.Namespace, out: Path) -> dict[str, Any]:
    """One worker process per path (an offline cell's torch work on the main thread would leave that thread an
    OpenMP team of its own, beside the streaming loop's), merged into one record."""
    merged: dict[str, Any] = {"cells": {}, "load_average_before_after": [], "wall_s": 0.0}
    for path in args.paths:
        one = _run_path_worker(tree, label, model_dir, args, out, path)
        merged["cells"].update(one["cells"])
        merged["load_average_before_after"] += one["load_average_before_after"]
        merged["wall_s"] = round(merged["wall_s"] + one["wall_s"], 1)
    return merged


def _run_path_worker(tree: Path, label: str, model_dir: Path, args: argparse.Namespace, out: Path,
                     path: str) -> dict[str, Any]:
    env = {**os.environ, "PYTHONPATH": str(tree), "OMP_NUM_THREADS": str(args.threads),
           "TOKENIZERS_PARALLELISM": "false"}
    env.pop("TRITON_INTERPRET", None)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--model-dir", str(model_dir),
           "--json-out", str(out), "--label", label, "--skip", str(args.skip), "--steps", str(args.steps),
           "--threads", str(args.threads), "--batch-sizes", *map(str, args.batch_sizes),
           "--temperatures", *map(str, args.temperatures), "--paths", path]
    load_before = os.getloadavg()
    w0 = time.perf_counter()
    subprocess.run(cmd, check=True, env=env, cwd=str(tree))
    result: dict[str, Any] = json.loads(out.read_text())
    result["load_average_before_after"] = [[round(x, 2) for x in load_before],
                                           [round(x, 2) for x in os.getloadavg()]]
    result["wall_s"] = round(time.perf_counter() - w0, 1)
    return result


def merge(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per cell: the median over repeats (whole worker runs) of each figure, and each repeat's step time."""
    cells: dict[str, Any] = {}
    for key in runs[0]["cells"]:
        items = [r["cells"][key] for r in runs if key in r["cells"]]
        merged: dict[str, Any] = {"repeats": len(items)}
        for kind in ("wall", "cpu"):
            merged[f"step_us_{kind}"] = round(statistics.median(i[f"step_us_{kind}"] for i in items), 1)
            merged[f"step_us_{kind}_each_repeat"] = [i[f"step_us_{kind}"] for i in items]
            names = [k for k in PHASES if any(k in i["phases_us"][kind] for i in items)]
            phases = {k: round(statistics.median(i["phases_us"][kind].get(k, 0.0) for i in items), 1) for k in names}
            merged.setdefault("phases_us", {})[kind] = phases
            merged.setdefault("share", {})[kind] = shares(phases)
        for k in ("num_steps", "max_tokens", "num_output_tokens", "num_outputs", "text_chars", "attention_backend",
                  "decode_graphs"):
            if k in items[0]:
                merged[k] = items[0][k]
        merged["run_wall_s"] = round(statistics.median(i["wall_s"] for i in items), 3)
        cells[key] = merged
    return cells


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--compare", metavar="REF", help="also measure the accelkit of this git revision (before)")
    ap.add_argument("--repeats", type=int, default=2, help="worker runs per tree (interleaved ABBA with --compare)")
    ap.add_argument("--steps", type=int, default=32, help="steady-state decode steps measured per cell")
    ap.add_argument("--skip", type=int, default=4, help="decode steps skipped before measuring")
    ap.add_argument("--batch-sizes", type=int, nargs="+", default=list(BATCH_SIZES))
    ap.add_argument("--temperatures", "--temperature", type=float, nargs="+", default=list(TEMPERATURES),
                    help="sampling temperatures (0 = greedy argmax; 1.0 = what OpenAI clients send)")
    ap.add_argument("--paths", nargs="+", choices=PATHS, default=list(PATHS))
    ap.add_argument("--threads", type=int, default=2, help="torch threads (torch.set_num_threads, OMP_NUM_THREADS)")
    ap.add_argument("--out", type=Path, default=OUT, help=f"the JSON (default: {OUT.relative_to(ROOT)})")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--json-out", help=argparse.SUPPRESS)
    ap.add_argument("--label", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    for name in ("repeats", "steps", "threads"):
        if getattr(args, name) < 1:
            usage_error(f"--{name} {getattr(args, name)}: must be at least 1")
    if args.skip < 0:
        usage_error(f"--skip {args.skip}: must be at least 0")
    bad = [b for b in args.batch_sizes if not 1 <= b <= ENGINE["max_num_seqs"]]
    if bad:
        usage_error(f"--batch-sizes {bad[0]}: give batch sizes from 1 to {ENGINE['max_num_seqs']}")
    bad_t = [t for t in args.temperatures if not 0 <= t < float("inf")]
    if bad_t:
        usage_error(f"--temperatures {bad_t[0]}: give finite temperatures >= 0 (0 = greedy)")
    if args.compare and subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--verify", "--quiet",
                                        f"{args.compare}^{{commit}}"], capture_output=True).returncode != 0:
        usage_error(f"--compare {args.compare}: not a commit of this repository; give a revision (e.g. 34f97c6)")
    if args.worker:
        worker(args)
        return

    sys.path.insert(0, str(ROOT))
    import serve_throughput as st  # the CPU setup's model (imports this tree's accelkit, torch, transformers)

    from accelkit.hardware.detect import environment

    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="accelkit-breakdown-") as tmp:
        tmp_path = Path(tmp)
        model_dir = st.build_model(tmp_path / "model", st.SETUPS["cpu"], "cpu")
        trees: list[tuple[str, Path, str]] = [("this tree", ROOT, host._head())]
        if args.compare:
            base = tmp_path / "base"
            base.mkdir()
            trees.insert(0, ("before", base, host.export_revision(args.compare, base)))
        runs: dict[str, list[dict[str, Any]]] = {label: [] for label, _, _ in trees}
        order = []
        for r in range(args.repeats):  # ABBA: drift hits both trees alike
            order += trees if r % 2 == 0 else trees[::-1]
        for i, (label, tree, _) in enumerate(order):
            print(f"run {i + 1}/{len(order)}: {label}", file=sys.stderr, flush=True)
            runs[label].append(run_worker(tree, label, model_dir, args, tmp_path / f"run{i}.json"))

    results = {label: {"commit": commit, "cells": merge(runs[label]),
                       "workers": [{"load_average_before_after": r["load_average_before_after"], "wall_s": r["wall_s"]}
                                   for r in runs[label]]}
               for label, _, commit in trees}
    doc: dict[str, Any] = {
        "benchmark": "engine_step_breakdown",
        "method": (
            "the real LLMEngine with the real model forward on the CPU: per steady-state decode step (every sequence "
            "decoding one token), wall (perf_counter) and thread-CPU (thread_time) time per phase, median over the "
            "measured steps, then median over repeats (whole worker processes, interleaved ABBA with --compare). "
            "step_us = engine.step + the streaming path's deliver and on_step. sample = the sampler's launch and host "
            "read; postprocess = the output processor without building the outputs; outputs = building them; "
            "other = engine.step minus its timed phases. share = a phase's median / the sum of the phases' medians. "
            "offline = LLM.generate; streaming = EngineLoop with the HTTP server's per-output work (MetricsBridge."
            "on_output, the Mailbox hand-over into an asyncio consumer thread) and on_step"),
        "model": "benchmarks/serve_throughput.py cpu setup: random Llama, 4 layers, hidden 256, GQA 4:2, head_dim 64, "
                 "vocab 8192, fp32 (word-level tokenizer built locally)",
        "engine": {**ENGINE, "prompt_tokens": PROMPT_TOKENS, "attention_backend": "the engine's pick on CPU",
                   "decode_graphs": False, "torch_threads": args.threads, "sampling": "ignore_eos, no seed",
                   "temperatures": args.temperatures},
        "steps_measured": args.steps, "steps_skipped": args.skip, "repeats": args.repeats,
        "total_wall_s": round(time.perf_counter() - t0, 1),
        "results": results,
        "environment": environment(with_torch=True),
    }
    if args.compare:
        before, after = results["before"]["cells"], results["this tree"]["cells"]
        doc["ratio_before_over_after"] = {
            key: {kind: round(before[key][f"step_us_{kind}"] / after[key][f"step_us_{kind}"], 3)
                  for kind in ("wall", "cpu")} for key in after if key in before}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    print_table(doc)
    print(f"wrote {args.out}", file=sys.stderr)


def usage_error(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    raise SystemExit(2)


def print_table(doc: dict[str, Any]) -> None:
    """Per tree and cell: the step's wall median in µs and each phase's share of it; the ratio when comparing."""
    ratios = doc.get("ratio_before_over_after", {})
    short = {"schedule": "sched", "prepare": "prep", "forward": "fwd", "sample": "samp", "update": "upd",
             "postprocess": "post", "outputs": "outs", "deliver_in_window": "dlvw", "deliver": "dlv",
             "on_step": "onst", "other": "oth"}
    for label, res in doc["results"].items():
        print(f"{label} ({res['commit'][:12]}): step wall µs, phase shares of the wall time", file=sys.stderr)
        names = [k for k in PHASES if any(k in c["share"]["wall"] for c in res["cells"].values())]
        print(f"  {'path/temp/batch':20s}{'step µs':>10s}" + "".join(f"{short[k]:>6s}" for k in names)
              + ("   before/after" if ratios and label == "this tree" else ""), file=sys.stderr)
        for key, cell in res["cells"].items():
            row = f"  {key:20s}{cell['step_us_wall']:10.1f}" + "".join(
                f"{cell['share']['wall'].get(k, 0.0):6.0%}" for k in names)
            if key in ratios and label == "this tree":
                row += f"   {ratios[key]['wall']:.2f}× wall, {ratios[key]['cpu']:.2f}× cpu"
            print(row, file=sys.stderr)


if __name__ == "__main__":
    main()
