"""`accelkit loadtest` where `vllm bench serve` sets the rule: the ShareGPT selection and filter (a real ShareGPT
JSON file, sent to the fake server over HTTP, which reports each prompt it got), and a server that refuses
requests with HTTP 429 — the fake server told to, and the real `accelkit serve` of a tiny model at its connection
and queue limits: the refusals are named on stderr with the server's message and the flags to change, and they
are not counted as in flight."""

import hashlib
import json
import math

import pytest

from accelkit.loadtest import LoadTestConfig, run_loadtest
from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from accelkit.serve.testing import save_bytelevel_model
from tests.conftest import run_cli
from tests.integration.serve_server_util import running_server


def _digest(text):
    return hashlib.sha256(text.encode()).hexdigest()


def _pair(prompt, reply, *, first="human"):
    second = "gpt" if first == "human" else "human"
    return {"conversations": [{"from": first, "value": prompt}, {"from": second, "value": reply}]}


USABLE = [  # (prompt, reply, estimated reply tokens = ceil(chars / 4))
    ("Tell me a story about a cat.", "Once upon a time there was a cat who lived in a house.", 14),
    ("Explain what a load test measures.", "Latency and throughput under a given arrival rate.", 13),
    ("You asked for the weather report:", "Thanks, that is what I needed today!", 9),  # turn 0 is from 'gpt'
]
SHAREGPT = [
    _pair(*USABLE[0][:2]),
    {"conversations": [{"from": "system", "value": "sys"}, *_pair(*USABLE[1][:2])["conversations"]]},  # 'sys': 1 token
    _pair("x " * 20000, "long answer " * 50),                 # a 10,000-token prompt: over 1,024
    _pair("What is 2+2? Please explain.", "4"),               # a 1-token reply
    _pair(*USABLE[1][:2]),
    _pair(*USABLE[2][:2], first="gpt"),
    {"conversations": [{"from": "human", "value": "a conversation of one turn"}]},
]


@pytest.fixture(scope="module")
def fake():
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.01, itl_s=0.001)) as server:
        yield server


def test_sharegpt_sends_what_vllm_would(fake, tmp_path):
    """The prompt was the first human turn followed by a gpt turn anywhere in the conversation and nothing was
    filtered: a 10,000-token prompt and a 1-token reply (max_tokens 1) were sent, which vLLM skips."""
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT))
    before = len(fake.stats()["requests"])
    proc = run_cli("loadtest", "--base-url", fake.base_url, "--model", "fake-model", "--dataset", f"sharegpt:{path}",
                   "--num-prompts", "3", "--warmup", "0", "--no-save", "--no-progress", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    sent = [seen["prompt_sha256"] for seen in fake.stats()["requests"][before:]]
    assert sorted(sent) == sorted(_digest(prompt) for prompt, _, _ in USABLE)  # conversations[0] of the usable ones
    p = doc["details"]["passes"][0]
    assert p["completed"] == 3 and sorted(r["max_tokens"] for r in p["requests"]) == sorted(n for *_, n in USABLE)
    dataset = doc["details"]["dataset"]
    assert (dataset["num_conversations"], dataset["num_skipped"], dataset["num_available"]) == (7, 4, 3)
    assert dataset["skipped"] == {"under_2_turns": 1, "prompt_under_4_tokens": 1, "output_under_4_tokens": 1,
                                  "prompt_over_1024_tokens": 1, "total_over_2048_tokens": 0}
    assert f"note: --dataset sharegpt:{path}: skipped 4 of 7 conversations as `vllm bench serve` skips them" in proc.stderr


def test_sharegpt_output_len_flag(fake, tmp_path):
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(SHAREGPT))
    proc = run_cli("loadtest", "--base-url", fake.base_url, "--model", "fake-model", "--dataset", f"sharegpt:{path}",
                   "--sharegpt-output-len", "5", "--num-prompts", "4", "--warmup", "0", "--no-save", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    # the 1-token reply's pair is usable now (no output minimum with a fixed length), and every max_tokens is 5
    assert doc["details"]["dataset"]["num_available"] == 4 and doc["details"]["dataset"]["skipped"]["output_under_4_tokens"] == 0
    assert {r["max_tokens"] for r in doc["details"]["passes"][0]["requests"]} == {5}
    bad = run_cli("loadtest", "--base-url", fake.base_url, "--model", "fake-model", "--sharegpt-output-len", "5")
    assert bad.returncode == 2 and "sharegpt:PATH" in bad.stderr


QUEUE_FULL = "the waiting queue is full (2 waiting beyond 2 running); retry in 1 s"


def test_429s_are_a_warning_and_not_in_flight():
    """A run with refused requests printed no word of it beyond the failures table, and counted the refused requests
    in its peak concurrency (all 12 sent at once, so 12): vLLM counts the successful ones only."""
    config = FakeServerConfig(ttft_s=0.3, itl_s=0.01, fail_every=3, fail_status=429, fail_message=QUEUE_FULL)
    notices: list[str] = []
    with FakeOpenAIServer(config) as server:
        result = run_loadtest(LoadTestConfig(base_url=server.base_url, model="fake-model", num_prompts=12,
                                             random_input_len=8, random_output_len=4, warmup=0),
                              on_notice=notices.append)
    p = result.details["passes"][0]
    assert (p["completed"], p["failed"], p["http_429"]) == (8, 4, 4)
    assert p["peak_concurrency"] == 8  # every send comes before any answer at rate inf: the 8 that were served
    (warning,) = notices
    assert result.details["warnings"] == [warning]
    assert warning.startswith("warning: 4 of 12 requests got HTTP 429 Too Many Requests")
    assert f"4 × {QUEUE_FULL!r}" in warning and "--max-concurrency" in warning and "--max-queue" in warning
    assert "--max-connections-per-client" not in warning  # the server did not say that limit


def test_no_warning_without_429s(fake):
    notices: list[str] = []
    result = run_loadtest(LoadTestConfig(base_url=fake.base_url, model="fake-model", num_prompts=4, random_input_len=4,
                                         random_output_len=2, warmup=0), on_notice=notices.append)
    assert notices == [] and result.details["warnings"] == []


@pytest.fixture(scope="module")
def small_server(tmp_path_factory):
    """`accelkit serve` of the tiny model admitting 2 running + 1 waiting, 4 connections per client address."""
    model = save_bytelevel_model(tmp_path_factory.mktemp("overload") / "m", seed=3)
    with running_server(str(model), max_model_len=512, max_num_seqs=2, max_queue=1,
                        server={"max_connections_per_client": 4}) as (url, _):
        yield url


def test_rate_inf_against_a_server_at_its_limits(small_server):
    """Rate inf sends every request at once, each on its own connection (as vLLM's client): `accelkit serve` refuses
    what passes its limits with 429. The command says so on stderr — how many, the server's words, and
    --max-concurrency / the server flags — and the peak concurrency counts what the server served."""
    proc = run_cli("loadtest", "--base-url", small_server, "--model", "tiny", "--num-prompts", "12",
                   "--random-input-len", "8", "--random-output-len", "64", "--ignore-eos", "--no-save", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    p = doc["details"]["passes"][0]
    assert p["http_429"] >= 1 and p["failed"] == p["http_429"]  # every failure is a refusal
    assert 1 <= p["peak_concurrency"] <= 4 and p["completed"] == 12 - p["http_429"]  # at most its 4 connections
    (warning,) = doc["details"]["warnings"]
    assert f"warning: {p['http_429']} of 12 requests got HTTP 429" in proc.stderr and warning in proc.stderr
    assert "--max-concurrency" in warning and "--max-connections-per-client" in warning
    assert "too many connections from 127.0.0.1: at most 4 open at once per client address" in warning


def test_max_concurrency_within_the_limits_gets_no_429(small_server):
    """What the warning tells the user to do: with --max-concurrency at what the server admits, no request is refused."""
    result = run_loadtest(LoadTestConfig(base_url=small_server, model="tiny", num_prompts=8, random_input_len=8,
                                         random_output_len=16, ignore_eos=True, max_concurrency=3,
                                         request_rate=math.inf), on_notice=pytest.fail)
    p = result.details["passes"][0]
    assert (p["completed"], p["http_429"]) == (8, 0) and result.details["warnings"] == []
