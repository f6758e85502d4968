"""The engine → Prometheus bridge of `accelkit serve` (``MetricsBridge``), fed engine outputs and stats as the engine
loop hands them over, read back through prometheus_client's exposition and parser: when each histogram is observed,
and in which buckets (vLLM's)."""

import dataclasses
import os
import subprocess
import sys
import threading
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from accelkit.monitor.serving import ServingMetrics
from accelkit.serve.outputs import EngineStats, RequestMetrics, RequestOutput
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.server.state import MetricsBridge, thread_runqueue_seconds
from tests.unit.serving_util import serving_state

# vLLM's boundaries (vllm/v1/metrics/loggers.py): TTFT to 2,560 s, the per-request times to 7,680 s
VLLM_TTFT = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0,
             80.0, 160.0, 640.0, 2560.0]
VLLM_REQUEST = [0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
                960.0, 1920.0, 7680.0]
PER_REQUEST = ("vllm:e2e_request_latency_seconds", "vllm:request_queue_time_seconds",
               "vllm:request_prefill_time_seconds", "vllm:request_decode_time_seconds")


def _bridge() -> tuple[MetricsBridge, CollectorRegistry]:
    registry = CollectorRegistry()
    return MetricsBridge(ServingMetrics.get(registry), "tiny"), registry


def _samples(registry: CollectorRegistry) -> dict[tuple[str, str], float]:
    """(sample name, its ``le`` or "") → value, from the text a scrape gets."""
    return {(s.name, s.labels.get("le", "")): s.value
            for family in text_string_to_metric_families(generate_latest(registry).decode()) for s in family.samples}


def _output(rid: str, *, tokens: int, new: int, finished: bool, first_token: float | None = 100.0,
            end: float = 200.0) -> RequestOutput:
    """Request ``rid`` (arrived at 0, scheduled at 90, first token at ``first_token``) after a step that gave it
    ``new`` of its ``tokens`` output tokens; finished at ``end`` when ``finished``."""
    metrics = RequestMetrics(arrival_time=0.0, num_prompt_tokens=8, first_scheduled_time=90.0,
                             first_token_time=first_token, last_token_time=end if tokens else None,
                             finished_time=end if finished else None, num_generation_tokens=tokens)
    return RequestOutput(request_id=rid, prompt=None, prompt_token_ids=[1] * 8, text="", token_ids=[5] * tokens,
                         new_text="", new_token_ids=[5] * new, finished=finished,
                         finish_reason=("length" if tokens else "abort") if finished else None, metrics=metrics)


def _stats(step_tokens: int) -> EngineStats:
    return EngineStats(num_running=1, num_waiting=0, kv_cache_usage=0.1, num_preemptions=0, prefix_cache_queries=0,
                       prefix_cache_hits=0, prompt_tokens=0, generation_tokens=0, num_steps=1,
                       last_step_num_tokens=step_tokens, num_blocks=16, block_size=16)


def test_histograms_have_vllms_buckets_and_a_long_request_lands_below_inf():
    """Our latency buckets stopped at 80 s: a 200 s request was in +Inf only, and histogram_quantile said 80 s."""
    bridge, registry = _bridge()
    bridge.on_output(_output("r", tokens=10, new=10, finished=True, first_token=1000.0, end=1200.0))
    samples = _samples(registry)
    bounds = sorted(float(le) for name, le in samples if name == "vllm:time_to_first_token_seconds_bucket")
    assert bounds == [*VLLM_TTFT, float("inf")]
    for family in PER_REQUEST:
        bounds = sorted(float(le) for name, le in samples if name == f"{family}_bucket")
        assert bounds == [*VLLM_REQUEST, float("inf")], family
    # TTFT 1,000 s, e2e 1,200 s, queue 90 s, prefill 910 s, decode 200 s: each below its last finite bound
    for family, first_bound in (("vllm:time_to_first_token_seconds", "2560.0"), ("vllm:e2e_request_latency_seconds",
                                "1920.0"), ("vllm:request_queue_time_seconds", "120.0"),
                                ("vllm:request_prefill_time_seconds", "960.0"),
                                ("vllm:request_decode_time_seconds", "240.0")):
        assert samples[(f"{family}_bucket", first_bound)] == 1, family
        below = max(b for b in (VLLM_TTFT if "first_token" in family else VLLM_REQUEST) if b < float(first_bound))
        assert samples[(f"{family}_bucket", str(below))] == 0, family


def test_ttft_is_observed_at_the_first_token_once_and_the_rest_at_finish():
    """vLLM observes TTFT in the step that gives a request its first token; ours waited for the request to finish."""
    bridge, registry = _bridge()
    bridge.on_output(_output("r", tokens=1, new=1, finished=False, end=100.0))  # the first token: still running
    samples = _samples(registry)
    assert samples[("vllm:time_to_first_token_seconds_count", "")] == 1
    assert samples[("vllm:time_to_first_token_seconds_sum", "")] == 100.0
    assert samples[("vllm:e2e_request_latency_seconds_count", "")] == 0
    bridge.on_output(_output("r", tokens=2, new=1, finished=False, end=150.0))
    bridge.on_output(_output("r", tokens=3, new=1, finished=True))
    samples = _samples(registry)
    assert samples[("vllm:time_to_first_token_seconds_count", "")] == 1  # not again at finish
    for family in PER_REQUEST:
        assert samples[(f"{family}_count", "")] == 1, family
    assert samples[("vllm:inter_token_latency_seconds_count", "")] == 2
    assert bridge._last_token_time == {}


def test_ttft_counts_each_engine_request_and_none_that_ended_before_its_first_token():
    """n > 1 / best_of are several engine requests: one TTFT each (vLLM's child requests); a request aborted, or
    failed, before its first token has none (its other histograms are observed at finish as before)."""
    bridge, registry = _bridge()
    for rid in ("c-0", "c-1", "c-2"):  # three choices of one HTTP request, all first tokens in one step
        bridge.on_output(_output(rid, tokens=1, new=1, finished=False, end=100.0))
    bridge.on_output(_output("gone", tokens=0, new=0, finished=True, first_token=None))  # aborted while waiting
    bridge.on_output(_output("c-1", tokens=4, new=3, finished=True))  # (final_only-style: several new at once)
    samples = _samples(registry)
    assert samples[("vllm:time_to_first_token_seconds_count", "")] == 3
    assert samples[("vllm:e2e_request_latency_seconds_count", "")] == 2


def test_a_step_that_ran_nothing_is_not_an_iteration():
    """A step that only took in an abort scheduled no tokens: vLLM records no iteration for it; we observed a 0."""
    bridge, registry = _bridge()
    for tokens in (8, 1, 0, 1, 0):
        bridge.on_step(_stats(tokens))
    samples = _samples(registry)
    assert samples[("vllm:iteration_tokens_total_count", "")] == 3
    assert samples[("vllm:iteration_tokens_total_sum", "")] == 10


def test_engine_step_time_and_the_engine_threads_cpu_in_it_are_exported():
    """Each step that ran something is observed with its wall time; the engine thread's CPU time in steps is a
    counter whose ratio to the steps' summed time says how much of it the engine thread ran (the rest it waited)."""
    bridge, registry = _bridge()
    for tokens, wall, cpu_total, masks_total in ((8, 0.004, 0.003, 0.001), (0, 0.0, 0.003, 0.001),
                                                 (1, 0.010, 0.005, 0.004)):
        bridge.on_step(dataclasses.replace(_stats(tokens), last_step_seconds=wall, step_cpu_seconds=cpu_total,
                                           mask_wait_seconds=masks_total))
    samples = _samples(registry)
    assert samples[("accelkit_engine_step_seconds_count", "")] == 2  # (the step that ran nothing is none)
    assert samples[("accelkit_engine_step_seconds_sum", "")] == pytest.approx(0.014)
    assert samples[("accelkit_engine_step_seconds_bucket", "0.005")] == 1
    assert samples[("accelkit_engine_step_cpu_seconds_total", "")] == pytest.approx(0.005)
    assert samples[("accelkit_structured_mask_wait_seconds_total", "")] == pytest.approx(0.004)


def test_a_running_engine_counts_its_steps_wall_and_cpu_time():
    state = serving_state()
    before = state.engine.get_stats()
    state.loop.add_request("hello world", SamplingParams.greedy(6, ignore_eos=True)).result()
    after = state.engine.get_stats()
    wall, cpu = after.step_seconds - before.step_seconds, after.step_cpu_seconds - before.step_cpu_seconds
    assert after.num_steps - before.num_steps >= 6 and after.last_step_seconds > 0
    assert 0 < cpu <= wall * 1.01 + 1e-4  # (the thread's CPU time cannot pass its wall time)


@pytest.mark.skipif(sys.platform != "linux", reason="the scheduler's statistics are Linux's")
def test_the_engine_threads_wait_for_a_core_is_read_from_the_scheduler_at_each_scrape():
    """Pinned to one core beside three busy shell loops, this busy thread gets about a quarter of the core (less when
    other work shares it): between two scrapes the bridge adds its wait for the core to
    accelkit_engine_thread_runqueue_seconds — several times the time it ran (what a read of the wrong field of the
    kernel's statistics would give) and no more than the wall time; the first scrape is only the baseline."""
    bridge, registry = _bridge()
    me = threading.get_native_id()
    allowed = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {min(allowed)})  # this thread, and the shells it starts, on one core
    spinners = []
    try:
        spinners = [subprocess.Popen(["sh", "-c", "while :; do :; done"]) for _ in range(3)]
        time.sleep(0.02)  # (the shells started)
        before, start, cpu = thread_runqueue_seconds(me), time.perf_counter(), time.thread_time()
        bridge.on_scrape(me)  # the baseline: the thread's wait before serving began is not counted
        assert _samples(registry)[("accelkit_engine_thread_runqueue_seconds_total", "")] == 0
        while time.perf_counter() - start < 0.4:
            pass
        bridge.on_scrape(me)
        wall, cpu = time.perf_counter() - start, time.thread_time() - cpu
        after = thread_runqueue_seconds(me)
    finally:
        for spinner in spinners:
            spinner.kill()
            spinner.wait()
        os.sched_setaffinity(0, allowed)
    assert before is not None and after is not None
    exported = _samples(registry)[("accelkit_engine_thread_runqueue_seconds_total", "")]
    assert 1.5 * cpu < exported <= min(wall, after - before), (exported, cpu, wall)
    bridge.on_scrape(None)  # a loop not started, or another system: nothing read, nothing added
    assert thread_runqueue_seconds(2**31 - 1) is None  # (no such thread)
