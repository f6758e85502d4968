"""What the HTTP layer shares: the engine loop (its own thread), admission control for the bounded
waiting queue, and the bridge from engine counters to the vLLM-named Prometheus metrics."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from accelkit.monitor.serving import ServingMetrics
from accelkit.serve.config import ServerConfig
from accelkit.serve.loop import EngineLoop
from accelkit.serve.outputs import EngineStats, RequestOutput


class Admission:
    """Bounded admission: at most ``max_running + max_queue`` requests in flight; the rest get 429.

    Counted here, under one lock, rather than read from the engine, so that a burst of simultaneous
    requests cannot all pass a check made before any of them reached the engine.
    """

    def __init__(self, max_running: int, max_queue: int):
        self.capacity = max_running + max_queue
        self._in_flight = 0
        self._lock = threading.Lock()

    def try_enter(self, n: int = 1) -> bool:
        with self._lock:
            if self._in_flight + n > self.capacity:
                return False
            self._in_flight += n
            return True

    def leave(self, n: int = 1) -> None:
        with self._lock:
            self._in_flight -= n

    @property
    def in_flight(self) -> int:
        return self._in_flight


def thread_runqueue_seconds(native_id: int) -> float | None:
    """How long the thread ``native_id`` of this process has been ready to run but waiting for a core, in all: the
    second field of Linux's ``/proc/self/task/<id>/schedstat`` (ns). None where the kernel keeps no such statistics
    (other systems) or the thread is gone."""
    try:
        with open(f"/proc/self/task/{native_id}/schedstat", "rb") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return None


class MetricsBridge:
    """Engine → Prometheus. ``on_step`` runs on the engine thread after every step; ``on_output`` for
    every output of every request (TTFT at the first token, inter-token gaps, the other per-request histograms at
    finish)."""

    def __init__(self, metrics: ServingMetrics, model_name: str):
        self.m, self.model = metrics, model_name
        metrics.start(model_name)  # every series at zero from start-up, as vLLM exports them
        self._last: EngineStats | None = None
        self._runqueue: float | None = None  # the engine thread's run-queue time at the last scrape
        self._last_token_time: dict[str, float] = {}
        # the labelled children, looked up once: on_output runs for every request on every step
        self._itl = metrics.inter_token_latency.labels(model_name)
        self._ttft = metrics.time_to_first_token.labels(model_name)

    def _inc(self, counter, now: float, before: float, *labels: str) -> None:  # type: ignore[no-untyped-def]
        if now > before:
            counter.labels(self.model, *labels).inc(now - before)

    def on_scrape(self, engine_thread_id: int | None) -> None:
        """Before ``/metrics`` is written: the engine thread's time waiting for a core since the last scrape, read
        here — on the scraping thread — from the kernel (a read on the engine thread would hand the interpreter lock
        to another thread at every step, costing the very wait it measures)."""
        now = thread_runqueue_seconds(engine_thread_id) if engine_thread_id is not None else None
        if now is None:
            return
        if self._runqueue is not None:  # (the first read is the baseline: the thread's time before serving began)
            self._inc(self.m.engine_thread_runqueue_seconds, now, self._runqueue)
        self._runqueue = now

    def on_step(self, stats: EngineStats) -> None:
        m, name, last = self.m, self.model, self._last
        m.num_requests_running.labels(name).set(stats.num_running)
        m.num_requests_waiting.labels(name).set(stats.num_waiting)
        m.kv_cache_usage_perc.labels(name).set(stats.kv_cache_usage)
        if stats.last_step_num_tokens:  # a step that ran nothing (one that only took in an abort) is no iteration
            m.iteration_tokens_total.labels(name).observe(stats.last_step_num_tokens)
            m.engine_step_seconds.labels(name).observe(stats.last_step_seconds)
        self._inc(m.engine_step_cpu_seconds, stats.step_cpu_seconds, last.step_cpu_seconds if last else 0.0)
        self._inc(m.structured_mask_wait_seconds, stats.mask_wait_seconds, last.mask_wait_seconds if last else 0.0)
        for counter, field in ((m.prompt_tokens, "prompt_tokens"), (m.generation_tokens, "generation_tokens"),
                               (m.num_preemptions, "num_preemptions"), (m.prefix_cache_queries, "prefix_cache_queries"),
                               (m.prefix_cache_hits, "prefix_cache_hits")):
            self._inc(counter, getattr(stats, field), getattr(last, field) if last else 0)
        for result in ("allowed", "refused"):
            field = f"first_draws_{result}"
            self._inc(m.structured_first_draws, getattr(stats, field), getattr(last, field) if last else 0, result)
        for reason, count in stats.requests_finished.items():
            self._inc(m.request_success, count, last.requests_finished.get(reason, 0) if last else 0, reason)
        self._last = stats

    def on_structured(self, event: str, seconds: float | None) -> None:
        """:attr:`GrammarCompiler.observer <accelkit.serve.structured.GrammarCompiler.observer>`: a request's spec
        settled (any thread)."""
        m, name = self.m, self.model
        if event in ("compiled", "refused"):
            m.structured_compiles.labels(name, event).inc()
            if seconds is not None:
                m.structured_compile_seconds.labels(name).observe(seconds)
        elif event in ("hit", "shared"):
            m.structured_specs_reused.labels(name, "cached" if event == "hit" else "in_flight").inc()
        elif event == "timeout":
            m.structured_compile_timeouts.labels(name).inc()

    def on_output(self, out: RequestOutput, max_tokens: int | None = None) -> None:
        """TTFT in the step that gave the request its first token (as vLLM: a running request counts, and a
        request that ends before its first token does not); inter-token gaps after it; the rest at finish
        (``max_tokens``: the request's, for ``vllm:request_params_max_tokens``). Each engine request counts apart:
        n > 1 and best_of are one TTFT per choice, as vLLM's child requests."""
        if out.num_new_tokens:
            now = time.monotonic()
            before = self._last_token_time.get(out.request_id)
            if before is not None:
                self._itl.observe(now - before)
            else:  # its first tokens
                ttft = out.metrics.ttft_s
                if ttft is not None:
                    self._ttft.observe(ttft)
            self._last_token_time[out.request_id] = now
        if not out.finished:
            return
        self._last_token_time.pop(out.request_id, None)
        r, m, name = out.metrics, self.m, self.model
        for hist, value in ((m.e2e_request_latency, r.e2e_s),
                            (m.request_queue_time, r.queue_time_s), (m.request_prefill_time, r.prefill_time_s),
                            (m.request_decode_time, r.decode_time_s)):
            if value is not None:
                hist.labels(name).observe(value)
        if r.last_token_time is not None and r.first_scheduled_time is not None:
            m.request_inference_time.labels(name).observe(r.last_token_time - r.first_scheduled_time)
        decode = r.decode_time_s
        if decode is not None:  # (vLLM's: 0 for a request of one token)
            per_token = decode / (r.num_generation_tokens - 1) if r.num_generation_tokens > 1 else 0.0
            m.request_time_per_output_token.labels(name).observe(per_token)
        m.request_prompt_tokens.labels(name).observe(r.num_prompt_tokens)
        m.request_generation_tokens.labels(name).observe(r.num_generation_tokens)
        if max_tokens:
            m.request_params_max_tokens.labels(name).observe(max_tokens)

    def on_prompt_finished(self, n: int, max_generation_tokens: int) -> None:
        """Every engine request of one prompt (its choices, or best_of candidates) finished: the request's ``n``
        and the most tokens one of them generated, once per prompt as vLLM observes them per parent request."""
        self.m.request_params_n.labels(self.model).observe(n)
        self.m.request_max_num_generation_tokens.labels(self.model).observe(max_generation_tokens)

    def forget(self, request_id: str) -> None:
        """A request that will get no finished output (the engine loop died under it): drop its last-token time."""
        self._last_token_time.pop(request_id, None)


class Mailbox:
    """Items from the engine thread to asyncio queues of one event loop, with one wake-up of the loop per
    engine step instead of one per item.

    ``call_soon_threadsafe`` per output would write to the loop's self-pipe (a system call) and wake the
    event loop — and contend for the GIL with the engine thread — once per request and step: at batch 128,
    128 times a step. Here the engine thread's callbacks only append (``put``), and ``flush`` — an
    ``EngineLoop`` flush hook, run after each step's outputs — schedules one drain, which moves everything
    into the queues in order on the event loop.
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._items: list[tuple[asyncio.Queue[Any], Any]] = []
        self._lock = threading.Lock()
        self._scheduled = False

    def put(self, queue: asyncio.Queue[Any], item: Any) -> None:
        """From the engine thread. Raises (like ``call_soon_threadsafe``) when the event loop is closed, so
        that the engine loop aborts the request nobody can receive any more."""
        if self.loop.is_closed():
            raise RuntimeError("Event loop is closed")
        with self._lock:
            self._items.append((queue, item))

    def flush(self) -> None:
        """Wake the event loop for what ``put`` collected (nothing when a drain is already due)."""
        with self._lock:
            if not self._items or self._scheduled:
                return
            self._scheduled = True
        try:
            self.loop.call_soon_threadsafe(self._drain)
        except BaseException:
            with self._lock:
                self._scheduled = False
            raise

    def _drain(self) -> None:
        with self._lock:
            items, self._items = self._items, []
            self._scheduled = False
        for queue, item in items:
            queue.put_nowait(item)


class ServingState:
    """The engine loop plus everything the routes need."""

    def __init__(self, loop: EngineLoop, config: ServerConfig, metrics: ServingMetrics):
        self.loop, self.config = loop, config
        engine = loop.engine
        self.engine = engine
        self.admission = Admission(engine.config.max_num_seqs, config.max_queue)
        self.bridge = MetricsBridge(metrics, config.served_model_name)
        compiler = engine.structured_compiler  # its compiles and cache on /metrics (the cache's size read at scrape)
        compiler.observer = self.bridge.on_structured
        metrics.structured_cache_bytes.labels(config.served_model_name).set_function(lambda: compiler.cached_bytes)
        self.created = int(time.time())
        self.accepting = True  # False once shutdown began: new requests get 503
        self.aborted_for_shutdown = False
        self._mailboxes: dict[asyncio.AbstractEventLoop, Mailbox] = {}
        self._mailboxes_lock = threading.Lock()

    def mailbox(self, loop: asyncio.AbstractEventLoop) -> Mailbox:
        """The mailbox of ``loop``, flushed by the engine loop after every step (the server runs one event
        loop; tests may start several over time)."""
        with self._mailboxes_lock:
            box = self._mailboxes.get(loop)
            if box is None:
                for old in [lp for lp in self._mailboxes if lp.is_closed()]:
                    self.loop.remove_flush_hook(self._mailboxes.pop(old).flush)
                box = self._mailboxes[loop] = Mailbox(loop)
                self.loop.add_flush_hook(box.flush)
            return box

    def abort_in_flight(self) -> int:
        """Shutdown's deadline passed: abort every request still running (each client gets a 503 or, mid-stream,
        an error event), so that every handler ends on its own. Returns how many were aborted."""
        self.accepting = False
        self.aborted_for_shutdown = True
        return self.loop.abort_all()
