"""Offline serving throughput: accelkit's engine vs transformers, same model, same request trace, same run.

Two setups (``--device``):

* **cpu** (default) — 64 requests, prompt lengths uniform in [32, 512], outputs uniform in [16, 256], a
  4-layer Llama (hidden 256, GQA 4:2, head_dim 64, vocab 8192), fp32. Systems: accelkit, transformers
  ``generate`` on static left-padded batches of 8, transformers continuous batching. Goals (issue #5/#12):
  accelkit >= 2.3x hf-static-8 and >= 1.3x hf-continuous.
* **cuda** — issue #12's setup: 256 requests (seed 0), prompts uniform in [128, 1024], outputs uniform in
  [64, 256], a random-init 1B Llama (hidden 2048, 16 layers, 32 heads, 8 KV heads, head_dim 64, ffn 8192,
  vocab 32000, tied embeddings), bf16, ``max_num_batched_tokens=8192``, ``max_num_seqs=256``. Systems:
  accelkit with a bf16 and with an fp8 KV cache (same KV budget), transformers ``generate`` on static
  left-padded batches of 64, transformers continuous batching. Also measured: a decode step at batch 128
  (1K context) under ``torch.profiler`` — CUDA kernels per step, GPU-busy time per step (union of kernel
  intervals) against its wall time measured without the profiler — with CUDA graphs and eagerly; the
  phase split of a synchronized 64-request run; and how many KV tokens fit in the same budget, bf16 vs
  fp8. Goals: >= 15,000 output tok/s and >= 13x hf-static-64; fp8 within 10% of bf16 throughput and
  >= 1.85x its tokens; decode step wall <= 1.3x its GPU-busy time.

All requests arrive at t=0, greedy, EOS ignored, so every system produces exactly the requested tokens.
Each system first serves a small warm-up trace (discarded), then the full trace is timed once
(``time.perf_counter``). Output tokens/s = sum of requested output tokens / wall time of the whole trace.
The process CPU time of each timed trace is recorded too: on a shared CPU with one torch thread, the ratio
of CPU seconds is the speed-up that other jobs cannot distort (reported beside the wall-time ratio).
Engine start-up (weights, KV allocation, CUDA-graph capture, kernel compilation) is reported, not timed in.
A system that fails is recorded under ``failed`` and the others still run; a secondary measurement (phase
split, profiled decode step) that fails is recorded under the system's ``extras_failed`` and its throughput
is kept. The JSON is rewritten after every system, so a timeout keeps what was measured.

    .venv/bin/python benchmarks/serve_throughput.py --threads 2        # CPU → results/serve_throughput.json
    .venv/bin/python benchmarks/serve_throughput.py --device cuda      # GPU → results/serve_throughput_cuda.json
    .venv/bin/python benchmarks/serve_throughput.py --quick            # smoke run (prints only)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import transformers

from accelkit.hardware.detect import environment
from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import save_model_dir

RESULTS = Path(__file__).resolve().parent / "results"

SETUPS: dict[str, dict[str, Any]] = {
    "cpu": {
        # ~10M parameters: big enough that batching pays, small enough for a few minutes on 2 CPU cores
        "model": {
            "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 4,
            "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 8192, "max_position_embeddings": 1024,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": None, "pad_token_id": 3,
        },
        "dtype": "float32", "num_requests": 64, "prompt_range": (32, 512), "output_range": (16, 256),
        "hf_batch": 8, "engine": {"kv_cache_memory_bytes": 1 << 30, "max_num_batched_tokens": 2048},
        "systems": ["accelkit", "hf-static", "hf-continuous"], "out": RESULTS / "serve_throughput.json",
    },
    "cuda": {
        # Llama-3.2-1B's shape, random init (~0.97B parameters)
        "model": {
            "hidden_size": 2048, "intermediate_size": 8192, "num_hidden_layers": 16, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 32000, "max_position_embeddings": 2048,
            "rms_norm_eps": 1e-5, "tie_word_embeddings": True, "bos_token_id": 1, "eos_token_id": None, "pad_token_id": 3,
        },
        "dtype": "bfloat16", "num_requests": 256, "prompt_range": (128, 1024), "output_range": (64, 256),
        "hf_batch": 64, "engine": {"kv_cache_memory_bytes": 16 << 30, "max_num_batched_tokens": 8192, "max_num_seqs": 256},
        "systems": ["accelkit", "accelkit-fp8", "hf-static", "hf-continuous"], "out": RESULTS / "serve_throughput_cuda.json",
    },
}
GOALS = {"cpu": {"hf-static-8": 2.3, "hf-continuous": 1.3}, "cuda": {"hf-static-64": 13.0}}
CUDA_TARGET_TOK_S = 15_000.0


def log(msg: str) -> None:
    print(f"[serve_throughput] {msg}", file=sys.stderr, flush=True)


def build_model(path: Path, setup: dict[str, Any], device: str) -> Path:
    torch.manual_seed(0)
    config = transformers.LlamaConfig(**setup["model"])
    dtype = getattr(torch, setup["dtype"])
    with torch.device(device):  # initialise on the GPU: a 1B model's random init takes a while on a CPU
        model = transformers.LlamaForCausalLM(config).to(dtype).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = setup["model"]["pad_token_id"]
    path = save_model_dir(model, path)
    del model
    return path


def make_trace(num: int, *, seed: int, vocab: int, prompt_range: tuple[int, int], output_range: tuple[int, int]
               ) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"prompt": [rng.randrange(4, vocab) for _ in range(rng.randint(*prompt_range))],
         "max_tokens": rng.randint(*output_range)}
        for _ in range(num)
    ]


def free_device_memory() -> None:
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.synchronize()
        torch.cuda.empty_cache()


# ---- accelkit ----------------------------------------------------------------------------------------
class PhaseTimer:
    """Wraps methods with perf_counter accumulators; ``sync``, when given, waits for the device before each
    reading of the clock."""

    def __init__(self, *, sync: Callable[[], None] | None) -> None:
        self.total_s: dict[str, float] = defaultdict(float)
        self.sync = sync
        self._restore: list[tuple[Any, str]] = []

    def wrap(self, obj: Any, attr: str, name: str) -> None:
        fn = getattr(obj, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                if self.sync is not None:
                    self.sync()
                self.total_s[name] += time.perf_counter() - t0

        setattr(obj, attr, timed)
        self._restore.append((obj, attr))

    def unwrap(self) -> None:
        for obj, attr in self._restore:
            delattr(obj, attr)  # back to the class attribute
        self._restore.clear()

    def wrap_engine(self, llm: LLM) -> None:
        engine = llm.engine
        self.wrap(engine.scheduler, "schedule", "schedule")
        self.wrap(engine.runner, "prepare", "prepare_inputs")
        self.wrap(engine.runner, "forward", "forward")  # graph replay or eager layers, + LM head
        self.wrap(engine.runner.sampler, "launch", "sample")  # (its host read is the step's sync, in "other")
        self.wrap(engine.output_processor, "process", "postprocess")


def serve_accelkit(llm: LLM, reqs: list[dict]) -> list[list[int]]:
    params = [SamplingParams.greedy(r["max_tokens"], ignore_eos=True) for r in reqs]
    return [o.token_ids for o in llm.generate([r["prompt"] for r in reqs], params)]


def run_accelkit(model_dir: Path, trace: list[dict], warmup: list[dict], *, setup: dict[str, Any], device: str,
                 kv_cache_dtype: str, profile: bool) -> dict[str, Any]:
    t0 = time.perf_counter()
    llm = LLM(str(model_dir), device=device, kv_cache_dtype=kv_cache_dtype,
              **{"max_num_seqs": len(trace), **setup["engine"]})
    startup = time.perf_counter() - t0
    engine = llm.engine
    serve_accelkit(llm, warmup)
    timer = PhaseTimer(sync=None)
    if device == "cpu":
        timer.wrap_engine(llm)
    steps0 = engine.get_stats().num_steps
    if device == "cuda":
        torch.cuda.synchronize()
    t0, c0 = time.perf_counter(), time.process_time()
    outputs = serve_accelkit(llm, trace)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    timer.unwrap()
    stats = engine.get_stats()
    result: dict[str, Any] = {
        "wall_s": wall, "cpu_s": cpu, "outputs": outputs, "startup_s": round(startup, 2), "num_steps": stats.num_steps - steps0,
        "num_preemptions": stats.num_preemptions, "kv_blocks": stats.num_blocks, "block_size": stats.block_size,
        "kv_tokens": stats.num_blocks * stats.block_size, "kv_bytes_per_token": engine.runner.kv_bytes_per_token,
        "attention_backend": engine.runner.backend.name, "cuda_graphs": engine.runner.graphs is not None,
    }
    if device == "cpu":
        result["profile_s"] = {k: round(v, 3) for k, v in timer.total_s.items()}
        result["profile_s"]["other"] = round(wall - sum(timer.total_s.values()), 3)  # the phases do not nest
    if device == "cuda":
        result.update(engine_extras(llm, trace[:64], profile=profile))
    del llm, engine
    free_device_memory()
    return result


def engine_extras(llm: LLM, reqs: list[dict], *, profile: bool, batch: int = 128, prompt_len: int = 1024
                  ) -> dict[str, Any]:
    """The secondary measurements of a GPU run, after its trace: the phase split of ``reqs`` (when ``profile``)
    and a decode step at ``batch`` profiled with CUDA graphs (and, when ``profile``, eagerly). One that fails is
    recorded under ``extras_failed`` with its error and the engine is cleared of its requests: it never costs
    the throughput already measured, nor the next measurement."""
    extras: dict[str, Any] = {}
    failed: dict[str, str] = {}
    runner = llm.engine.runner
    broken: list[str] = []  # the engine could not be cleared after a failure: the later extras are skipped

    def attempt(key: str, fn: Any) -> Any:
        if broken:
            failed[key] = f"skipped: the engine was left unusable by {broken[0]}"
            return None
        try:
            return fn()
        except Exception as exc:
            failed[key] = f"{type(exc).__name__}: {exc}"[:500]
            log(f"{key} FAILED: {failed[key]}")
            try:
                clear_engine(llm)
            except Exception as again:
                failed[key] += f"; clearing the engine then failed too ({type(again).__name__}: {again})"[:300]
                broken.append(key)
            return None

    if profile and (split := attempt("phase_split", lambda: phase_split(llm, reqs))) is not None:
        extras["phase_split"] = split
    def decode_step() -> dict[str, Any]:
        return profile_decode_steps(llm, batch=batch, prompt_len=prompt_len)

    step: dict[str, Any] = {}
    if (graphs := attempt("decode_step.cuda_graphs", decode_step)) is not None:
        step["cuda_graphs"] = graphs
    if profile and runner.graphs is not None:
        saved, runner.graphs = runner.graphs, None  # the same engine, every step eager
        try:
            if (eager := attempt("decode_step.eager", decode_step)) is not None:
                step["eager"] = eager
        finally:
            runner.graphs = saved
    if step:
        extras["decode_step"] = step
    if failed:
        extras["extras_failed"] = failed
    return extras


def clear_engine(llm: LLM) -> None:
    """Abort every request still in the engine and step until it holds none (their blocks freed)."""
    engine = llm.engine
    for seq in [*engine.scheduler.running, *engine.scheduler.waiting]:
        engine.abort_request(seq.request_id)
    while engine.has_unfinished_requests():
        engine.step()


def synchronize(llm: LLM) -> None:
    if llm.engine.runner.device.type == "cuda":
        torch.cuda.synchronize(llm.engine.runner.device)


def phase_split(llm: LLM, reqs: list[dict]) -> dict[str, Any]:
    """Where the time of a synchronized run goes (the GPU is waited for after each phase)."""
    timer = PhaseTimer(sync=lambda: synchronize(llm))
    timer.wrap_engine(llm)
    try:
        synchronize(llm)
        t0 = time.perf_counter()
        serve_accelkit(llm, reqs)
        wall = time.perf_counter() - t0
    finally:
        timer.unwrap()
    split = {k: round(v, 4) for k, v in timer.total_s.items()}
    split["other"] = round(wall - sum(timer.total_s.values()), 4)
    return {"num_requests": len(reqs), "wall_s": round(wall, 3), "phases_s": split}


def _busy_us(intervals: list[tuple[float, float]]) -> float:
    """Length of the union of [start, end) intervals."""
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def profile_decode_steps(llm: LLM, *, batch: int = 128, prompt_len: int = 1024, steps: int = 5) -> dict[str, Any]:
    """Decode steps of ``batch`` sequences at ~``prompt_len`` context: kernels, GPU-busy and wall time per step."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    engine = llm.engine
    rng = random.Random(7)
    vocab = engine.model_args.vocab_size
    params = SamplingParams.greedy(64, ignore_eos=True)  # outlives prefill (~16 steps) + the steps measured
    for _ in range(batch):
        engine.add_request([rng.randrange(4, vocab) for _ in range(prompt_len)], params)
    for _ in range(200):  # until a step decodes exactly the whole batch
        engine.step()
        stats = engine.get_stats()
        if stats.num_running == batch and stats.last_step_num_tokens == batch:
            break
    for _ in range(2):
        engine.step()
    synchronize(llm)
    t0 = time.perf_counter()
    for _ in range(steps):
        engine.step()
    wall = (time.perf_counter() - t0) / steps
    assert engine.get_stats().last_step_num_tokens == batch, "the measured steps were not pure decode steps"
    on_cuda = engine.runner.device.type == "cuda"
    with profile(activities=[ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if on_cuda else [])]) as prof:
        t0 = time.perf_counter()
        for _ in range(steps):
            engine.step()
        synchronize(llm)
        wall_profiled = (time.perf_counter() - t0) / steps
    device_events = [e for e in prof.events() if e.device_type == DeviceType.CUDA]
    kernels = [e for e in device_events if not e.name.startswith(("Memcpy", "Memset"))]
    busy = _busy_us([(e.time_range.start, e.time_range.end) for e in device_events]) / 1e6 / steps
    context = engine.scheduler.running[0].num_tokens if engine.scheduler.running else None
    clear_engine(llm)
    return {
        "batch_size": batch, "context_tokens": context, "steps": steps,
        "wall_s_per_step": round(wall, 6), "wall_s_per_step_profiled": round(wall_profiled, 6),
        "gpu_busy_s_per_step": round(busy, 6) if device_events else None,
        "wall_over_busy": round(wall / busy, 3) if busy > 0 else None,
        "kernels_per_step": len(kernels) / steps,
        "memcpy_memset_per_step": (len(device_events) - len(kernels)) / steps,
        "top_kernels": _top_kernels(kernels, steps),
    }


def _top_kernels(kernels: list[Any], steps: int, n: int = 12) -> list[dict[str, Any]]:
    by_name: dict[str, list[float]] = defaultdict(list)
    for e in kernels:
        by_name[e.name[:80]].append(e.time_range.end - e.time_range.start)
    rows = sorted(by_name.items(), key=lambda kv: -sum(kv[1]))[:n]
    return [{"name": k, "per_step": len(v) / steps, "us_per_step": round(sum(v) / steps, 1)} for k, v in rows]


# ---- transformers ------------------------------------------------------------------------------------
def run_hf_static(model_dir: Path, trace: list[dict], warmup: list[dict], *, setup: dict[str, Any], device: str,
                  ) -> dict[str, Any]:
    batch_size = setup["hf_batch"]
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, setup["dtype"])).to(device).eval()
    pad = setup["model"]["pad_token_id"]

    def serve(model: Any, reqs: list[dict]) -> tuple[list[list[int]], int]:
        outputs, computed = [], 0
        for i in range(0, len(reqs), batch_size):
            batch = reqs[i : i + batch_size]
            width = max(len(r["prompt"]) for r in batch)
            ids = torch.tensor([[pad] * (width - len(r["prompt"])) + r["prompt"] for r in batch], device=device)
            mask = torch.tensor([[0] * (width - len(r["prompt"])) + [1] * len(r["prompt"]) for r in batch], device=device)
            new = max(r["max_tokens"] for r in batch)
            gen = transformers.GenerationConfig(do_sample=False, max_new_tokens=new, eos_token_id=None, pad_token_id=pad)
            with torch.inference_mode():
                out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
            computed += new * len(batch)
            outputs += [out[j, width : width + r["max_tokens"]].tolist() for j, r in enumerate(batch)]
        return outputs, computed

    serve(model, warmup)
    if device == "cuda":
        torch.cuda.synchronize()
    t0, c0 = time.perf_counter(), time.process_time()
    outputs, computed = serve(model, trace)
    result = {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "outputs": outputs,
              "generated_incl_padding": computed, "batch_size": batch_size}
    del model
    free_device_memory()
    return result


def run_hf_continuous(model_dir: Path, trace: list[dict], warmup: list[dict], *, setup: dict[str, Any], device: str,
                      ) -> dict[str, Any]:
    from transformers.generation.continuous_batching.utils import WorkloadHints

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=getattr(torch, setup["dtype"])).to(device).eval()
    gen = transformers.GenerationConfig(do_sample=False, max_new_tokens=max(r["max_tokens"] for r in trace),
                                        eos_token_id=None, pad_token_id=setup["model"]["pad_token_id"])
    hints = WorkloadHints(max_prompt_length=max(len(r["prompt"]) for r in trace),
                          max_generated_length=max(r["max_tokens"] for r in trace), num_requests=len(trace))

    def serve(manager: Any, reqs: list[dict], tag: str) -> list[list[int]]:
        ids = [manager.add_request(input_ids=r["prompt"], request_id=f"{tag}{i}", max_new_tokens=r["max_tokens"],
                                   eos_token_id=-1) for i, r in enumerate(reqs)]
        done: dict[str, list[int]] = {}
        while len(done) < len(ids):
            result = manager.get_result(timeout=1)
            if result is not None and result.is_finished():
                done[result.request_id] = list(result.generated_tokens)
            elif result is None and not manager.is_running():
                raise RuntimeError("transformers continuous batching loop died")
        return [done[i] for i in ids]

    with model.continuous_batching_context_manager(generation_config=gen, workload_hints=hints) as manager:
        serve(manager, warmup, "warmup-")
        t0, c0 = time.perf_counter(), time.process_time()
        outputs = serve(manager, trace, "req-")
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    del model, manager
    free_device_memory()
    return {"wall_s": wall, "cpu_s": cpu, "outputs": outputs}


# ---- main --------------------------------------------------------------------------------------------
def goals(device: str, results: dict[str, Any]) -> dict[str, Any]:
    """Each goal with its measured value and whether it is met (missing systems are skipped)."""
    out: dict[str, Any] = {}
    tok_s = {k: v["output_tokens_per_s"] for k, v in results.items()}
    base = tok_s.get("accelkit")
    if base is None:
        return out
    for name, goal in GOALS[device].items():
        if name in tok_s:
            ratio = base / tok_s[name]
            out[f"accelkit / {name}"] = {"value": round(ratio, 3), "goal": f">= {goal}", "met": ratio >= goal}
            if device == "cpu":  # process CPU seconds: what other jobs on a shared machine cannot inflate (1 thread)
                out[f"accelkit / {name}"]["cpu_time_ratio"] = round(results[name]["cpu_s"] / results["accelkit"]["cpu_s"], 3)
    if device != "cuda":
        return out
    out["accelkit output tok/s"] = {"value": round(base, 1), "goal": f">= {CUDA_TARGET_TOK_S:.0f}",
                                    "met": base >= CUDA_TARGET_TOK_S}
    if "accelkit-fp8" in tok_s:
        ratio = tok_s["accelkit-fp8"] / base
        out["fp8 / bf16 KV throughput"] = {"value": round(ratio, 3), "goal": ">= 0.9", "met": ratio >= 0.9}
        tokens = results["accelkit-fp8"]["kv_tokens"] / results["accelkit"]["kv_tokens"]
        out["fp8 / bf16 KV tokens in the same budget"] = {"value": round(tokens, 3), "goal": ">= 1.85", "met": tokens >= 1.85}
    step = results["accelkit"].get("decode_step", {}).get("cuda_graphs", {})
    if step.get("wall_over_busy") is not None:
        out["decode step wall / GPU busy (batch 128, graphs)"] = {
            "value": step["wall_over_busy"], "goal": "<= 1.3", "met": step["wall_over_busy"] <= 1.3}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--num-requests", type=int, default=None, help="default: 64 on cpu, 256 on cuda")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="16 requests; prints only (unless --out is given)")
    ap.add_argument("--systems", default=None, help="comma-separated subset of the setup's systems")
    ap.add_argument("--no-profile", action="store_true", help="cuda: skip the phase split and the eager profile")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads for every system (default 1: on a shared 2-core machine two OpenMP threads "
                         "stall at every parallel op whenever another job holds a core)")
    args = ap.parse_args()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        ap.error("--device cuda: torch sees no CUDA device")
    setup = SETUPS[device]
    torch.set_num_threads(args.threads)
    num = 16 if args.quick else (args.num_requests or setup["num_requests"])
    out_path = args.out or (None if args.quick else setup["out"])
    systems = args.systems.split(",") if args.systems else setup["systems"]
    unknown = set(systems) - set(setup["systems"])
    if unknown:
        ap.error(f"--systems {','.join(sorted(unknown))}: not in this setup ({','.join(setup['systems'])})")
    vocab = setup["model"]["vocab_size"]
    trace = make_trace(num, seed=args.seed, vocab=vocab, prompt_range=setup["prompt_range"], output_range=setup["output_range"])
    warmup = make_trace(8, seed=args.seed + 1, vocab=vocab, prompt_range=setup["prompt_range"], output_range=(8, 16))
    output_tokens = sum(r["max_tokens"] for r in trace)
    runners = {
        "accelkit": lambda d: run_accelkit(d, trace, warmup, setup=setup, device=device, kv_cache_dtype="auto",
                                           profile=not args.no_profile),
        "accelkit-fp8": lambda d: run_accelkit(d, trace, warmup, setup=setup, device=device, kv_cache_dtype="fp8",
                                               profile=False),
        "hf-static": lambda d: run_hf_static(d, trace, warmup, setup=setup, device=device),
        "hf-continuous": lambda d: run_hf_continuous(d, trace, warmup, setup=setup, device=device),
    }
    results: dict[str, Any] = {}
    outputs: dict[str, list[list[int]]] = {}
    failed: dict[str, str] = {}
    elapsed: dict[str, float] = {}
    load_before = os.getloadavg()
    t_start = time.perf_counter()
    env = environment(with_torch=True)  # once: the document is rewritten after every system

    def document() -> dict[str, Any]:
        """The JSON of what is measured so far (written after every system: a timeout keeps the rest)."""
        ref = outputs.get("accelkit")
        for name, outs in outputs.items():
            if ref is not None and name != "accelkit":
                results[name]["identical_to_accelkit"] = sum(a == b for a, b in zip(outs, ref, strict=True))
        doc = {
            "benchmark": "serve_throughput",
            "device": device,
            "definition": "output tokens/s = sum of requested output tokens / wall time of the whole trace (all requests at t=0)",
            "trace": {
                "num_requests": num, "seed": args.seed, "prompt_len_range": list(setup["prompt_range"]),
                "output_len_range": list(setup["output_range"]), "prompt_tokens": sum(len(r["prompt"]) for r in trace),
                "output_tokens": output_tokens, "arrival": "all at once", "ignore_eos": True, "sampling": "greedy",
            },
            "model": {"architecture": "LlamaForCausalLM", "dtype": setup["dtype"], "random_init_seed": 0, **setup["model"]},
            "engine_config": setup["engine"],
            "systems": systems,
            "results": {k: {kk: (round(vv, 3) if isinstance(vv, float) else vv) for kk, vv in v.items()} for k, v in results.items()},
            "failed": failed,
            "goals": goals(device, results),
            "elapsed_s": elapsed,
            "load_average": {"before": load_before, "after": os.getloadavg(),
                             "note": "1/5/15-minute load averages; on the shared 2-core CPU machine other jobs may run"},
            "environment": env,
        }
        if "accelkit" in results and "accelkit-fp8" in results:
            bf16, fp8 = results["accelkit"], results["accelkit-fp8"]
            doc["kv_capacity"] = {
                "budget_bytes": setup["engine"]["kv_cache_memory_bytes"], "bf16_tokens": bf16["kv_tokens"],
                "fp8_tokens": fp8["kv_tokens"], "ratio": round(fp8["kv_tokens"] / bf16["kv_tokens"], 3),
                "bf16_bytes_per_token": bf16["kv_bytes_per_token"], "fp8_bytes_per_token": fp8["kv_bytes_per_token"],
            }
        return doc

    def write(doc: dict[str, Any]) -> None:
        if out_path is not None:
            out_path.parent.mkdir(parents=True, exist_ok=True)
            partial = out_path.with_name(out_path.name + ".partial")
            partial.write_text(json.dumps(doc, indent=2) + "\n")
            partial.replace(out_path)  # atomic: a timeout's kill mid-write keeps the last whole document

    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        model_dir = build_model(Path(tmp) / "model", setup, device)
        elapsed["build_model"] = round(time.perf_counter() - t0, 1)
        for name in systems:
            label = f"hf-static-{setup['hf_batch']}" if name == "hf-static" else name
            log(f"{label} …")
            t0 = time.perf_counter()
            r = None
            try:
                r = runners[name](model_dir)
                lengths = [len(o) for o in r["outputs"]]
                if lengths != [t["max_tokens"] for t in trace]:
                    raise RuntimeError(f"{label}: output lengths differ from the trace")
            except Exception as exc:  # one system failing (an OOM, an API change) keeps the others' numbers
                failed[label] = f"{type(exc).__name__}: {exc}"[:500]
                log(f"{label} FAILED: {failed[label]}")
                r = None
            elapsed[label] = round(time.perf_counter() - t0, 1)
            if r is None:
                free_device_memory()  # outside the except: its traceback no longer holds the failed system's model
                write(document())
                continue
            outputs[label] = r.pop("outputs")
            r["output_tokens"] = output_tokens
            r["output_tokens_per_s"] = output_tokens / r["wall_s"]
            results[label] = r
            log(f"{label}: {r['wall_s']:.2f} s, {r['output_tokens_per_s']:.1f} output tok/s "
                f"({elapsed[label]:.0f} s with start-up and warm-up)")
            write(document())
    elapsed["total"] = round(time.perf_counter() - t_start, 1)
    doc = document()
    met = doc["goals"]
    print(json.dumps({"results": {k: {kk: v.get(kk) for kk in ("wall_s", "output_tokens_per_s")} for k, v in doc["results"].items()},
                      "goals": met, "failed": failed, "elapsed_s": elapsed}, indent=2))
    for name, g in met.items():
        log(f"{'PASS' if g['met'] else 'FAIL'}  {name}: {g['value']} (goal {g['goal']})")
    write(doc)
    if out_path is not None:
        log(f"wrote {out_path}")
    if failed:
        sys.exit(1)


if __name__ == "__main__":
    main()
