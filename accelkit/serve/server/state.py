"""What the HTTP layer shares: the engine loop (its own thread), admission control for the bounded
waiting queue, and the bridge from engine counters to the vLLM-named Prometheus metrics."""

from __future__ import annotations

import threading
import time

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


class MetricsBridge:
    """Engine → Prometheus. ``on_step`` runs on the engine thread after every step; ``on_output`` for
    every output of every request (inter-token gaps, and the per-request histograms at finish)."""

    def __init__(self, metrics: ServingMetrics, model_name: str):
        self.m, self.model = metrics, model_name
        self._last: EngineStats | None = None
        self._last_token_time: dict[str, float] = {}

    def _inc(self, counter, now: int, before: int, *labels: str) -> None:  # type: ignore[no-untyped-def]
        if now > before:
            counter.labels(self.model, *labels).inc(now - before)

    def on_step(self, stats: EngineStats) -> None:
        m, name, last = self.m, self.model, self._last
        m.num_requests_running.labels(name).set(stats.num_running)
        m.num_requests_waiting.labels(name).set(stats.num_waiting)
        m.kv_cache_usage_perc.labels(name).set(stats.kv_cache_usage)
        m.iteration_tokens_total.labels(name).observe(stats.last_step_num_tokens)
        for counter, field in ((m.prompt_tokens, "prompt_tokens"), (m.generation_tokens, "generation_tokens"),
                               (m.num_preemptions, "num_preemptions"), (m.prefix_cache_queries, "prefix_cache_queries"),
                               (m.prefix_cache_hits, "prefix_cache_hits")):
            self._inc(counter, getattr(stats, field), getattr(last, field) if last else 0)
        for reason, count in stats.requests_finished.items():
            self._inc(m.request_success, count, last.requests_finished.get(reason, 0) if last else 0, reason)
        self._last = stats

    def on_output(self, out: RequestOutput) -> None:
        now = time.monotonic()
        if out.new_token_ids:
            before = self._last_token_time.get(out.request_id)
            if before is not None:
                self.m.inter_token_latency.labels(self.model).observe(now - before)
            self._last_token_time[out.request_id] = now
        if not out.finished:
            return
        self._last_token_time.pop(out.request_id, None)
        r, m, name = out.metrics, self.m, self.model
        for hist, value in ((m.time_to_first_token, r.ttft_s), (m.e2e_request_latency, r.e2e_s),
                            (m.request_queue_time, r.queue_time_s), (m.request_prefill_time, r.prefill_time_s),
                            (m.request_decode_time, r.decode_time_s)):
            if value is not None:
                hist.labels(name).observe(value)
        m.request_prompt_tokens.labels(name).observe(r.num_prompt_tokens)
        m.request_generation_tokens.labels(name).observe(r.num_generation_tokens)


class ServingState:
    """The engine loop plus everything the routes need."""

    def __init__(self, loop: EngineLoop, config: ServerConfig, metrics: ServingMetrics):
        self.loop, self.config = loop, config
        engine = loop.engine
        self.engine = engine
        self.admission = Admission(engine.config.max_num_seqs, config.max_queue)
        self.bridge = MetricsBridge(metrics, config.served_model_name)
        self.created = int(time.time())
        self.accepting = True  # False once shutdown began: new requests get 503
        self.aborted_for_shutdown = False

    def abort_in_flight(self) -> int:
        """Shutdown's deadline passed: abort every request still running (each client gets a 503 or, mid-stream,
        an error event), so that every handler ends on its own. Returns how many were aborted."""
        self.accepting = False
        self.aborted_for_shutdown = True
        return self.loop.abort_all()
