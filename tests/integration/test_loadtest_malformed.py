"""Whatever a server streams fails at most the request it came in: malformed chunks, JSON too deep to
parse and unexpected exceptions are that request's error, and the pass keeps every other record."""

import pytest

from accelkit.loadtest import LoadTestConfig, run_loadtest
from tests.integration.loadtest_raw_sse import RawSSEServer, tokens


def _run(url, endpoint, num_prompts=6):
    config = LoadTestConfig(base_url=url, model="m", endpoint=endpoint, num_prompts=num_prompts,
                            random_input_len=4, random_output_len=4, warmup=0)
    return run_loadtest(config).details["passes"][0]


def _third_request_gets(bad):
    """A script: every request streams well-formed tokens, except that the 3rd to arrive has its 2nd
    chunk replaced by ``bad``."""
    def script(n, body, chat):
        chunks = tokens(body, chat)
        if n == 3:
            chunks[1] = bad
        return chunks
    return script


@pytest.mark.parametrize(("endpoint", "bad", "reason"), [
    ("chat", {"choices": [{"index": 0, "delta": "oops"}]}, "'delta' is a string, not an object"),
    ("chat", {"choices": [{"index": 0, "delta": ["x"]}]}, "'delta' is an array, not an object"),
    ("chat", {"choices": [{"index": 0, "delta": {"content": 5}}]}, "'content' is a number, not a string"),
    ("chat", {"choices": [{"index": 0, "delta": {"reasoning_content": {}}}]}, "'reasoning_content' is an object"),
    ("completions", {"choices": [{"index": 0, "text": [" t1"]}]}, "'text' is an array, not a string"),
    ("completions", {"choices": {"0": {"text": " t1"}}}, "'choices' is an object, not an array"),
    ("completions", {"choices": ["t1"]}, "'choices[0]' is a string, not an object"),
])
def test_malformed_chunk_fails_only_its_request(endpoint, bad, reason):
    with RawSSEServer(_third_request_gets(bad)) as server:
        p = _run(server.base_url, endpoint)
    assert (p["completed"], p["failed"]) == (5, 1)
    (failure,) = p["failures"]
    assert failure["error"].startswith(f"malformed chunk ({reason}") and failure["count"] == 1
    assert p["ttft_ms"]["n"] == 5


def test_json_too_deep_to_parse_fails_only_its_request():
    with RawSSEServer(_third_request_gets("[" * 100_000 + "]" * 100_000)) as server:  # RecursionError in json
        p = _run(server.base_url, "completions")
    assert (p["completed"], p["failed"]) == (5, 1)
    assert p["failures"][0]["error"].startswith("malformed SSE data: '[[[[")


def test_null_fields_are_no_output_not_malformed():
    def script(n, body, chat):
        return [{"choices": [{"index": 0, "delta": None}]}, {"choices": [{"index": 0, "delta": {"content": None}}]},
                {"choices": None}, *tokens(body, chat)]
    with RawSSEServer(script) as server:
        p = _run(server.base_url, "chat", num_prompts=3)
    assert (p["completed"], p["failed"]) == (3, 0)
    assert p["itl_ms"]["n"] == 3 * 3  # 4 output chunks each: the null ones were not timed


def test_unexpected_exception_fails_only_its_request(monkeypatch):
    """The last resort in send(): an exception nobody foresaw is the request's error, `TypeName: message`."""
    from accelkit.loadtest import client

    calls = {"n": 0}
    real = client.chunk_text

    def flaky(data, endpoint):
        calls["n"] += 1
        if calls["n"] == 2:
            raise ZeroDivisionError("nobody foresaw this")
        return real(data, endpoint)

    monkeypatch.setattr(client, "chunk_text", flaky)
    with RawSSEServer(lambda n, body, chat: tokens(body, chat)) as server:
        p = _run(server.base_url, "completions")
    assert (p["completed"], p["failed"]) == (5, 1)
    assert p["failures"][0]["error"] == "ZeroDivisionError: nobody foresaw this"


def test_error_null_is_not_a_failure():
    """`"error": null` on every chunk (some OpenAI-compatible servers send it) means no error."""
    def script(n, body, chat):
        return [{**chunk, "error": None} for chunk in tokens(body, chat)]
    with RawSSEServer(script) as server:
        p = _run(server.base_url, "completions", num_prompts=4)
    assert (p["completed"], p["failed"]) == (4, 0) and p["failures"] == []
