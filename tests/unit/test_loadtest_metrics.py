"""Load-test aggregation against hand-computed answers (vLLM bench serve's definitions)."""

import json
import math

import pytest

from accelkit.loadtest import SLO, LoadTestConfig, compute_metrics, parse_rate
from accelkit.loadtest.metrics import RequestRecord, distribution, is_good, peak_concurrency


def rec(index, chunks, *, completion=None, prompt=None, send=0.0, done=None, error=None, input_len=7, finish=None):
    return RequestRecord(index=index, input_len=input_len, max_tokens=8, send_s=send,
                         done_s=done if done is not None else send + (chunks[-1] if chunks else 0.01),
                         chunk_times_s=list(chunks), completion_tokens=completion, prompt_tokens=prompt, error=error,
                         finish_s=finish)


@pytest.fixture
def records():
    return [
        rec(0, [0.10, 0.15, 0.25], completion=3, prompt=10),   # TTFT .10, ITL .05 .10, TPOT .15/2 = .075
        rec(1, [0.20, 0.30], completion=4, prompt=20),         # 4 tokens in 2 chunks: TPOT .10/3
        rec(2, [0.05], completion=1, prompt=30),               # one token: no TPOT sample
        rec(3, [], error="HTTP 500: boom", done=0.02),         # failed
    ]


def test_counts_and_throughputs(records):
    m = compute_metrics(records, 2.0)
    assert (m["completed"], m["failed"], m["num_requests"]) == (3, 1, 4)
    assert m["total_input_tokens"] == 60 and m["total_output_tokens"] == 8  # failed request counts nothing
    assert m["request_throughput"] == pytest.approx(1.5)
    assert m["output_throughput"] == pytest.approx(4.0)
    assert m["total_token_throughput"] == pytest.approx(34.0)
    assert m["goodput"] is None and m["good_requests"] is None  # no SLO given


def test_latency_definitions(records):
    m = compute_metrics(records, 2.0, percentiles=(50, 90))
    ttft = m["ttft_ms"]
    assert ttft["n"] == 3 and ttft["mean"] == pytest.approx(350 / 3)
    assert ttft["median"] == pytest.approx(100) and ttft["p90"] == pytest.approx(180)  # linear: .1 + .8·(.2 − .1)
    assert ttft["std"] == pytest.approx(math.sqrt(((50 - 350 / 3) ** 2 + (100 - 350 / 3) ** 2 + (200 - 350 / 3) ** 2) / 3))
    assert m["tpot_ms"]["n"] == 2 and m["tpot_ms"]["mean"] == pytest.approx((75 + 100 / 3) / 2)
    assert m["itl_ms"]["n"] == 3 and m["itl_ms"]["mean"] == pytest.approx(250 / 3)  # pooled: 50, 100, 100
    assert m["e2e_ms"]["median"] == pytest.approx(250) and m["e2e_ms"]["max"] == pytest.approx(300)
    assert m["failures"] == [{"error": "HTTP 500: boom", "count": 1, "request_indexes": [3]}]


def test_percentiles_match_numpy():
    np = pytest.importorskip("numpy")
    xs = [0.013, 0.2, 0.07, 0.5, 0.33, 0.01, 0.9, 0.41]
    d = distribution(xs, (50, 90, 99, 99.9))
    for q in (50, 90, 99, 99.9):
        assert d[f"p{q:g}"] == pytest.approx(np.percentile(xs, q) * 1e3)
    assert d["std"] == pytest.approx(np.std(xs) * 1e3)  # population std, as vLLM reports


def test_goodput_per_request(records):
    m = compute_metrics(records, 2.0, slo=SLO(ttft_ms=150, tpot_ms=80))
    assert m["good_requests"] == 2 and m["goodput"] == pytest.approx(1.0)  # r1 misses TTFT; r2's TPOT counts 0
    assert compute_metrics(records, 2.0, slo=SLO(e2e_ms=100))["good_requests"] == 1
    assert compute_metrics(records, 2.0, slo=SLO(ttft_ms=100))["good_requests"] == 2  # at the SLO is good (<=)
    assert compute_metrics(records, 2.0, slo=SLO(tpot_ms=1))["good_requests"] == 1  # only the one-token request
    assert not is_good(records[3], SLO(ttft_ms=1e9))  # a failed request is never good


def test_usage_fallbacks():
    r = rec(0, [0.1, 0.2, 0.3], input_len=12)  # no usage: chunks and the target length stand in
    m = compute_metrics([r], 1.0)
    assert m["total_output_tokens"] == 3 and m["total_input_tokens"] == 12
    assert m["lengths"]["requests_without_usage"] == 1 and m["lengths"]["prompt_tokens"]["n"] == 0


def test_empty_and_bad_duration():
    m = compute_metrics([rec(0, [], error="x")], 1.0)
    assert m["completed"] == 0 and m["ttft_ms"]["mean"] is None and m["request_throughput"] == 0
    with pytest.raises(ValueError, match="duration_s"):
        compute_metrics([], 0.0)


def test_finish_chunk_ends_the_request():
    """A request ending by EOS streams its text, then the EOS step as a text-less chunk with finish_reason, and
    usage counts that step. E2E stopped at the last text chunk (TPOT short by one step in k), and a request whose
    only output was the EOS failed."""
    r = rec(0, [0.10, 0.15, 0.20], finish=0.30, completion=4)
    assert (r.ttft_s, r.e2e_s) == (0.10, 0.30) and r.tpot_s == pytest.approx(0.20 / 3)
    assert r.itl_s == pytest.approx([0.05, 0.05, 0.10])  # the EOS step is a gap too, as vLLM times it
    same = rec(1, [0.10, 0.20], finish=0.20, completion=2)  # finish_reason on the last text chunk: nothing added
    assert same.e2e_s == 0.20 and same.itl_s == pytest.approx([0.10])
    eos_only = rec(2, [], finish=0.05, completion=1)
    assert eos_only.success and eos_only.ttft_s == eos_only.e2e_s == 0.05 and eos_only.tpot_s is None
    assert rec(3, [], finish=0.05).output_tokens == 1  # no usage: the EOS step is counted, as the server's usage does
    m = compute_metrics([r, same, eos_only], 1.0)
    assert (m["completed"], m["failed"]) == (3, 0) and m["e2e_ms"]["max"] == pytest.approx(300)


def test_unbacked_percentiles_any_q():
    """--percentiles 99.9 was never flagged: only p50/p90/p95/p99 had a sample requirement."""
    d = distribution([0.1] * 500, (50, 99, 99.9))
    assert d["unbacked"] == ["p99.9"]  # needs 4603 samples
    assert distribution([0.1] * 4, (50, 75, 100))["unbacked"] == ["p75", "p100"]  # p100, the maximum: never backed


def test_peak_concurrency():
    # each in flight from its send to its last token (send + E2E), as vLLM's "Peak concurrent requests"
    rs = [rec(i, [0.1, d - s], send=s, done=d + 0.001) for i, (s, d) in enumerate([(0, 1), (0.5, 1.5), (1.0, 2), (1.2, 1.3)])]
    assert peak_concurrency(rs) == 3  # at 1.0 one ends as another starts: ends first


def test_peak_concurrency_counts_successful_requests_only():
    """Refused requests (HTTP 429 at once, at rate inf all sent before any answer) counted as in flight: 1,000 sent
    against a server admitting 544 reported a peak of 1,000. vLLM counts the successful requests only."""
    ok = [rec(i, [0.5, 1.0], send=0.0) for i in range(3)]
    refused = [RequestRecord(index=3 + i, input_len=7, max_tokens=8, send_s=0.0, done_s=0.2, status_code=429,
                             error="HTTP 429: the waiting queue is full") for i in range(5)]
    assert peak_concurrency(ok + refused) == 3
    m = compute_metrics(ok + refused, 1.0)
    assert (m["peak_concurrency"], m["http_429"], m["failed"]) == (3, 5, 5)


def test_slo_parse():
    assert SLO.parse("ttft_ms=200, tpot_ms=50,e2e_ms=5000") == SLO(ttft_ms=200, tpot_ms=50, e2e_ms=5000)
    assert SLO.parse(None).is_empty
    for text, needle in [("ttft=3", "key 'ttft'"), ("ttft_ms=abc", "ttft_ms='abc'"), ("ttft_ms=-1", "positive"),
                         ("ttft_ms", "key=value")]:
        with pytest.raises(ValueError, match=needle):
            SLO.parse(text)


def test_parse_rate():
    assert parse_rate("inf") == math.inf and parse_rate("2.5") == 2.5
    for bad in ("0", "-1", "fast", "nan"):
        with pytest.raises(ValueError, match="--request-rate"):
            parse_rate(bad)


def test_config_validation_and_storage():
    c = LoadTestConfig(base_url="http://h:8000/v1/", model="m", api_key="secret", sweep_rates=(1, math.inf))
    assert c.url == "http://h:8000/v1/completions" and c.rates == (1.0, math.inf)
    stored = c.public_dict()
    assert stored["api_key"] == "<redacted>" and stored["sweep_rates"] == [1.0, "inf"] and stored["request_rate"] == "inf"
    assert "Infinity" not in json.dumps(stored) and "secret" not in json.dumps(stored)
    assert LoadTestConfig(base_url="http://h", model="m", endpoint="chat").url == "http://h/v1/chat/completions"
    for kwargs, field in [({"base_url": "h:8000"}, "base_url"), ({"random_range_ratio": 1.0}, "random_range_ratio"),
                          ({"burstiness": 0.0}, "burstiness"), ({"percentiles": (0,)}, "percentiles"),
                          ({"sweep_rates": ()}, "sweep_rates"), ({"endpoint": "embeddings"}, "endpoint"),
                          ({"max_concurrency": 0}, "max_concurrency"), ({"request_rate": 0.0}, "request_rate")]:
        with pytest.raises(ValueError, match=field):
            LoadTestConfig(**{"base_url": "http://h", "model": "m", **kwargs})
