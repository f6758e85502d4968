"""What a request's own path through ``accelkit serve`` costs beside the engine: a small completion's latency on
the idle server and beside 8 busy clients, with the server's request work placed as it is now (small work on the
event loop, a response that is not streamed woken once) and as it was (parsing, the prompt list and tokenization
each in a worker thread; the event loop woken with every output), in the same run.

The server of each way is ``accelkit serve`` of the tiny byte-level test model (the one
``benchmarks/structured_hostile.py`` serves) as its own process. The earlier way is the same code with the
placement undone when the server starts (``serving_engine.INLINE_BODY_BYTES`` and ``INLINE_PROMPT_LEN`` set to 0,
every output delivered): nothing else differs. The ways alternate, ``--repeats`` servers each, so that a drift of
this machine's speed falls on both.

Each server: ``--idle`` canaries (a 4-token completion) one after another, then ``--rounds`` rounds in which a
clients' process sends 22 such completions from 8 threads at once while this one sends two canaries — one as the
round starts (it arrives with the burst), one 50 ms later. Reported per way: the idle canary's p50/p90, the loaded
ones (each, and the first and second of each round apart), loaded ÷ idle, and the server's CPU time per request
(all its threads: with 2 torch threads the idle server's OpenMP workers spin between steps).

    .venv/bin/python benchmarks/serve_request_path.py [--repeats 3] [--rounds 60]

The two ways run torch on every usable core (``--cpu-threads N``). ``--one-thread`` adds a third way, the server as
now with ``--cpu-threads 1`` (on two cores, what ``accelkit serve`` takes by default): with torch's two OpenMP threads on
two cores, every parallel region of a step waits for a thread the clients' burst has taken the core from, which
the canary that arrives with the burst pays for (docs/engine.md, "Threads on a CPU").

Writes benchmarks/results/serve_request_path.json (the environment included).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))
from structured_hostile import body, post, send_all, served  # noqa: E402  (after the path)

from accelkit.core.device import usable_cores  # noqa: E402

OUT = Path(__file__).resolve().parent / "results" / "serve_request_path.json"
BURST = 22  # completions a round's clients send (as many as structured_hostile.py's hostile round)

# `accelkit serve` with the request work placed as before: every parse, prompt list and tokenization in a worker
# thread, every output brought to the event loop
HOPS = """
import sys
from accelkit.serve.server import serving_engine
serving_engine.INLINE_BODY_BYTES = serving_engine.INLINE_PROMPT_LEN = 0
class EveryOutput(serving_engine.InFlight):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **{**kwargs, "final_only": False})
serving_engine.InFlight = EveryOutput
from accelkit.cli.app import main
sys.argv[0] = "accelkit"
main()
"""
NOW = "import sys; from accelkit.cli.app import main; sys.argv[0] = 'accelkit'; main()"
#: way → (the server's code, its extra flags); ``--one-thread`` adds "now_1_thread". The two ways run torch on every
#: usable core, as the committed results were measured (``accelkit serve`` has left one core to its HTTP server by
#: default since: the flag keeps a rerun comparable)
ALL_CORES = ["--cpu-threads", str(usable_cores())]
WAYS: dict[str, tuple[str, list[str]]] = {"now": (NOW, ALL_CORES), "hops": (HOPS, ALL_CORES)}
ONE_THREAD = ("now_1_thread", (NOW, ["--cpu-threads", "1"]))


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def ms(values: list[float]) -> dict[str, float]:
    return {"n": len(values), "p50": round(statistics.median(values) * 1e3, 3), "p90": round(pct(values, 0.9) * 1e3, 3)}


def measure(way: tuple[str, list[str]], model: Path, log_file: Path, idle_n: int, rounds: int,
            clients: ProcessPoolExecutor) -> dict[str, Any]:
    import httpx
    import psutil

    code, flags = way
    with served(model, log_file, flags, launcher=[sys.executable, "-c", code]) as (url, pid), \
            httpx.Client(timeout=120) as client:
        server = psutil.Process(pid)

        def cpu() -> float:
            times = server.cpu_times()
            return times.user + times.system

        for _ in range(20):  # warm-up
            post(client, url, body({}))
        c0 = cpu()
        idle = [post(client, url, body({}))[1] for _ in range(idle_n)]
        idle_cpu = (cpu() - c0) / idle_n
        clients.submit(send_all, url, [body({})]).result()
        first, second = [], []
        c0 = cpu()
        for _ in range(rounds):
            burst = clients.submit(send_all, url, [body({})] * BURST)
            first.append(post(client, url, body({}))[1])
            time.sleep(0.05)
            second.append(post(client, url, body({}))[1])
            statuses = {status for status, _, _ in burst.result()}
            if statuses != {200}:
                raise RuntimeError(f"the clients' requests were answered {sorted(statuses)}")
        loaded_cpu = (cpu() - c0) / (rounds * (BURST + 2))
    idle_ms, loaded_ms = ms(idle), ms(first + second)
    return {"idle_ms": idle_ms, "loaded_ms": loaded_ms, "loaded_first_ms": ms(first), "loaded_second_ms": ms(second),
            "p50_over_idle": round(loaded_ms["p50"] / idle_ms["p50"], 3),
            "p90_over_idle": round(loaded_ms["p90"] / idle_ms["p90"], 3),
            "server_cpu_ms_per_request": {"idle": round(idle_cpu * 1e3, 3), "loaded": round(loaded_cpu * 1e3, 3)}}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3, help="servers of each way, alternating")
    ap.add_argument("--idle", type=int, default=200, help="canaries on the idle server")
    ap.add_argument("--rounds", type=int, default=60, help="loaded rounds per server")
    ap.add_argument("--one-thread", action="store_true",
                    help="a third way: the server as now with --cpu-threads 1 (a core left to its event loop and to "
                    "the clients): what torch's second OpenMP thread costs a request arriving with a burst")
    ap.add_argument("--out", type=Path, default=OUT, help="default: benchmarks/results/serve_request_path.json")
    args = ap.parse_args()
    ways = dict([*WAYS.items(), ONE_THREAD]) if args.one_thread else WAYS
    if args.repeats < 1 or args.idle < 10 or args.rounds < 5:
        ap.error(f"--repeats {args.repeats} --idle {args.idle} --rounds {args.rounds}: need repeats ≥ 1, idle ≥ 10, "
                 "rounds ≥ 5")
    import os

    from accelkit.hardware.detect import environment
    from accelkit.serve.testing import save_bytelevel_model

    load_before = [round(v, 2) for v in os.getloadavg()]
    runs: dict[str, list[dict[str, Any]]] = {way: [] for way in ways}
    with tempfile.TemporaryDirectory() as tmp, \
            ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn")) as clients:
        model = save_bytelevel_model(Path(tmp) / "m", seed=2)
        for r in range(args.repeats):
            for way in ways:
                run = measure(ways[way], model, Path(tmp) / f"{way}-{r}.log", args.idle, args.rounds, clients)
                runs[way].append(run)
                print(f"[{r + 1}/{args.repeats}] {way}: idle p50 {run['idle_ms']['p50']:.2f} ms, loaded p50 "
                      f"{run['loaded_ms']['p50']:.2f} ms ({run['p50_over_idle']:.2f}×), p90 "
                      f"{run['loaded_ms']['p90']:.2f} ms ({run['p90_over_idle']:.2f}×); server CPU per request "
                      f"{run['server_cpu_ms_per_request']}", file=sys.stderr, flush=True)
    figures = {"idle_p50_ms": ("idle_ms", "p50"), "loaded_p50_ms": ("loaded_ms", "p50"),
               "loaded_p90_ms": ("loaded_ms", "p90"), "loaded_first_p50_ms": ("loaded_first_ms", "p50"),
               "loaded_second_p50_ms": ("loaded_second_ms", "p50")}
    summary = {way: {**{name: statistics.median(run[key][q] for run in rs) for name, (key, q) in figures.items()},
                     **{name: statistics.median(run[name] for run in rs)
                        for name in ("p50_over_idle", "p90_over_idle")}}
               for way, rs in runs.items()}
    doc = {
        "benchmark": "serve_request_path",
        "command": "python benchmarks/serve_request_path.py " + " ".join(sys.argv[1:]),
        "what": "a 4-token completion of the tiny byte-level model: idle, and beside 8 client threads sending "
                f"{BURST} at once; 'now' places small request work on the event loop and wakes it once for a "
                "response that is not streamed, 'hops' is the same code with every parse, prompt list and "
                "tokenization in a worker thread and every output delivered (the placement before)",
        "settings": {"ways": {way: flags for way, (_, flags) in ways.items()}, "repeats": args.repeats,
                     "idle": args.idle, "rounds": args.rounds, "burst": BURST,
                     "clients": "8 threads in their own process; the canary in this one"},
        "load_average": {"before": load_before, "after": [round(v, 2) for v in os.getloadavg()]},
        "median_of_runs": summary,
        "runs": runs,
        "environment": environment(with_torch=False),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(json.dumps(summary))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
