"""A stream that fails after its status line with an exception of no API error (a tokenizer that cannot decode a
token its logprobs name, as a slow SentencePiece tokenizer raises for an id past its pieces): the last event is
an OpenAI error object, then [DONE], as vLLM ends it — not a stream that just stops."""

import json

import httpx
import pytest

from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import running_server

BROKEN = 7  # the token whose text the tokenizer cannot give


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    path = save_tiny_model(tmp_path_factory.mktemp("serve-stream-errors") / "tiny", "tiny-llama")
    with running_server(str(path), max_model_len=64) as (url, state):
        tokenizer = state.engine.tokenizer
        decode = tokenizer.decode

        def failing_decode(ids, *args, **kwargs):  # (the engine's own detokenizer decodes by the backend)
            if list(ids) == [BROKEN]:
                raise IndexError("piece id is out of range.")
            return decode(ids, *args, **kwargs)

        tokenizer.decode = failing_decode
        yield url


@pytest.mark.parametrize(("path", "body"), [
    ("/v1/completions", {"prompt": "w1 w2", "logprobs": 1}),
    ("/v1/chat/completions", {"messages": [{"role": "user", "content": "w1"}], "logprobs": True}),
])
def test_a_stream_that_fails_ends_with_an_error_event(server, path, body):
    body = {"model": "tiny", "max_tokens": 3, "temperature": 0, "logit_bias": {str(BROKEN): 100}, "stream": True,
            **body}
    with httpx.stream("POST", f"{server}{path}", json=body, timeout=30) as resp:
        assert resp.status_code == 200
        data = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    error = json.loads(data[-2])["error"]
    assert error["type"] == "internal_error" and error["code"] == "internal_error"
    assert "IndexError: piece id is out of range." in error["message"]
    # the server goes on: the same request without logprobs streams to its end
    body.pop("logprobs")
    with httpx.stream("POST", f"{server}{path}", json=body, timeout=30) as resp:
        data = [line[6:] for line in resp.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]" and all('"error"' not in d for d in data)
