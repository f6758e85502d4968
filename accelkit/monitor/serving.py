"""Serving metrics under vLLM's names and meanings (docs/methodology.md, "Serving metrics (server side)"),
so dashboards built for vLLM work against ``accelkit serve``. The server updates them; they live in
accelkit's registry beside the device, host and job metrics."""

from __future__ import annotations

import threading
import weakref
from typing import ClassVar

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from accelkit.monitor.registry import REGISTRY

# TTFT (to 2,560 s) and the per-request times (end to end, queue, prefill, decode: to 7,680 s) in vLLM's bucket
# boundaries (vllm/v1/metrics/loggers.py), so that histogram_quantile reads as on vLLM: a time past the last bound
# lands in +Inf, where histogram_quantile can only answer the last bound. Inter-token gaps: to 80 s, as vLLM's.
_ITL = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
TTFT_BUCKETS = (*_ITL, 160.0, 640.0, 2560.0)
REQUEST_LATENCY_BUCKETS = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                           480.0, 960.0, 1920.0, 7680.0)
#: the engine's finish reasons (``vllm:request_success_total``'s ``finished_reason`` label)
FINISH_REASONS = ("stop", "length", "abort", "error")
_TOKENS = (1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000)
# a request's mean time per output token: vLLM's buckets (its inter-token ones, 10 ms to 80 s)
_TPOT = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0)
# a structured-output compile: llguidance's take a millisecond or so, its slowest real schemas seconds, and the
# server gives up waiting at 5 s (a compile past it still ends, by the engine's own limits)
_STEP = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_COMPILE = (0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class ServingMetrics:
    """The vLLM-named families, labelled by ``model_name``. One instance per registry and process: take it with
    :meth:`get` (a second construction on the same registry is prometheus_client's ``Duplicated timeseries``)."""

    # keyed by the registry itself, weakly, as track()'s job metrics are (an id() key would outlive its registry)
    _by_registry: ClassVar[weakref.WeakKeyDictionary[CollectorRegistry, ServingMetrics]] = weakref.WeakKeyDictionary()
    _lock: ClassVar[threading.Lock] = threading.Lock()

    @classmethod
    def get(cls, registry: CollectorRegistry = REGISTRY) -> ServingMetrics:
        """The registry's families, registered on first use: a server built again in the same process (a notebook,
        a test harness restarting it) reuses them, its counters going on from where the last one left them."""
        with cls._lock:
            metrics = cls._by_registry.get(registry)
            if metrics is None:
                metrics = cls._by_registry[registry] = cls(registry)
            return metrics

    def __init__(self, registry: CollectorRegistry = REGISTRY):
        m = ["model_name"]
        self.num_requests_running = Gauge("vllm:num_requests_running", "Requests in the running batch.", m, registry=registry)
        self.num_requests_waiting = Gauge("vllm:num_requests_waiting", "Requests waiting to be scheduled.", m, registry=registry)
        self.kv_cache_usage_perc = Gauge("vllm:kv_cache_usage_perc", "KV-cache usage (1 = full).", m, registry=registry)
        self.prompt_tokens = Counter("vllm:prompt_tokens", "Prefill tokens processed.", m, registry=registry)
        self.generation_tokens = Counter("vllm:generation_tokens", "Generated tokens.", m, registry=registry)
        self.request_success = Counter("vllm:request_success", "Finished requests by reason.", [*m, "finished_reason"], registry=registry)
        self.num_preemptions = Counter("vllm:num_preemptions", "Preemptions (KV blocks ran out).", m, registry=registry)
        self.prefix_cache_queries = Counter("vllm:prefix_cache_queries", "Prompt tokens looked up in the prefix cache.", m, registry=registry)
        self.prefix_cache_hits = Counter("vllm:prefix_cache_hits", "Prompt tokens found in the prefix cache.", m, registry=registry)
        # TTFT is observed when a request's first token comes out; the four per-request times when it finishes
        lat = REQUEST_LATENCY_BUCKETS
        self.time_to_first_token = Histogram("vllm:time_to_first_token_seconds", "Time to first token, arrival to the "
                                             "first output token (observed then).", m, buckets=TTFT_BUCKETS, registry=registry)
        self.inter_token_latency = Histogram("vllm:inter_token_latency_seconds", "Time between output tokens.", m,
                                             buckets=_ITL, registry=registry)
        self.e2e_request_latency = Histogram("vllm:e2e_request_latency_seconds", "Request latency, arrival to finish.", m,
                                             buckets=lat, registry=registry)
        self.request_queue_time = Histogram("vllm:request_queue_time_seconds", "Time waiting before first scheduled.", m,
                                            buckets=lat, registry=registry)
        self.request_prefill_time = Histogram("vllm:request_prefill_time_seconds", "Time in prefill.", m, buckets=lat, registry=registry)
        self.request_decode_time = Histogram("vllm:request_decode_time_seconds", "Time in decode.", m, buckets=lat, registry=registry)
        self.request_inference_time = Histogram("vllm:request_inference_time_seconds", "Time running: first scheduled "
                                                "to last token.", m, buckets=lat, registry=registry)
        self.request_time_per_output_token = Histogram(
            "vllm:request_time_per_output_token_seconds", "Mean time per output token after the first, per request "
            "(0 for one of a single token).", m, buckets=_TPOT, registry=registry)
        self.request_params_max_tokens = Histogram("vllm:request_params_max_tokens", "The max_tokens of each request.",
                                                   m, buckets=_TOKENS, registry=registry)
        self.request_params_n = Histogram("vllm:request_params_n", "The n of each request (observed once per prompt, "
                                          "when its last choice finishes).", m, buckets=(1, 2, 5, 10, 20), registry=registry)
        self.request_max_num_generation_tokens = Histogram(
            "vllm:request_max_num_generation_tokens", "The most tokens any choice of a prompt generated (observed once "
            "per prompt, when its last choice finishes).", m, buckets=_TOKENS, registry=registry)
        self.request_prompt_tokens = Histogram("vllm:request_prompt_tokens", "Prompt tokens per request.", m, buckets=_TOKENS, registry=registry)
        self.request_generation_tokens = Histogram("vllm:request_generation_tokens", "Generated tokens per request.", m,
                                                   buckets=_TOKENS, registry=registry)
        self.iteration_tokens_total = Histogram("vllm:iteration_tokens_total", "Tokens per engine step (steps that ran "
                                                "something).", m, buckets=_TOKENS, registry=registry)
        self.engine_step_seconds = Histogram(
            "accelkit_engine_step_seconds", "Wall time of each engine step that ran something (schedule, forward, "
            "sampling, outputs).", m, buckets=_STEP, registry=registry)
        self.engine_step_cpu_seconds = Counter(
            "accelkit_engine_step_cpu_seconds", "CPU time of the engine thread in those steps: over "
            "accelkit_engine_step_seconds_sum, the share of step time the engine thread ran (on a CPU engine the rest "
            "is waiting: for the interpreter lock another thread holds, or for a free core).", m, registry=registry)
        self.engine_thread_runqueue_seconds = Counter(
            "accelkit_engine_thread_runqueue_seconds", "Time the engine thread was ready to run but had no free core "
            "(Linux scheduler statistics, read at each scrape; 0 elsewhere). The thread sleeps while idle, so this is "
            "time lost in its work: over accelkit_engine_step_seconds_sum, the share of step time spent waiting for "
            "a core; the share neither run nor waited for a core is waiting on a lock, mostly the interpreter lock.",
            m, registry=registry)
        self.structured_mask_wait_seconds = Counter(
            "accelkit_structured_mask_wait_seconds", "Time the engine thread waited for structured-output masks "
            "(filled on a helper thread beside the forward) after the forward was done: over "
            "accelkit_engine_step_seconds_sum, the share of step time a batch spent waiting for its guided rows' "
            "grammars.", m, registry=registry)
        self.structured_first_draws = Counter(
            "accelkit_structured_first_draws", "Guided tokens drawn before their mask, by whether the grammar allowed "
            "them (refused ones are drawn again from the masked logits).", [*m, "result"], registry=registry)
        self.structured_compiles = Counter(
            "accelkit_structured_compiles", "Structured-output specs compiled, by result (compiled, or refused with a "
            "400); a spec compiled or refused before is not compiled again.", [*m, "result"], registry=registry)
        self.structured_compile_seconds = Histogram(
            "accelkit_structured_compile_seconds", "Time of each structured-output compile (either result), from when "
            "a compile thread takes it up.", m, buckets=_COMPILE, registry=registry)
        self.structured_specs_reused = Counter(
            "accelkit_structured_specs_reused", "Structured-output requests that needed no compile of their own: "
            "their spec was compiled or refused before (cached), or its compile was in flight (in_flight).",
            [*m, "source"], registry=registry)
        self.structured_compile_timeouts = Counter(
            "accelkit_structured_compile_timeouts", "Structured-output requests refused because their spec did not "
            "compile within the compile limit (queueing included).", m, registry=registry)
        self.structured_cache_bytes = Gauge(
            "accelkit_structured_grammar_cache_bytes", "What the cached compiled grammars hold (their weights, as "
            "the cache bounds them).", m, registry=registry)

    def start(self, model_name: str) -> None:
        """Create every series of ``model_name`` at zero now, as vLLM does at start-up: a series that appears only
        with the first request leaves dashboards and ``rate()`` blank, and alerts on absent series fire."""
        for family in vars(self).values():
            if family is self.request_success:
                for reason in FINISH_REASONS:
                    family.labels(model_name, reason)
            elif family is self.structured_first_draws:
                for result in ("allowed", "refused"):
                    family.labels(model_name, result)
            elif family is self.structured_compiles:
                for result in ("compiled", "refused"):
                    family.labels(model_name, result)
            elif family is self.structured_specs_reused:
                for source in ("cached", "in_flight"):
                    family.labels(model_name, source)
            else:
                family.labels(model_name)
