"""vLLM's per-request families that its dashboards chart and `accelkit serve` did not export: the time running
(``vllm:request_inference_time_seconds``), the mean time per output token
(``vllm:request_time_per_output_token_seconds``), the ``max_tokens`` and ``n`` of each request and the most tokens
a choice of a prompt generated (``vllm:request_params_max_tokens``, ``vllm:request_params_n``,
``vllm:request_max_num_generation_tokens``) — each observed as vLLM observes it."""

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from accelkit.monitor.serving import ServingMetrics
from accelkit.serve.outputs import RequestMetrics, RequestOutput
from accelkit.serve.server.protocol import CompletionRequest
from accelkit.serve.server.serving_completion import ServingCompletion
from accelkit.serve.server.state import MetricsBridge
from tests.unit.serving_util import models, run, serving_state, settled

NEW = ("vllm:request_inference_time_seconds", "vllm:request_time_per_output_token_seconds",
       "vllm:request_params_max_tokens", "vllm:request_params_n", "vllm:request_max_num_generation_tokens")


def _samples(registry: CollectorRegistry) -> dict[str, float]:
    return {s.name: s.value for family in text_string_to_metric_families(generate_latest(registry).decode())
            for s in family.samples if "le" not in s.labels}


def _finished(tokens: int) -> RequestOutput:
    """Arrived at 0, scheduled at 90, first token at 100, last token and finish at 200."""
    metrics = RequestMetrics(arrival_time=0.0, num_prompt_tokens=8, first_scheduled_time=90.0, first_token_time=100.0,
                             last_token_time=200.0, finished_time=200.0, num_generation_tokens=tokens)
    return RequestOutput(request_id=f"r{tokens}", prompt=None, prompt_token_ids=[1] * 8, text="",
                         token_ids=[5] * tokens, new_text="", new_token_ids=[5], finished=True,
                         finish_reason="length", metrics=metrics)


def test_inference_time_time_per_output_token_and_max_tokens_at_finish():
    registry = CollectorRegistry()
    bridge = MetricsBridge(ServingMetrics.get(registry), "tiny")
    at_start = _samples(registry)
    assert all(at_start[f"{name}_count"] == 0 for name in NEW)  # every series from start-up
    bridge.on_output(_finished(11), max_tokens=32)
    bridge.on_output(_finished(1), max_tokens=None)  # one token: vLLM's TPOT 0; no max_tokens, none observed
    got = _samples(registry)
    assert got["vllm:request_inference_time_seconds_count"] == 2
    assert got["vllm:request_inference_time_seconds_sum"] == 2 * 110.0  # first scheduled (90) → last token (200)
    assert got["vllm:request_time_per_output_token_seconds_count"] == 2
    assert got["vllm:request_time_per_output_token_seconds_sum"] == 100.0 / 10  # (200 − 100) / (11 − 1), + 0
    assert got["vllm:request_params_max_tokens_count"] == 1 and got["vllm:request_params_max_tokens_sum"] == 32


def _hist(state, family) -> tuple[float, float]:
    """(count, sum) of a family of the shared serving state."""
    samples = {s.name: s.value for metric in family.collect() for s in metric.samples
               if s.labels.get("model_name") == state.config.served_model_name and "le" not in s.labels}
    return samples[f"{family._name}_count"], samples[f"{family._name}_sum"]


def test_n_and_max_tokens_once_per_prompt_and_request_through_the_server():
    state = serving_state()
    serving = ServingCompletion(state, models(state))
    m = state.bridge.m
    families = (m.request_params_n, m.request_max_num_generation_tokens, m.request_params_max_tokens)
    before = [_hist(state, f) for f in families]
    # two prompts, n=2: four engine requests of 5 tokens each
    run(serving.create_completion(CompletionRequest(prompt=["w1 w2", "w3"], n=2, max_tokens=5,
                                                           ignore_eos=True, temperature=1.0, seed=7)))
    assert settled(state)
    after = [_hist(state, f) for f in families]
    delta = [(a[0] - b[0], a[1] - b[1]) for a, b in zip(after, before, strict=True)]
    assert delta[0] == (2, 4)  # n=2, once per prompt
    assert delta[1] == (2, 10)  # each prompt's longest choice: 5 tokens (not their sum)
    assert delta[2] == (4, 20)  # every engine request's max_tokens
