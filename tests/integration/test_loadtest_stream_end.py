"""How a stream ends decides what a request measured: a text-less chunk with finish_reason (the EOS step) ends
E2E and can be the whole output; a stream that stops before [DONE] or a finish_reason failed; a JSON body
answering stream: true is not a stream; reasoning deltas are output."""

import pytest

from accelkit.core import AccelkitError
from accelkit.loadtest import LoadTestConfig, run_loadtest
from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from tests.integration.loadtest_raw_sse import END, RawSSEServer

EOS_PAUSE_S = 0.25  # the server sleeps this long before the EOS step, which E2E then takes in


def _run(url, endpoint="completions", num_prompts=4):
    config = LoadTestConfig(base_url=url, model="m", endpoint=endpoint, num_prompts=num_prompts,
                            random_input_len=4, random_output_len=4, warmup=0)
    return run_loadtest(config).details["passes"][0]


def _choice(chat, text, finish=None):
    body = {"delta": {} if text is None else {"content": text}} if chat else {"text": "" if text is None else text}
    return {"choices": [{"index": 0, **body, "finish_reason": finish}]}


def _usage(n):
    return {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n}}


@pytest.mark.parametrize("endpoint", ["completions", "chat"])
def test_eos_step_ends_e2e(endpoint):
    """vLLM and accelkit serve end an EOS-stopped request with an empty-text chunk carrying finish_reason 'stop',
    and count the EOS in usage. E2E ended at the last text chunk, so it and TPOT missed the EOS step."""
    def script(n, body, chat):
        return [*(_choice(chat, f" t{i}") for i in range(4)), EOS_PAUSE_S, _choice(chat, None, "stop"), _usage(5)]
    with RawSSEServer(script) as server:
        p = _run(server.base_url, endpoint)
    assert (p["completed"], p["failed"]) == (4, 0)
    for r in p["requests"]:  # half the pause: the client may read the first chunk late (4 streams on 2 cores)
        assert r["e2e_s"] - r["ttft_s"] >= EOS_PAUSE_S / 2 and r["tpot_s"] >= EOS_PAUSE_S / 8
        assert r["finish_reason"] == "stop"
    assert p["itl_ms"]["n"] == 4 * 4  # 3 gaps between text chunks + the EOS step, per request


def test_eos_only_request_succeeds():
    """A request whose only output is the EOS (usage 1 token, no text) failed as 'no output-bearing chunk'."""
    def script(n, body, chat):
        return [EOS_PAUSE_S, _choice(chat, None, "stop"), _usage(1)]
    with RawSSEServer(script) as server:
        p = _run(server.base_url)
    assert (p["completed"], p["failed"]) == (4, 0)
    assert p["ttft_ms"]["n"] == 4 and p["ttft_ms"]["min"] >= EOS_PAUSE_S * 1e3  # TTFT: the finish chunk, no text
    assert p["tpot_ms"]["n"] == 0 and p["total_output_tokens"] == 4


def test_stream_cut_before_done_or_finish_fails():
    """A body that ended cleanly after 3 tokens, with no finish_reason and no [DONE], counted as a success."""
    def script(n, body, chat):
        if n == 2:  # finish_reason but no [DONE]: the request did end
            return [_choice(chat, " a"), _choice(chat, " b", "length"), _usage(2), END]
        return [*(_choice(chat, f" t{i}") for i in range(3)), END]
    with RawSSEServer(script) as server:
        p = _run(server.base_url, num_prompts=3)
    assert (p["completed"], p["failed"]) == (1, 2)
    (failure,) = p["failures"]
    assert failure["error"] == "stream ended before [DONE]/finish_reason after 3 output chunks"


def test_reasoning_only_stream_succeeds():
    """vLLM's `delta.reasoning` was not output: a reasoning-only answer failed."""
    def script(n, body, chat):
        return [{"choices": [{"index": 0, "delta": {"reasoning": f" r{i}"}, "finish_reason": None}]} for i in range(3)] + \
            [_choice(chat, None, "length"), _usage(3)]
    with RawSSEServer(script) as server:
        p = _run(server.base_url, "chat")
    assert (p["completed"], p["failed"]) == (4, 0) and p["total_output_tokens"] == 12


def test_server_ignoring_stream_is_named():
    """A server that answers stream: true with one JSON body failed as 'no output-bearing chunk (nothing to time)'."""
    config = FakeServerConfig(ttft_s=0.01, itl_s=0.001, ignore_stream=True)
    with FakeOpenAIServer(config) as server, pytest.raises(AccelkitError, match="answered JSON, not an event stream") as info:
        run_loadtest(LoadTestConfig(base_url=server.base_url, model="fake-model", num_prompts=2, warmup=0,
                                    random_input_len=4, random_output_len=2))
    assert "stream: true" in str(info.value)
