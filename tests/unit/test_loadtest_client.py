"""Chunk classification, error text, request bodies, the stored curve and the no-torch rule."""

import math
import re
import subprocess
import sys

import pytest

from accelkit.loadtest import LoadTestConfig, plot_data
from accelkit.loadtest.client import MalformedChunk, OpenAIStreamClient, _error_text, chunk_finish_reason, chunk_text
from accelkit.loadtest.datasets import SampleRequest
from accelkit.loadtest.metrics import RequestRecord, compute_metrics
from accelkit.loadtest.runner import to_measurement


def test_output_bearing_chunks():
    assert chunk_text({"choices": [{"text": " a"}]}, "completions") == " a"
    assert chunk_text({"choices": [{"text": ""}]}, "completions") is None
    assert chunk_text({"choices": [{"delta": {"role": "assistant", "content": ""}}]}, "chat") is None  # role only
    assert chunk_text({"choices": [{"delta": {"content": "x"}}]}, "chat") == "x"
    assert chunk_text({"choices": [{"delta": {"reasoning_content": "y"}}]}, "chat") == "y"
    assert chunk_text({"choices": [], "usage": {"completion_tokens": 3}}, "chat") is None
    assert chunk_text({"choices": [{"delta": {"content": None, "reasoning_content": "r"}}]}, "chat") == "r"
    assert chunk_text({"choices": [{"delta": None}]}, "chat") is None
    assert chunk_text({"choices": [{"text": None}]}, "completions") is None


def test_reasoning_delta_is_output():
    """vLLM streams a reasoning model's thinking under `delta.reasoning` (`reasoning_content` was the old field):
    a stream of only reasoning chunks failed with "no output-bearing chunk", and reasoning before the answer
    pushed the TTFT to the first answer chunk."""
    assert chunk_text({"choices": [{"delta": {"reasoning": "z"}}]}, "chat") == "z"
    assert chunk_text({"choices": [{"delta": {"content": None, "reasoning": "z"}}]}, "chat") == "z"
    with pytest.raises(MalformedChunk, match="^'reasoning' is a number, not a string$"):
        chunk_text({"choices": [{"delta": {"content": "x", "reasoning": 3}}]}, "chat")


def test_finish_reason():
    assert chunk_finish_reason({"choices": [{"text": "", "finish_reason": "stop"}]}) == "stop"
    assert chunk_finish_reason({"choices": [{"delta": {}, "finish_reason": None}]}) is None
    assert chunk_finish_reason({"choices": [], "usage": {"completion_tokens": 1}}) is None
    with pytest.raises(MalformedChunk, match="^'finish_reason' is a number, not a string$"):
        chunk_finish_reason({"choices": [{"text": "", "finish_reason": 1}]})


@pytest.mark.parametrize(("chunk", "endpoint", "reason"), [
    ({"choices": [{"delta": "oops"}]}, "chat", "'delta' is a string, not an object"),
    ({"choices": [{"delta": {"content": ["x"]}}]}, "chat", "'content' is an array, not a string"),
    ({"choices": [{"text": 7}]}, "completions", "'text' is a number, not a string"),
    ({"choices": "x"}, "completions", "'choices' is a string, not an array"),
    ({"choices": [None]}, "chat", "'choices[0]' is null, not an object"),
])
def test_malformed_chunks_raise(chunk, endpoint, reason):
    with pytest.raises(MalformedChunk) as info:
        chunk_text(chunk, endpoint)
    assert str(info.value) == reason


def test_error_text():
    assert _error_text(b'{"error": {"message": "queue full", "type": "x"}}', 429) == "HTTP 429: queue full"
    assert _error_text(b'{"detail": "nope"}', 404) == "HTTP 404: nope"
    assert _error_text(b"", 503) == "HTTP 503: Service Unavailable"


def test_payload():
    req = SampleRequest(prompt="a b", input_len=2, output_len=5)
    chat = OpenAIStreamClient(LoadTestConfig(base_url="http://h", model="m", endpoint="chat", ignore_eos=True)).payload(req)
    assert chat["messages"] == [{"role": "user", "content": "a b"}] and chat["ignore_eos"] is True
    assert chat["stream"] is True and chat["stream_options"] == {"include_usage": True} and chat["max_tokens"] == 5
    plain = OpenAIStreamClient(LoadTestConfig(base_url="http://h", model="m")).payload(req)
    assert plain["prompt"] == "a b" and "ignore_eos" not in plain and plain["temperature"] == 0.0


@pytest.mark.parametrize(("base_url", "url"), [
    ("http://[::1]:8000", "http://[::1]:8000/v1/completions"),
    ("https://example.com/v1/", "https://example.com/v1/completions"),
    ("http://h:65535/prefix", "http://h:65535/prefix/v1/completions"),
])
def test_good_base_urls(base_url, url):
    assert LoadTestConfig(base_url=base_url, model="m").url == url


@pytest.mark.parametrize("field", ["timeout_s", "warmup_timeout_s"])
def test_timeouts_must_be_finite(field):
    with pytest.raises(ValueError, match=f"^{field}=inf is out of range; expected a finite number of seconds"):
        LoadTestConfig(base_url="http://h", model="m", **{field: math.inf})


@pytest.mark.parametrize(("rates", "label"), [((1.0, math.inf, math.inf), "@inf"),
                                             ((1234567.0, 1234568.0), "@1.23457e+06")])  # same to 6 digits
def test_sweep_rates_with_one_sample_label_refused(rates, label):
    with pytest.raises(ValueError, match=f"^sweep_rates\\[{len(rates) - 1}\\]=.* repeats .*'{re.escape(label)}'"):
        LoadTestConfig(base_url="http://h", model="m", sweep_rates=rates)


def _pass(ttft):
    records = [RequestRecord(index=i, input_len=4, max_tokens=3, send_s=0.0, done_s=1.0,
                             chunk_times_s=[ttft, ttft + 0.1, ttft + 0.2], completion_tokens=3, prompt_tokens=4)
               for i in range(3)]
    return records, compute_metrics(records, 1.0)


def test_measurement_and_plot_data():
    config = LoadTestConfig(base_url="http://h", model="m", sweep_rates=(4.0, 1.0))
    passes = [(4.0, *_pass(0.3)), (1.0, *_pass(0.1))]
    m = to_measurement(config, {"dataset": "random"}, passes, {"requests": 0})
    assert m.kind == "loadtest" and {"ttft_s", "tpot_s", "itl_s", "e2e_s", "ttft_s@4", "e2e_s@1"} <= set(m.samples)
    point = m.details["curve"][0]
    assert {"rate", "request_throughput", "output_throughput", "goodput", "ttft_ms", "tpot_ms"} <= set(point)
    assert set(point["ttft_ms"]) == {"p50", "p90", "p99"}
    data = plot_data(m)
    assert [p["rate"] for p in data["curve"]] == [1.0, 4.0]  # sorted by rate
    ttfts = data["distributions"]["4"]["ttft_ms"]
    assert len(ttfts) == 3 and abs(ttfts[0] - 300) < 1e-6
    assert plot_data(m.to_dict())["curve"] == data["curve"]


def test_no_torch_import():
    code = ("import sys, accelkit.loadtest, accelkit.loadtest.runner, accelkit.cli.loadtest; "
            "bad = [m for m in ('torch', 'transformers') if m in sys.modules]; assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True)
