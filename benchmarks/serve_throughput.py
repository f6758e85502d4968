"""Offline serving throughput: accelkit's engine vs transformers, same model, same request trace, same run.

One trace — ``--num-requests`` (default 64) requests, prompt lengths uniform in [32, 512], output lengths
uniform in [16, 256], all arriving at once, EOS ignored so every system produces exactly the requested
tokens — served by:

* **accelkit**: ``LLM.generate`` (continuous batching, paged KV cache, chunked prefill);
* **hf-static-8**: ``transformers`` ``generate`` on static left-padded batches of 8 in trace order; a batch
  runs until its longest request is done, and only the tokens each request asked for are counted;
* **hf-continuous**: ``transformers`` continuous batching (the ``ContinuousBatchingManager`` behind
  ``generate_batch``, fed request by request so each keeps its own ``max_new_tokens``).

Each system first serves a small warm-up trace (discarded); then the full trace is timed once
(``time.perf_counter``). Output tokens/s = Σ requested output tokens / wall time. accelkit's wall time is
also split by phase (schedule, input preparation, forward, sampling, postprocess) to show where it goes.
Goals from issue #5: accelkit >= 2.3x hf-static-8 and >= 1.3x hf-continuous on this CPU.

    .venv/bin/python benchmarks/serve_throughput.py            # writes benchmarks/results/serve_throughput.json
    .venv/bin/python benchmarks/serve_throughput.py --quick    # 16 requests, for a smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import torch
import transformers

from accelkit.hardware.detect import environment
from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import save_model_dir

OUT = Path(__file__).resolve().parent / "results" / "serve_throughput.json"

# A small Llama (GQA 8:2, head_dim 64), ~10M parameters: big enough that batching pays, small enough that
# the three systems serve the whole trace in a few minutes on 2 CPU cores.
MODEL = {
    "hidden_size": 256, "intermediate_size": 768, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 8192, "max_position_embeddings": 1024,
    "rms_norm_eps": 1e-5, "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": None, "pad_token_id": 3,
}
GOALS = {"hf-static-8": 2.3, "hf-continuous": 1.3}


def build_model(path: Path) -> Path:
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**MODEL)).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = MODEL["pad_token_id"]
    return save_model_dir(model, path)


def make_trace(num: int, *, seed: int, prompt_range=(32, 512), output_range=(16, 256)) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    vocab = MODEL["vocab_size"]
    return [
        {"prompt": [rng.randrange(4, vocab) for _ in range(rng.randint(*prompt_range))],
         "max_tokens": rng.randint(*output_range)}
        for _ in range(num)
    ]


# ---- the three systems -------------------------------------------------------------------------------
class PhaseTimer:
    """Wraps methods with perf_counter accumulators (accelkit's time profile)."""

    def __init__(self) -> None:
        self.total_s: dict[str, float] = defaultdict(float)

    def wrap(self, obj: Any, attr: str, name: str) -> None:
        fn = getattr(obj, attr)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.total_s[name] += time.perf_counter() - t0

        setattr(obj, attr, timed)


def run_accelkit(model_dir: Path, trace: list[dict], warmup: list[dict]) -> dict[str, Any]:
    llm = LLM(str(model_dir), kv_cache_memory_bytes=1 << 30, max_num_seqs=len(trace), max_num_batched_tokens=2048)
    engine = llm.engine

    def serve(reqs: list[dict]) -> list[list[int]]:
        params = [SamplingParams.greedy(r["max_tokens"], ignore_eos=True) for r in reqs]
        return [o.token_ids for o in llm.generate([r["prompt"] for r in reqs], params)]

    serve(warmup)
    timer = PhaseTimer()
    timer.wrap(engine.scheduler, "schedule", "schedule")
    timer.wrap(engine.runner, "prepare", "prepare_inputs")
    timer.wrap(engine.runner.model, "forward", "model_forward")
    timer.wrap(engine.runner.model, "compute_logits", "lm_head")
    timer.wrap(engine.runner, "sample", "sample")
    timer.wrap(engine, "_postprocess", "postprocess")
    steps0 = engine.get_stats().num_steps
    t0 = time.perf_counter()
    outputs = serve(trace)
    wall = time.perf_counter() - t0
    stats = engine.get_stats()
    profile = {k: round(v, 3) for k, v in timer.total_s.items()}
    profile["other"] = round(wall - sum(timer.total_s.values()), 3)  # the phases do not nest
    return {
        "wall_s": wall, "outputs": outputs, "profile_s": profile, "num_steps": stats.num_steps - steps0,
        "num_preemptions": stats.num_preemptions, "kv_blocks": stats.num_blocks,
    }


def run_hf_static(model_dir: Path, trace: list[dict], warmup: list[dict], batch_size: int = 8) -> dict[str, Any]:
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    pad = MODEL["pad_token_id"]

    def serve(reqs: list[dict]) -> tuple[list[list[int]], int]:
        outputs, computed = [], 0
        for i in range(0, len(reqs), batch_size):
            batch = reqs[i : i + batch_size]
            width = max(len(r["prompt"]) for r in batch)
            ids = torch.tensor([[pad] * (width - len(r["prompt"])) + r["prompt"] for r in batch])
            mask = torch.tensor([[0] * (width - len(r["prompt"])) + [1] * len(r["prompt"]) for r in batch])
            new = max(r["max_tokens"] for r in batch)
            gen = transformers.GenerationConfig(do_sample=False, max_new_tokens=new,
                                                eos_token_id=None, pad_token_id=pad)
            with torch.inference_mode():
                out = model.generate(input_ids=ids, attention_mask=mask, generation_config=gen)
            computed += new * len(batch)
            outputs += [out[j, width : width + r["max_tokens"]].tolist() for j, r in enumerate(batch)]
        return outputs, computed

    serve(warmup)
    t0 = time.perf_counter()
    outputs, computed = serve(trace)
    return {"wall_s": time.perf_counter() - t0, "outputs": outputs, "generated_incl_padding": computed}


def run_hf_continuous(model_dir: Path, trace: list[dict], warmup: list[dict]) -> dict[str, Any]:
    from transformers.generation.continuous_batching.utils import WorkloadHints

    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    gen = transformers.GenerationConfig(do_sample=False, max_new_tokens=max(r["max_tokens"] for r in trace),
                                        eos_token_id=None, pad_token_id=MODEL["pad_token_id"])
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
        t0 = time.perf_counter()
        outputs = serve(manager, trace, "req-")
        wall = time.perf_counter() - t0
    return {"wall_s": wall, "outputs": outputs}


# ---- main --------------------------------------------------------------------------------------------
def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--num-requests", type=int, default=64)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="16 requests; prints only (does not touch the committed JSON)")
    ap.add_argument("--systems", default="accelkit,hf-static-8,hf-continuous")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--threads", type=int, default=1,
                    help="torch threads for every system (default 1: on a shared 2-core machine two OpenMP threads "
                         "stall at every parallel op whenever another job holds a core)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    num = 16 if args.quick else args.num_requests
    out_path = args.out or (None if args.quick else OUT)  # a quick run only prints, unless --out is given
    trace = make_trace(num, seed=args.seed)
    warmup = make_trace(8, seed=args.seed + 1, output_range=(8, 16))
    output_tokens = sum(r["max_tokens"] for r in trace)
    runners = {"accelkit": run_accelkit, "hf-static-8": run_hf_static, "hf-continuous": run_hf_continuous}
    results: dict[str, Any] = {}
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp) / "model")
        for name in args.systems.split(","):
            print(f"[serve_throughput] {name} …", flush=True)
            r = runners[name](model_dir, trace, warmup)
            assert [len(o) for o in r["outputs"]] == [t["max_tokens"] for t in trace], name
            r["output_tokens"] = output_tokens
            r["output_tokens_per_s"] = output_tokens / r["wall_s"]
            results[name] = r
            print(f"[serve_throughput] {name}: {r['wall_s']:.1f} s, {r['output_tokens_per_s']:.1f} output tok/s", flush=True)
    load_after = os.getloadavg()

    ref = results.get("accelkit", {}).get("outputs")
    for name, r in results.items():
        outs = r.pop("outputs")
        if ref is not None and name != "accelkit":
            r["identical_to_accelkit"] = sum(a == b for a, b in zip(outs, ref, strict=True))
    speedups = {}
    if "accelkit" in results:
        for name, goal in GOALS.items():
            if name in results:
                ratio = results["accelkit"]["output_tokens_per_s"] / results[name]["output_tokens_per_s"]
                speedups[name] = {"ratio": round(ratio, 3), "goal": goal, "met": ratio >= goal}
    doc = {
        "benchmark": "serve_throughput",
        "definition": "output tokens/s = sum of requested output tokens / wall time of the whole trace (all requests at t=0)",
        "trace": {
            "num_requests": num, "seed": args.seed, "prompt_len_range": [32, 512], "output_len_range": [16, 256],
            "prompt_tokens": sum(len(r["prompt"]) for r in trace), "output_tokens": output_tokens,
            "arrival": "all at once", "ignore_eos": True, "sampling": "greedy",
        },
        "model": {"architecture": "LlamaForCausalLM", "dtype": "float32", "random_init_seed": 0, **MODEL},
        "results": {k: {kk: (round(vv, 3) if isinstance(vv, float) else vv) for kk, vv in v.items()} for k, v in results.items()},
        "speedup": speedups,
        "load_average": {"before": load_before, "after": load_after, "note": "shared 2-core machine; other jobs may run"},
        "environment": environment(with_torch=True),
    }
    print(json.dumps({"results": doc["results"], "speedup": speedups}, indent=2))
    if out_path is not None:
        out_path.parent.mkdir(parents=True, exist_ok=True)
        out_path.write_text(json.dumps(doc, indent=2) + "\n")
        print(f"[serve_throughput] wrote {out_path}")


if __name__ == "__main__":
    main()
