"""The load tester against a fake OpenAI server that streams at known intervals."""

import hashlib
import json
import math
import re

import pytest

from accelkit.core import AccelkitError
from accelkit.loadtest import SLO, LoadTestConfig, run_loadtest
from accelkit.loadtest.datasets import load_dataset
from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig

# Large enough that client and server overheads (a few ms on a loaded 2-core machine) stay well under 5%
TTFT_S, ITL_S = 0.5, 0.05


@pytest.fixture(scope="module")
def timed_server():
    # a subprocess: the server's event loop shares no GIL with the client being measured
    with FakeOpenAIServer(FakeServerConfig(ttft_s=TTFT_S, itl_s=ITL_S), mode="process") as server:
        yield server


def _config(url, **kw):
    return LoadTestConfig(**{"base_url": url, "model": "fake-model", "num_prompts": 12, "random_input_len": 32,
                             "random_output_len": 16, "warmup": 1, **kw})


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_ttft_and_tpot_within_5_percent(timed_server, endpoint):
    result = run_loadtest(_config(timed_server.base_url, endpoint=endpoint, request_rate=8.0))
    p = result.details["passes"][0]
    assert p["completed"] == 12 and p["failed"] == 0
    assert p["ttft_ms"]["median"] == pytest.approx(TTFT_S * 1e3, rel=0.05)  # chat: the role-only delta is not TTFT
    assert p["tpot_ms"]["mean"] == pytest.approx(ITL_S * 1e3, rel=0.05)
    assert p["itl_ms"]["median"] == pytest.approx(ITL_S * 1e3, rel=0.05)
    assert p["e2e_ms"]["median"] == pytest.approx((TTFT_S + 15 * ITL_S) * 1e3, rel=0.05)
    assert p["lengths"]["prompt_tokens"]["mean"] == 32 and p["total_output_tokens"] == 12 * 16  # from usage
    assert result.samples["ttft_s"] and len(result.samples["itl_s"]) == 12 * 15


def test_max_concurrency_respected():
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.1, itl_s=0.02)) as server:
        result = run_loadtest(_config(server.base_url, num_prompts=12, random_output_len=4, max_concurrency=3, warmup=0))
        assert server.stats()["max_in_flight"] == 3  # the server never saw more than 3 at once
    p = result.details["passes"][0]
    assert p["completed"] == 12 and p["peak_concurrency"] == 3


def test_rate_inf_sends_all_at_once():
    # a first token after 1 s: all 16 are in flight together even when a loaded machine is slow to send them
    with FakeOpenAIServer(FakeServerConfig(ttft_s=1.0, itl_s=0.02)) as server:
        result = run_loadtest(_config(server.base_url, num_prompts=16, random_output_len=4, warmup=0,
                                      ignore_eos=True, slo=SLO(ttft_ms=10_000)))
        assert server.stats()["last_payload"]["ignore_eos"] is True
    p = result.details["passes"][0]
    assert all(r["scheduled_s"] == 0 for r in p["requests"])  # every arrival at once
    sends = [r["send_s"] for r in p["requests"]]
    assert max(sends) - min(sends) < 0.5 and p["peak_concurrency"] == 16
    assert result.details["arrivals"]["per_rate"] == ["all at once (rate inf)"]
    assert p["goodput"] == pytest.approx(p["request_throughput"])


def test_sweep_curve(timed_server):
    result = run_loadtest(_config(timed_server.base_url, num_prompts=6, random_output_len=4, sweep_rates=(20.0, math.inf)))
    assert [pt["rate"] for pt in result.details["curve"]] == [20.0, "inf"]
    assert all(pt["completed"] == 6 for pt in result.details["curve"])
    sched = [r["scheduled_s"] for r in result.details["passes"][0]["requests"]]
    assert sched[0] > 0 and sched == sorted(sched) and sched[-1] == pytest.approx(6 / 20.0)  # vLLM's: last at n/rate
    json.dumps(result.to_dict(), allow_nan=False)  # rate inf is stored as "inf": the document is strict JSON


@pytest.mark.parametrize(("mode", "text"), [("http", "HTTP 500: injected failure"),
                                            ("stream", "error in stream: injected failure")])
def test_failures_reported_with_text(mode, text):
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.05, itl_s=0.01, fail_every=4, fail_mode=mode)) as server:
        result = run_loadtest(_config(server.base_url, num_prompts=12, random_output_len=4, warmup=0))
    p = result.details["passes"][0]
    assert (p["completed"], p["failed"]) == (9, 3)
    (failure,) = p["failures"]  # every 4th request to arrive fails; arrival order at rate inf is not fixed
    assert failure["error"] == text and failure["count"] == 3 and len(failure["request_indexes"]) == 3
    assert p["ttft_ms"]["n"] == 9  # failed requests are not in the latency samples


def test_api_key_and_unreachable():
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.01, itl_s=0.01, api_key="k")) as server:
        with pytest.raises(AccelkitError, match="HTTP 401: invalid or missing API key"):
            run_loadtest(_config(server.base_url, num_prompts=2))
        assert run_loadtest(_config(server.base_url, num_prompts=2, api_key="k")).details["passes"][0]["completed"] == 2
        url = server.base_url
    with pytest.raises(AccelkitError, match="cannot connect"):  # the server is gone
        run_loadtest(_config(url, num_prompts=2))


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def _sent(server):
    """{tag: [prompt digests]} from the x-request-ids the server saw: 'warmup', 'r50', 'rinf'."""
    by_tag: dict[str, list[str]] = {}
    for seen in server.stats()["requests"]:
        by_tag.setdefault(seen["request_id"].split("-")[2], []).append(seen["prompt_sha256"])
    return by_tag


def test_sweep_sends_fresh_random_prompts():
    """Every pass re-sent the first pass's prompts, so each pass after the first hit the server's prefix cache."""
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.01, itl_s=0.001)) as server:
        result = run_loadtest(_config(server.base_url, num_prompts=4, random_output_len=2, sweep_rates=(50.0, math.inf)))
        sent = _sent(server)
    today, _ = load_dataset("random", 5, input_len=32, output_len=16, seed=0)  # warm-up + pass 0, as before
    assert sent["warmup"] == [_digest(today[0].prompt)]
    assert sorted(sent["r50"]) == sorted(_digest(r.prompt) for r in today[1:])  # pass 0: a single-rate run's prompts
    assert len(set(sent["rinf"])) == 4 and not set(sent["rinf"]) & (set(sent["r50"]) | set(sent["warmup"]))
    assert "fresh" in result.details["dataset"]["sweep_prompts"]


def test_sweep_over_a_file_says_the_prompts_repeat(tmp_path):
    path = tmp_path / "p.jsonl"
    path.write_text("".join(json.dumps({"prompt": f"prompt {i}", "output_len": 2}) + "\n" for i in range(3)))
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.01, itl_s=0.001)) as server:
        result = run_loadtest(_config(server.base_url, dataset=f"jsonl:{path}", num_prompts=3, warmup=0,
                                      sweep_rates=(50.0, math.inf)))
        sent = _sent(server)
    assert sorted(sent["r50"]) == sorted(sent["rinf"])
    assert "prefix cache" in result.details["dataset"]["sweep_prompts"]


def test_request_ids_differ_per_run():
    """Every run sent 'accelkit-rate 50-0', 'accelkit-rate 50-1', …: the same ids each run, with a space."""
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.01, itl_s=0.001)) as server:
        for _ in range(2):
            run_loadtest(_config(server.base_url, num_prompts=3, random_output_len=2, request_rate=50.0))
        ids = [seen["request_id"] for seen in server.stats()["requests"]]
    assert len(ids) == 8 and len(set(ids)) == 8
    assert all(re.fullmatch(r"accelkit-[0-9a-f]{8}-(warmup|r50)-[0-9]+", i) for i in ids), ids
    assert len({i.split("-")[1] for i in ids}) == 2  # one random prefix per run
