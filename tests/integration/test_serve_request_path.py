"""Where a request's own work runs (``serving_engine.off_loop_unless``): small work on the event loop, large work in
a worker thread; and a response that is not streamed wakes the event loop once, for its finished output. Real
server on 127.0.0.1, tiny real model."""

import json

import httpx
import pytest

from accelkit.serve.server import serving_engine
from accelkit.serve.server.serving_engine import INLINE_BODY_BYTES, INLINE_CHAT_MESSAGES, INLINE_PROMPT_LEN
from accelkit.serve.server.state import Mailbox
from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import on_event_loop, running_server


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    model_dir = save_tiny_model(tmp_path_factory.mktemp("path") / "tiny", "tiny-llama")
    with running_server(str(model_dir), max_num_seqs=8) as (url, state):
        yield url, state


def _complete(url, prompt, **extra):
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 4, "temperature": 0, "ignore_eos": True, **extra}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=60)


def test_a_short_prompt_is_tokenized_on_the_event_loop_and_a_long_one_in_a_worker(server, monkeypatch):
    url, state = server
    tokenizer = state.engine.tokenizer
    real_encode = tokenizer.encode
    where: dict[str, bool] = {}

    def encode(text, *args, **kwargs):
        where.setdefault(text[:3], on_event_loop())
        return real_encode(text, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", encode)
    short, long = "w51 w6", "w52 " + "w6 " * (INLINE_PROMPT_LEN // 3)
    assert len(short) <= INLINE_PROMPT_LEN < len(long)
    assert _complete(url, short).status_code == 200
    _complete(url, long)  # (past the tiny model's context: a 400, after tokenizing)
    assert where == {"w51": True, "w52": False}


def test_many_short_prompts_of_one_request_are_tokenized_in_a_worker(server, monkeypatch):
    """The decision is the request's: 512 prompts of 1,000 characters each, each short, held the event loop for half
    a second tokenized one after another (found in review)."""
    url, state = server
    tokenizer = state.engine.tokenizer
    real_encode = tokenizer.encode
    where: list[bool] = []

    def encode(text, *args, **kwargs):
        if text.startswith("w53"):
            where.append(on_event_loop())
        return real_encode(text, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", encode)
    prompt = "w53 w6 w7"
    prompts = [prompt] * (INLINE_PROMPT_LEN // len(prompt) + 1)
    assert len(prompt) * len(prompts) > INLINE_PROMPT_LEN
    resp = _complete(url, prompts, max_tokens=1)
    assert resp.status_code == 200 and len(resp.json()["choices"]) == len(prompts)
    assert where == [False] * len(prompts)
    where.clear()
    assert _complete(url, [prompt] * 2, max_tokens=1).status_code == 200
    assert where == [True, True]


def test_a_small_body_is_parsed_on_the_event_loop_and_a_large_one_in_a_worker(server, monkeypatch):
    url, _ = server
    real_parse = serving_engine.parse_body
    where: list[tuple[int, bool]] = []

    def parse_body(cls, raw, *args, **kwargs):
        where.append((len(raw), on_event_loop()))
        return real_parse(cls, raw, *args, **kwargs)

    monkeypatch.setattr(serving_engine, "parse_body", parse_body)
    assert _complete(url, "w5 w6").status_code == 200
    # an unknown field pads the body past the limit (logged and ignored, as vLLM does)
    assert _complete(url, "w5 w6", padding="x" * INLINE_BODY_BYTES).status_code == 200
    (small, small_inline), (large, large_inline) = where
    assert small <= INLINE_BODY_BYTES < large
    assert small_inline and not large_inline


def test_a_chat_of_a_few_messages_is_templated_on_the_event_loop_and_a_long_one_in_a_worker(server, monkeypatch):
    """A small body can hold dozens of empty messages, and the template's work grows with them: such a chat is
    templated in a worker thread, a chat of a few messages on the event loop (its body small either way)."""
    url, _ = server
    real_render = serving_engine.render_chat_template
    where: list[tuple[int, bool]] = []

    def render(tokenizer, conversation, **kwargs):
        where.append((len(conversation), on_event_loop()))
        return real_render(tokenizer, conversation, **kwargs)

    monkeypatch.setattr(serving_engine, "render_chat_template", render)
    for count in (2, INLINE_CHAT_MESSAGES + 1):
        messages = [{"role": "user" if i % 2 == 0 else "assistant", "content": ""} for i in range(count - 1)]
        body = {"model": "tiny", "messages": [*messages, {"role": "user", "content": "w5"}], "max_tokens": 1}
        assert len(json.dumps(body)) <= INLINE_BODY_BYTES
        assert httpx.post(f"{url}/v1/chat/completions", json=body, timeout=60).status_code == 200
    assert where == [(2, True), (INLINE_CHAT_MESSAGES + 1, False)]


def test_a_response_that_is_not_streamed_wakes_the_event_loop_only_for_its_finished_output(server, monkeypatch):
    url, _ = server
    real_put = Mailbox.put
    finished: list[bool] = []

    def put(self, queue, item):
        finished.append(item[1].finished)
        return real_put(self, queue, item)

    monkeypatch.setattr(Mailbox, "put", put)
    plain = _complete(url, "w5 w6", max_tokens=6)
    assert plain.status_code == 200 and plain.json()["usage"]["completion_tokens"] == 6
    assert finished == [True]
    finished.clear()
    with httpx.stream("POST", f"{url}/v1/completions", timeout=60, json={
            "model": "tiny", "prompt": "w5 w6", "max_tokens": 6, "temperature": 0, "ignore_eos": True,
            "stream": True}) as streamed:
        text = "".join(streamed.iter_text())
    assert text.count("data: {") == 6 and finished == [False] * 5 + [True]  # one output per token
    assert plain.json()["choices"][0]["text"] == "".join(
        chunk["choices"][0]["text"] for chunk in map(_event, text.split("\n\n")) if chunk)


def _event(block: str):
    data = block.removeprefix("data: ").strip()
    return None if not data or data == "[DONE]" else json.loads(data)
