"""The HTTP server's limits on what one client can cost the others: bodies parsed off the event loop, connections
that send too slowly closed, a bounded log when file descriptors run out — real HTTP on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time

import httpx
import pytest

from accelkit.serve.server import connections, lifecycle, protocol
from accelkit.serve.server.serving_engine import INLINE_BODY_BYTES
from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import on_event_loop, running_server

MAX_MODEL_LEN = 64
JSON = {"content-type": "application/json"}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_model(tmp_path_factory.mktemp("serve-limits") / "tiny", "tiny-llama"))


@pytest.fixture(scope="module")
def server(model_dir):
    """Short header and body deadlines (--header-timeout, --body-timeout)."""
    with running_server(model_dir, max_model_len=MAX_MODEL_LEN, max_num_seqs=2, max_queue=1,
                        server={"header_timeout_s": 1.0, "body_timeout_s": 1.0}) as (url, state):
        yield url, state


def _connect(url: str) -> socket.socket:
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)))
    sock.settimeout(30)  # generous: the server's deadlines are 1 s
    return sock


def _read_all(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    return data


def test_large_bodies_are_parsed_and_validated_off_the_event_loop(server, monkeypatch):
    """(A body of at most INLINE_BODY_BYTES is parsed on the event loop: test_serve_request_path.)"""
    url, _ = server
    seen = []
    loads, ignored = json.loads, protocol._Body.ignored_fields

    def spy_loads(s, *args, **kwargs):  # type: ignore[no-untyped-def]
        if b"marker-field" in (s if isinstance(s, bytes) else s.encode()):
            seen.append(("json.loads", on_event_loop()))
        return loads(s, *args, **kwargs)

    def spy_ignored(self, prefix=""):  # type: ignore[no-untyped-def]
        if not prefix:
            seen.append(("ignored_fields", on_event_loop()))
        return ignored(self, prefix)

    monkeypatch.setattr(json, "loads", spy_loads)
    monkeypatch.setattr(protocol._Body, "ignored_fields", spy_ignored)
    for path, body in (("/v1/completions", {"prompt": "w5", "max_tokens": 1}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "w5"}], "max_tokens": 1})):
        resp = httpx.post(f"{url}{path}", json={**body, "marker-field": [{"a": 1}], "padding": "x" * INLINE_BODY_BYTES},
                          timeout=30)
        assert resp.status_code == 200, resp.text
    assert {name for name, _ in seen} == {"json.loads", "ignored_fields"}
    assert not any(loop for _, loop in seen), seen


def test_token_ids_beyond_the_context_are_refused_before_each_id_is_validated(server, monkeypatch):
    url, _ = server
    calls = []
    ignored = protocol._Body.ignored_fields
    monkeypatch.setattr(protocol._Body, "ignored_fields", lambda self, prefix="": calls.append(1) or ignored(self, prefix))
    for prompt in ([5] * 100_000, [[5, 6], [5] * MAX_MODEL_LEN]):
        resp = httpx.post(f"{url}/v1/completions", json={"prompt": prompt, "max_tokens": 1}, timeout=60)
        err = resp.json()["error"]
        assert resp.status_code == 400 and err["code"] == "context_length_exceeded" and err["param"] == "prompt"
        assert f"maximum context length is {MAX_MODEL_LEN} tokens" in err["message"]
    assert not calls  # refused before the model was validated (ignored fields are named after validation)


@pytest.mark.parametrize(("content", "code", "words"), [
    (b'{"prompt": [5, 1e400]}', "invalid_value", "prompt[1]=inf is not a token id"),
    (b'{"prompt": [5, NaN]}', "invalid_value", "prompt[1]=nan is not a token id"),
    (b'{"prompt": [[5], [6, 2.5]]}', "invalid_value", "prompt[1][1]=2.5 is not a token id"),
    (b'{"prompt": "\xff"}', "invalid_json", "not UTF-8"),
    (b"[" * 100_000 + b"]" * 100_000, "invalid_json", "too deeply"),
    (b'{"prompt": "w5",}', "invalid_json", "line 1 column"),
    (b"", "invalid_json", "empty"),
])
def test_malformed_bodies_say_what_is_wrong(server, content, code, words):
    url, _ = server
    resp = httpx.post(f"{url}/v1/completions", content=content, headers=JSON, timeout=30)
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["code"] == code and words in err["message"], err


def test_openapi_still_describes_the_request_bodies(server):
    url, _ = server
    schema = httpx.get(f"{url}/openapi.json").json()
    for path, model in (("/v1/completions", "CompletionRequest"), ("/v1/chat/completions", "ChatCompletionRequest"),
                        ("/tokenize", "TokenizeRequest"), ("/detokenize", "DetokenizeRequest")):
        ref = schema["paths"][path]["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref == f"#/components/schemas/{model}"
    components = schema["components"]["schemas"]
    assert "prompt" in components["CompletionRequest"]["properties"] and "ChatMessage" in components


def test_a_body_that_stops_coming_gets_408_and_the_connection_closes(server):
    url, _ = server
    with _connect(url) as sock:
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"prompt\":")
        reply = _read_all(sock)  # returns only once the server closes the connection
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 408") and b"connection: close" in head.lower(), reply[:300]
    assert json.loads(body)["error"]["code"] == "request_timeout"


@pytest.mark.parametrize("sent", [b"", b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"],
                         ids=["nothing", "half the headers"])
def test_a_connection_without_a_whole_request_head_is_closed(server, sent):
    url, _ = server
    # both connections wait out the deadline at the same time
    with _connect(url) as sock, _connect(url) as kept:
        sock.sendall(sent)
        # a kept-alive connection gets the same deadline for its next request's headers
        kept.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
        assert kept.recv(100).startswith(b"HTTP/1.1 200")
        kept.sendall(sent or b"GET /he")
        assert _read_all(sock) == b""  # closed by the server, no response
        assert b"HTTP/1.1" not in _read_all(kept)


def _connect_from(url: str, address: str) -> socket.socket:
    """A TCP connection to the server from source ``address`` (any of 127.0.0.0/8 is this machine's loopback)."""
    host, port = url.removeprefix("http://").split(":")
    sock = socket.create_connection((host, int(port)), source_address=(address, 0))
    sock.settimeout(30)
    return sock


def _busy(url: str, address: str) -> socket.socket:
    """A connection with a request in progress: its head sent and taken (the server's ``100 Continue`` says the
    route is reading the body), its body not yet sent."""
    sock = _connect_from(url, address)
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Expect: 100-continue\r\nContent-Length: 60\r\n\r\n")
    reply = sock.recv(100)
    assert reply.startswith(b"HTTP/1.1 100 "), reply
    return sock


def _complete_from(url: str, address: str) -> httpx.Response:
    with httpx.Client(transport=httpx.HTTPTransport(local_address=address), timeout=30) as client:
        return client.post(f"{url}/v1/completions", json={"prompt": "w5 w6", "max_tokens": 3})


def test_one_address_holding_more_idle_connections_than_the_limit_does_not_lock_out_another(model_dir):
    """#30 item 3: 1,100 idle connections made every new request a 503 for 30 s. Now one address holds at most its
    cap (past it a request gets 429, and idle connections past it are the first closed), and a client from another
    address gets its answer."""
    with running_server(model_dir, max_model_len=MAX_MODEL_LEN, max_num_seqs=2, max_queue=1) as (url, state):
        limit, cap = lifecycle.concurrency_limit(state), lifecycle.max_connections_per_client(state)
        assert cap < limit
        held = [_connect_from(url, "127.0.0.1") for _ in range(limit + 10)]
        try:
            # past the cap: a request is told why, then the connection closes (the newest: the older ones past the
            # cap were the first idle connections closed as the open ones neared the limit)
            refused = held[-1]
            refused.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            head, _, body = _read_all(refused).partition(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 429") and json.loads(body)["error"]["code"] == "too_many_connections"
            resp = _complete_from(url, "127.0.0.2")
            assert resp.status_code == 200 and resp.json()["choices"][0]["text"], resp.text
            # the first `cap` connections are served as ever
            held[0].sendall(b"GET /health HTTP/1.1\r\nHost: x\r\n\r\n")
            assert held[0].recv(100).startswith(b"HTTP/1.1 200")
        finally:
            for sock in held:
                sock.close()


def test_idle_connections_are_dropped_first_as_the_limit_nears(model_dir):
    """Many addresses, each under its cap, together past the limit: the idle connections are closed to make room,
    and a request in progress is never dropped."""
    with running_server(model_dir, max_model_len=MAX_MODEL_LEN, max_num_seqs=2, max_queue=1) as (url, state):
        limit, cap = lifecycle.concurrency_limit(state), lifecycle.max_connections_per_client(state)
        busy = _busy(url, "127.0.0.10")
        idle = [_connect_from(url, f"127.0.0.{11 + i // (cap - 1)}") for i in range(limit + 10)]
        time.sleep(connections.IDLE_GRACE_S + 0.5)  # silent this long, a connection counts as idle
        try:
            resp = _complete_from(url, "127.0.0.2")
            assert resp.status_code == 200, resp.text
            busy.sendall(b'{"prompt": "w5", "max_tokens": 2}'.ljust(60))  # its body: it was never dropped
            assert busy.recv(100).startswith(b"HTTP/1.1 200")
            still_open = 0
            for sock in idle:
                sock.setblocking(False)
                try:
                    still_open += sock.recv(1) != b""  # b"": closed by the server
                except BlockingIOError:
                    still_open += 1
            assert still_open < limit and still_open + 10 < len(idle)  # the oldest idle ones were closed
        finally:
            for sock in [busy, *idle]:
                sock.close()


def test_connections_all_busy_past_the_limit_get_503_and_capacity_is_not_refused(model_dir, caplog):
    # its own server with the default header deadline: the module's 1 s one could close held connections while a
    # loaded machine is still opening the rest (~70 of them)
    with running_server(model_dir, max_model_len=MAX_MODEL_LEN, max_num_seqs=2, max_queue=1,
                        server={"body_timeout_s": 120.0}) as (url, state):
        limit, cap = lifecycle.concurrency_limit(state), lifecycle.max_connections_per_client(state)
        assert limit > state.admission.capacity
        # capacity's worth of requests in progress (what a full server has) leave /health answered
        held = [_busy(url, "127.0.0.3") for _ in range(state.admission.capacity)]
        try:
            assert httpx.get(f"{url}/health", timeout=30).status_code == 200
            # (a request counts its own connection: the limit's last one is uvicorn's 503 already)
            held += [_busy(url, f"127.0.0.{4 + i // cap}") for i in range(limit - 1 - len(held))]
            resp = httpx.get(f"{url}/health", timeout=30)
            assert resp.status_code == 503  # nothing idle to close: every connection has a request in progress
        finally:
            for sock in held:
                sock.close()
    # clients that left mid-body are nobody's bug: no error, no traceback in the log
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.records[:3]


def test_running_out_of_file_descriptors_is_one_warning_not_a_traceback_per_accept(caplog):
    handler = lifecycle._AcceptErrorLog()
    loop = asyncio.new_event_loop()
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(2048):
                handler(loop, {"message": "socket.accept() out of system resource",
                               "exception": OSError(24, "Too many open files")})
    finally:
        loop.close()
    records = [r for r in caplog.records if "cannot accept" in r.getMessage()]
    assert len(records) == 1 and "ulimit -n" in records[0].getMessage() and not records[0].exc_info
    assert len(caplog.records) == 1


def test_continuous_usage_stats_put_the_usage_so_far_on_every_chunk(server):
    url, _ = server
    for path, body in (("/v1/completions", {"prompt": "w5"}),
                       ("/v1/chat/completions", {"messages": [{"role": "user", "content": "w5"}]})):
        with httpx.stream("POST", f"{url}{path}", timeout=60, json={
                **body, "max_tokens": 4, "ignore_eos": True, "stream": True,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True}}) as resp:
            events = [json.loads(line[6:]) for line in resp.iter_lines()
                      if line.startswith("data: ") and line != "data: [DONE]"]
        usages = [e["usage"] for e in events]
        assert all(u is not None for u in usages), events
        completion = [u["completion_tokens"] for u in usages]
        assert completion == sorted(completion) and completion[-1] == 4 and len(set(u["prompt_tokens"] for u in usages)) == 1


def test_documents_and_past_reasoning_reach_the_chat_template_and_a_requests_own_template_is_refused(model_dir):
    """vLLM passes a request's RAG documents to the template, and an assistant turn's reasoning (as reasoning and
    reasoning_content: Qwen3's templates write a past turn's thinking back); a chat template in the request is a
    400, as vLLM answers without --trust-request-chat-template (it was ignored: the server's template rendered)."""
    template = ("{% for d in documents or [] %}{{ d.text }} {% endfor %}{% for m in messages %}"
                "{% if m.reasoning_content %}{{ m.reasoning_content }} {{ m.reasoning }} {% endif %}"
                "{{ m.content }} {% endfor %}")
    messages = [{"role": "user", "content": "w1"}, {"role": "assistant", "content": "w3", "reasoning": "w2"},
                {"role": "user", "content": "w4"}]
    with running_server(model_dir, max_model_len=MAX_MODEL_LEN, server={"chat_template": template}) as (url, _):
        rendered = httpx.post(f"{url}/tokenize", json={"add_generation_prompt": False, "messages": messages,
                                                       "documents": [{"title": "t", "text": "w9"}]})
        expected = httpx.post(f"{url}/tokenize", json={"prompt": "w9 w1 w2 w2 w3 w4", "add_special_tokens": False})
        chat = httpx.post(f"{url}/v1/chat/completions", json={"messages": messages, "max_tokens": 1,
                                                               "chat_template": "{{ 'x' }}"})
        tokenize = httpx.post(f"{url}/tokenize", json={"messages": messages, "chat_template": "{{ 'x' }}"})
    assert rendered.status_code == 200, rendered.text
    assert rendered.json()["tokens"] == expected.json()["tokens"]
    for r in (chat, tokenize):
        assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template", r.text
        assert "--trust-request-chat-template" in r.json()["error"]["message"]


def test_assistant_tool_calls_reach_the_chat_template(model_dir):
    """A conversation with a tool call in its history renders it (vLLM passes tool_calls and tool_call_id to the
    template; they were dropped as unknown fields), each call's arguments as the object its JSON text holds (as
    vLLM gives them: templates write them with tojson, and a string would be encoded twice), an empty list of
    calls as none (the template's plain assistant turn); arguments that are not JSON are a 400 naming the call."""
    template = ("{% for m in messages %}{% if m.tool_calls %}w{{ m.tool_calls | length + 6 }} "
                "w{{ m.tool_calls[0].function.arguments.n }} {% elif m.role == 'assistant' %}{{ m.content }} "
                "{% endif %}{% if m.tool_call_id == 'c1' %}w9 {% endif %}{% endfor %}")
    call = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": '{"n": 4}'}}
    messages = [{"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "content": "w5", "tool_call_id": "c1"},
                {"role": "assistant", "content": "w3", "tool_calls": []}]
    bad = {**call, "function": {"name": "lookup", "arguments": "{n: 4}"}}
    with running_server(model_dir, max_model_len=MAX_MODEL_LEN, server={"chat_template": template}) as (url, _):
        rendered = httpx.post(f"{url}/tokenize", json={"add_generation_prompt": False, "messages": messages})
        expected = httpx.post(f"{url}/tokenize", json={"prompt": "w7 w4 w9 w3", "add_special_tokens": False})
        refused = httpx.post(f"{url}/v1/chat/completions", json={"messages": [messages[0] | {"tool_calls": [call, bad]}]})
    assert rendered.status_code == 200, rendered.text
    assert rendered.json()["tokens"] == expected.json()["tokens"]
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert message.startswith("messages.0.tool_calls: tool call 1's function.arguments is not JSON"), message
