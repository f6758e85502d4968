"""The load test: load the dataset → warm up → one pass per rate (schedule → send → aggregate) → one
Measurement.

A pass draws the arrival times first, then starts every request at its time; with a concurrency cap a
request that arrives while the cap is full waits, and its send time (the TTFT clock's start) is when it
really goes out, as in `vllm bench serve`. Warm-up requests use the first prompts of the dataset, at most
``warmup`` of them and for at most ``warmup_timeout_s``; they are never counted.

Pass i of a sweep draws its arrivals with seed + i, and, for the random dataset, its prompts too (pass 0's
are those of a single-rate run with the same seed): a pass that re-sent an earlier pass's prompts would
find them in the server's prefix cache. A file dataset has only its prompts, so every pass sends them again
and the result says so. Each request carries ``x-request-id: accelkit-<8 hex, new each run>-r<rate>-<i>``
(warm-up: ``-warmup-<i>``), to find it in the server's logs.
"""

from __future__ import annotations

import asyncio
import math
import re
import secrets
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext
from typing import Any

from accelkit.core import AccelkitError, Measurement, UserError, summarize
from accelkit.hardware.detect import environment
from accelkit.loadtest.arrivals import arrival_offsets, describe_arrivals
from accelkit.loadtest.client import OpenAIStreamClient
from accelkit.loadtest.config import LoadTestConfig, rate_json
from accelkit.loadtest.datasets import SampleRequest, load_dataset, sharegpt_note
from accelkit.loadtest.metrics import RequestRecord, compute_metrics, pkey
from accelkit.loadtest.structured import OutputChecker, sent_as

__all__ = ["LoadTestInterrupted", "run_loadtest", "run_loadtest_async", "run_pass"]

Progress = Callable[[str], None]
Notice = Callable[[str], None]


class LoadTestInterrupted(KeyboardInterrupt):
    """Ctrl-C (or SIGTERM turned into it) after at least one pass finished: ``result`` is the Measurement of the
    finished passes (``details.interrupted`` true, ``details.unfinished`` naming the rates not measured), so a sweep
    keeps what it measured, as `accelkit bench` keeps its finished variants. A KeyboardInterrupt, so a caller with
    nothing to keep is interrupted as before."""

    def __init__(self, result: Measurement) -> None:
        super().__init__(f"interrupted; not finished: {', '.join(result.details['unfinished'])}")
        self.result = result

GOODPUT_DEFINITION = (
    "per-request goodput (vLLM bench serve): requests meeting every given SLO / duration; "
    "not DistServe's highest rate at a target SLO attainment"
)

VALIDITY_DEFINITION = (
    "each successful request's output checked after the pass: truncated when finish_reason is 'length', else valid "
    "or invalid against the constraint; valid_share = valid / checked"
)


async def run_pass(
    client: OpenAIStreamClient, requests: list[SampleRequest], *, rate: float, burstiness: float, seed: int,
    max_concurrency: int | None, tag: str = "run", request_id_prefix: str = "accelkit-run-",
    on_progress: Progress | None = None,
) -> tuple[list[RequestRecord], float]:
    """Send ``requests`` at gamma arrivals of ``rate`` req/s; returns the records and the wall duration.
    ``tag`` names the pass in progress lines; request i is sent as ``x-request-id: <request_id_prefix><i>``."""
    offsets = arrival_offsets(len(requests), rate, burstiness, seed=seed)
    records = [RequestRecord(index=i, input_len=r.input_len, max_tokens=r.output_len, scheduled_s=offsets[i])
               for i, r in enumerate(requests)]
    cap = asyncio.Semaphore(max_concurrency) if max_concurrency else None
    done = 0
    loop = asyncio.get_running_loop()
    t0 = time.perf_counter()
    start = loop.time()

    async def fire(i: int) -> None:
        nonlocal done
        delay = start + offsets[i] - loop.time()  # absolute schedule: no drift from sleep overshoot
        if delay > 0:
            await asyncio.sleep(delay)
        async with cap if cap is not None else nullcontext():
            await client.send(requests[i], records[i], t0, request_id=f"{request_id_prefix}{i}")
        done += 1
        if on_progress is not None:
            on_progress(f"{tag}: {done}/{len(requests)} done")

    await asyncio.gather(*(fire(i) for i in range(len(requests))))
    return records, time.perf_counter() - t0


async def _warmup(client: OpenAIStreamClient, requests: list[SampleRequest], config: LoadTestConfig,
                  run_id: str, on_progress: Progress | None) -> dict[str, Any]:
    """Warm the server with the first prompts; bounded in count and in time. All failing is an error."""
    n = min(config.warmup, len(requests))
    info: dict[str, Any] = {"requests": n, "completed": 0, "failed": 0, "timed_out": False, "duration_s": 0.0}
    if n == 0:
        return info
    t = time.perf_counter()
    try:
        records, _ = await asyncio.wait_for(
            run_pass(client, requests[:n], rate=math.inf, burstiness=1.0, seed=config.seed,
                     max_concurrency=config.max_concurrency, tag="warmup", request_id_prefix=f"{run_id}-warmup-",
                     on_progress=on_progress),
            timeout=config.warmup_timeout_s,
        )
    except TimeoutError:
        info.update(timed_out=True, duration_s=time.perf_counter() - t)
        return info
    info.update(completed=sum(r.success for r in records), failed=sum(not r.success for r in records),
                duration_s=time.perf_counter() - t)
    if info["completed"] == 0:
        first = next(r.error for r in records if r.error)
        if first.startswith("HTTP 404"):
            await check_served(client, config)
        raise AccelkitError(f"warm-up: none of {n} requests to {config.url} succeeded; first error: {first}"
                            f"{context_hint(first, config, requests[0])}")
    return info


_CONTEXT = re.compile(r"context length|context_length|too long|maximum length|max_model_len", re.I)


def context_hint(error: str, config: LoadTestConfig, request: SampleRequest) -> str:
    """What to change when the server refused a prompt as too long for its context: the random dataset's prompt
    length is --random-input-len *words*, and a word is one token only to a large BPE vocabulary (a small
    tokenizer splits each into several), so name the flag and, when the server said both numbers, a length that
    fits."""
    if config.dataset != "random" or not _CONTEXT.search(error or ""):
        return ""
    hint = (f"; the prompts are --random-input-len {config.random_input_len} random words (a word is one token or "
            f"more, depending on the server's tokenizer) and ask for --random-output-len {config.random_output_len} "
            "tokens: lower --random-input-len")
    limit = re.search(r"maximum context length is ([\d,]+)", error)
    sent = re.search(r"([\d,]+) input tokens", error)
    if limit and sent and request.input_len > 0:
        per_word = int(sent.group(1).replace(",", "")) / request.input_len
        room = int(limit.group(1).replace(",", "")) - config.random_output_len
        words = int(room / per_word / (1 + config.random_range_ratio))  # the longest prompt of the range fits
        if words >= 1:
            hint += (f" to about {words} (this server made {per_word:.1f} tokens of each word; context "
                     f"{limit.group(1)} tokens, {config.random_output_len} of them for the output)")
    return hint


def _load(config: LoadTestConfig, num_prompts: int, seed: int) -> tuple[list[SampleRequest], dict[str, Any]]:
    return load_dataset(config.dataset, num_prompts, input_len=config.random_input_len,
                        output_len=config.random_output_len, range_ratio=config.random_range_ratio, seed=seed,
                        sharegpt_output_len=config.sharegpt_output_len)


async def _run(config: LoadTestConfig, run_id: str, on_progress: Progress | None, on_notice: Notice,
               state: dict[str, Any] | None = None) -> tuple[dict[str, Any], list[tuple[float, list[RequestRecord], dict[str, Any]]], dict[str, Any]]:
    """``state`` (when given) holds the dataset, the warm-up and each pass as it finishes: what an interrupt that
    never reaches this coroutine (a SIGTERM raised in the event loop's select) still leaves to keep."""
    state = {} if state is None else state
    requests, dataset_info = _load(config, config.num_prompts + config.warmup, config.seed)
    if (note := sharegpt_note(config.dataset, dataset_info)) is not None:
        on_notice(note)
    warm, measured = requests[: config.warmup], requests[config.warmup:]
    del requests  # the slices are copies: keep one pass's prompts in memory, not two
    fresh = dataset_info["kind"] == "random"  # a file has only its own prompts to send again
    if len(config.rates) > 1:
        dataset_info["sweep_prompts"] = (
            "fresh random prompts each pass (pass i drawn with seed + i)" if fresh else
            "the same prompts every pass: passes after the first may hit the server's prefix cache")
    passes: list[tuple[float, list[RequestRecord], dict[str, Any]]] = state.setdefault("passes", [])
    state["dataset"] = dataset_info
    checker = None if config.structured_outputs is None else OutputChecker(config.structured_outputs)
    async with OpenAIStreamClient(config) as client:
        warmup_info = state["warmup"] = await _warmup(client, warm, config, run_id, on_progress)
        for i, rate in enumerate(config.rates):
            if i > 0 and fresh:  # drawn between passes, outside their clocks, one pass in memory at a time
                measured, _ = _load(config, config.num_prompts, config.seed + i)
            records, duration = await run_pass(
                client, measured, rate=rate, burstiness=config.burstiness, seed=config.seed + i,
                max_concurrency=config.max_concurrency, tag=f"rate {rate:g}", request_id_prefix=f"{run_id}-r{rate:g}-",
                on_progress=on_progress,
            )
            metrics = compute_metrics(records, duration, percentiles=config.percentiles, slo=config.slo)
            if checker is not None:  # after the pass, outside its clock
                metrics["structured_outputs"] = checker.check_records(records)
            passes.append((rate, records, metrics))
            if i == 0 and metrics["completed"] == 0 and _is_404(metrics):  # --warmup 0: the first pass is the check
                await check_served(client, config)
    return dataset_info, passes, warmup_info


def _is_404(metrics: dict[str, Any]) -> bool:
    return any(f["error"].startswith("HTTP 404") for f in metrics["failures"])


async def check_served(client: OpenAIStreamClient, config: LoadTestConfig) -> None:
    """After every request failed with HTTP 404: a model that ``GET /v1/models`` does not list is the user's
    mistake — one line naming it and the served names (exit 2), not a runtime failure (exit 1). Asked only then:
    servers such as SGLang and TGI answer any model name, so a model missing from their list is no reason to refuse
    a run up front. Nothing when the server does not list its models, or lists this one (a 404 for another reason)."""
    served = await client.served_models()
    if served is None or config.model in served:
        return
    names = ", ".join(repr(name) for name in served[:10]) + (f" and {len(served) - 10} more" if len(served) > 10 else "")
    close = [name for name in served if name.lower() == config.model.lower() or name.endswith("/" + config.model)]
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise UserError(f"--model {config.model!r} is not served by {config.root_url} (HTTP 404): GET /v1/models lists "
                    f"{names}; {hint}pass one of these names as --model")


def run_loadtest(config: LoadTestConfig, *, on_progress: Progress | None = None,
                 on_notice: Notice | None = None) -> Measurement:
    """Run the whole load test and return it as a Measurement (kind 'loadtest'); see :func:`to_measurement`.
    ``on_notice`` gets the lines a user must read — what a ShareGPT file's filter skipped (at the start), the requests
    the server refused with HTTP 429 (at the end, also in ``details.warnings``); by default they go to stderr.

    Called where an event loop is already running (Jupyter, an async app), the test runs on a worker thread with
    its own loop — a loop cannot be re-entered — and this call blocks that loop until it ends (``on_progress`` is
    then called from the worker); ``await run_loadtest_async(config)`` there leaves the loop free instead."""
    _check_config(config)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return _run_own_loop(config, on_progress, on_notice)
    with ThreadPoolExecutor(1, thread_name_prefix="accelkit-loadtest") as worker:
        return worker.submit(asyncio.run, run_loadtest_async(config, on_progress=on_progress,
                                                             on_notice=on_notice)).result()


def _run_own_loop(config: LoadTestConfig, on_progress: Progress | None, on_notice: Notice | None) -> Measurement:
    """The test on a loop of its own (no loop was running); an interrupt after a pass raises
    :class:`LoadTestInterrupted` with the finished passes, before any a plain KeyboardInterrupt."""
    state: dict[str, Any] = {}
    result: Measurement | None = None
    try:
        result = asyncio.run(_collecting(config, state, on_progress, on_notice))
    except KeyboardInterrupt:  # raised in the event loop itself (a second Ctrl-C)
        state["interrupted"] = True
    if (deferred := state.pop("sigterm", None)) is not None:  # the caller's SIGTERM handler, now the loop is shut
        try:
            deferred[0](deferred[1], None)
        except KeyboardInterrupt:
            state["interrupted"] = True
    if not state.get("interrupted") and result is not None:  # None only when interrupted
        return result
    # the passes finished before the interrupt are kept (found in review: they were all lost)
    partial = _interrupted_result(config, state)
    if partial is None:
        raise KeyboardInterrupt
    raise LoadTestInterrupted(partial)


async def _collecting(config: LoadTestConfig, state: dict[str, Any], on_progress: Progress | None,
                      on_notice: Notice | None) -> Measurement | None:
    """:func:`run_loadtest_async` for :func:`run_loadtest`'s own loop: an interrupt ends it with None and
    ``state["interrupted"]`` (the passes finished so far in ``state``). Ctrl-C cancels the task (asyncio.run's own
    handler); a SIGTERM handler of the caller's (the CLI turns SIGTERM into KeyboardInterrupt) is deferred the same
    way — the task is cancelled and the handler runs after the loop (``state["sigterm"]``): raised inside the loop,
    the KeyboardInterrupt could land in a task (left unretrieved, its traceback printed) or in an async generator's
    finalizer, where Python ignores it and the run went on (found in review)."""
    task, loop = asyncio.current_task(), asyncio.get_running_loop()
    previous: Any = None
    if task is not None and threading.current_thread() is threading.main_thread() \
            and callable(signal.getsignal(signal.SIGTERM)):
        def on_sigterm(signum: int, frame: Any) -> None:
            state["sigterm"] = (previous, signum)
            loop.call_soon_threadsafe(task.cancel)

        previous = signal.signal(signal.SIGTERM, on_sigterm)
    try:
        return await run_loadtest_async(config, on_progress=on_progress, on_notice=on_notice, _state=state)
    except (KeyboardInterrupt, asyncio.CancelledError):
        state["interrupted"] = True
        return None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _check_config(config: Any) -> None:
    """A dict of settings (or None) was an AttributeError ('dict' object has no attribute 'num_prompts') from inside
    the run: one line naming it and what to pass."""
    if not isinstance(config, LoadTestConfig):
        raise TypeError(f"config={config!r} is not a LoadTestConfig; pass LoadTestConfig(base_url=..., model=..., ...) "
                        "(LoadTestConfig(**settings) for a dict)")


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


async def run_loadtest_async(config: LoadTestConfig, *, on_progress: Progress | None = None,
                             on_notice: Notice | None = None, _state: dict[str, Any] | None = None) -> Measurement:
    """:func:`run_loadtest` as a coroutine, for a caller that is already inside an event loop."""
    _check_config(config)
    notice = on_notice or _to_stderr
    run_id = f"accelkit-{secrets.token_hex(4)}"  # new each run: the server's logs tell runs apart
    state = {} if _state is None else _state
    state.update(run_id=run_id, notice=notice)
    dataset_info, passes, warmup_info = await _run(config, run_id, on_progress, notice, state)
    refused = refusal_warning(passes)
    if refused is not None:  # before the error below too: a run that every 429 failed says why
        notice(refused)
    if all(m["completed"] == 0 for _, _, m in passes):
        first = passes[0][2]["failures"][0]["error"] if passes[0][2]["failures"] else "unknown"
        raise AccelkitError(f"no request to {config.url} completed; first error: {first}")
    return to_measurement(config, dataset_info, passes, warmup_info, run_id=run_id,
                          warnings=[] if refused is None else [refused])


def _interrupted_result(config: LoadTestConfig, state: dict[str, Any]) -> Measurement | None:
    """The Measurement of the passes an interrupt left finished (None when none finished, or none of them completed a
    request): ``details.interrupted`` true and ``details.unfinished`` the rates not measured, e.g. ``["rate 10"]``."""
    passes = state.get("passes") or []
    if not passes or all(m["completed"] == 0 for _, _, m in passes):
        return None
    refused = refusal_warning(passes)
    if refused is not None:
        state["notice"](refused)
    result = to_measurement(config, state["dataset"], passes, state["warmup"], run_id=state["run_id"],
                            warnings=[] if refused is None else [refused])
    result.details.update(interrupted=True, unfinished=[f"rate {r:g}" for r in config.rates[len(passes):]])
    return result


#: what a 429 from `accelkit serve` says (accelkit/serve/server), and the server flags that raise that limit
_SERVER_LIMITS = (
    ("--max-connections-per-client", "--max-connections-per-client (open connections one client address may hold; "
                                     "default --max-num-seqs + --max-queue + 32)"),
    ("waiting queue is full", "--max-queue (requests that may wait beyond the --max-num-seqs running; default 256)"),
)


def refusal_warning(passes: list[tuple[float, list[RequestRecord], dict[str, Any]]]) -> str | None:
    """The warning for the requests the server refused with HTTP 429 (None when none was): how many, at which rates,
    the server's own messages, and what to change — send fewer at once (--max-concurrency) or raise the server's
    limits (the `accelkit serve` flags its messages name). Such a refusal is a failed request, as in vLLM."""
    refused = [(rate, r) for rate, records, _ in passes for r in records if r.status_code == 429]
    if not refused:
        return None
    total = sum(len(records) for _, records, _ in passes)
    by_rate = Counter(f"{rate:g}" for rate, _ in refused)
    where = "" if len(passes) == 1 else " (" + ", ".join(f"rate {k}: {n}" for k, n in by_rate.items()) + ")"
    said = Counter((r.error or "").removeprefix("HTTP 429: ") for _, r in refused).most_common()
    messages = "; ".join(f"{n} × {text!r}" for text, n in said[:3]) + ("; …" if len(said) > 3 else "")
    flags = [hint for needle, hint in _SERVER_LIMITS if any(needle in text for text, _ in said)]
    fix = "with --max-concurrency N (at most what the server admits), or raise the server's limits"
    if flags:  # the server is `accelkit serve`: its messages name its limits
        fix = ("with --max-concurrency N (for `accelkit serve`, N at most its --max-num-seqs + --max-queue), or start "
               "`accelkit serve` with a higher " + " and ".join(flags))
    return (f"warning: {len(refused)} of {total} requests{where} got HTTP 429 Too Many Requests and count as failed — "
            f"the server refused them: {messages}. The load tester opens one connection per request in flight, as "
            f"`vllm bench serve` does, and at a high --request-rate (inf: all at once) that is more than this server "
            f"admits (vLLM's own server queues without a limit). Cap the requests in flight {fix}.")


def curve_point(rate: float, metrics: dict[str, Any]) -> dict[str, Any]:
    """One point of the latency-throughput curve."""
    keep = [pkey(q) for q in (50, 90, 99)]
    validity = metrics.get("structured_outputs")
    return {
        "rate": rate_json(rate), "request_throughput": metrics["request_throughput"],
        "output_throughput": metrics["output_throughput"], "total_token_throughput": metrics["total_token_throughput"],
        "goodput": metrics["goodput"], "completed": metrics["completed"], "failed": metrics["failed"],
        **{name: {k: metrics[name][k] for k in keep} for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")},
        **({} if validity is None else {"valid_share": validity["valid_share"]}),
    }


def to_measurement(config: LoadTestConfig, dataset_info: dict[str, Any],
                   passes: list[tuple[float, list[RequestRecord], dict[str, Any]]], warmup_info: dict[str, Any],
                   *, run_id: str | None = None, warnings: list[str] | None = None) -> Measurement:
    """details: config, arrival model, dataset, warm-up, ``structured_outputs`` (the constraint and the field that
    carried it; None without one), ``curve`` (one point per rate), ``passes`` (full metrics, with
    ``structured_outputs`` counts when constrained, and per-request records); samples: ``ttft_s``/``tpot_s``/``itl_s``/``e2e_s`` of the last pass
    and, for a sweep, ``<name>@<rate>`` for every pass."""
    sweep = len(passes) > 1
    samples: dict[str, list[float]] = {}
    for rate, records, _ in passes:
        series = _series(records)
        if sweep:
            samples.update({f"{k}@{rate:g}": v for k, v in series.items()})
    samples.update(_series(passes[-1][1]))
    last_rate, _, last = passes[-1]
    rates = ",".join(f"{r:g}" for r, _, _ in passes)
    constraint = config.structured_outputs
    structured = None if constraint is None else {
        "kind": constraint.kind, "constraint": constraint.describe(),
        "sent_as": sent_as(constraint, config.endpoint, guided_fields=config.guided_fields),
        "validity_definition": VALIDITY_DEFINITION,
    }
    return Measurement(
        kind="loadtest",
        name=f"{config.model} {config.endpoint} @ {rates} req/s" + ("" if constraint is None else f" · {constraint.kind}"),
        throughput=last["output_throughput"],
        throughput_unit="output tokens/s",
        latency_s=summarize(samples["e2e_s"]) if samples["e2e_s"] else None,
        details={
            "config": config.public_dict(),
            "url": config.url,
            "arrivals": {"distribution": "gamma", "burstiness": config.burstiness,
                         "per_rate": [describe_arrivals(r, config.burstiness) for r, _, _ in passes]},
            "max_concurrency": config.max_concurrency,
            "ignore_eos": config.ignore_eos,
            "dataset": dataset_info,
            "slo": config.slo.to_dict(),
            "structured_outputs": structured,
            "goodput_definition": GOODPUT_DEFINITION,
            "percentiles": list(config.percentiles),
            "warmup": warmup_info,
            "request_id_prefix": None if run_id is None else f"{run_id}-",
            "curve": [curve_point(rate, m) for rate, _, m in passes],
            "passes": [{"rate": rate_json(rate), **m, "requests": [r.to_dict() for r in records]}
                       for rate, records, m in passes],
            "summary_rate": rate_json(last_rate),
            "warnings": list(warnings or []),
            "interrupted": False,  # Ctrl-C/SIGTERM: the finished passes only, ``unfinished`` naming the other rates
            "unfinished": [],
        },
        samples=samples,
        environment=_environment(),
    )


def _series(records: list[RequestRecord]) -> dict[str, list[float]]:
    ok = [r for r in records if r.success]
    return {
        "ttft_s": [r.ttft_s for r in ok],  # type: ignore[misc]
        "tpot_s": [t for r in ok if (t := r.tpot_s) is not None],
        "itl_s": [g for r in ok for g in r.itl_s],
        "e2e_s": [r.e2e_s for r in ok],  # type: ignore[misc]
    }


def _environment() -> dict[str, Any]:
    return {**environment(with_torch=False), "client": "accelkit loadtest (httpx)"}
