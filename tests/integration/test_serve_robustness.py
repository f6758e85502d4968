"""`accelkit serve` under requests meant to hurt it (issue #15): each of these took the server down, leaked
work or misbehaved before; each runs against a real server on 127.0.0.1 with a tiny real model."""

import asyncio
import json
import logging
import signal
import socket
import threading
import time

import httpx
import pytest

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import (
    metric,
    running_server,
    serve_on_a_free_port,
    wait_healthy,
)

PROMPTS = ["w5 w6 w7", "w8 w9", "w10 w11 w12 w13", "w14"]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_model(tmp_path_factory.mktemp("robust") / "tiny", "tiny-llama"))


@pytest.fixture(scope="module")
def server(model_dir):
    with running_server(model_dir, max_num_seqs=16, server={"max_body_bytes": 256 * 1024}) as (url, state):
        yield url, state


@pytest.fixture(scope="module")
def reference(model_dir):
    llm = LLM(model_dir, kv_cache_memory_bytes=8 << 20)
    return [o.text for o in llm.generate(PROMPTS, SamplingParams.greedy(6, ignore_eos=True))]


def _greedy(url, prompt, **extra):
    body = {"model": "tiny", "prompt": prompt, "max_tokens": 6, "temperature": 0, "ignore_eos": True, **extra}
    return httpx.post(f"{url}/v1/completions", json=body, timeout=60)


def _idle(state, timeout=30.0):
    """Wait until no request is in flight and every KV block is free; then assert it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and (state.admission.in_flight or state.engine.block_manager.usage
                                           or state.engine.has_unfinished_requests()):
        time.sleep(0.05)
    assert state.admission.in_flight == 0 and state.engine.block_manager.usage == 0


# ---- 1. one request cannot stop the engine -----------------------------------------------------------
@pytest.mark.parametrize("seed", [2**64, -(2**63) - 1, 10**40])
def test_a_seed_out_of_range_is_a_400_and_the_engine_lives(server, reference, seed):
    url, _ = server
    resp = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": "w5", "max_tokens": 4,
                                                     "temperature": 1.0, "seed": seed}, timeout=60)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "seed", resp.text
    assert httpx.get(f"{url}/health").status_code == 200
    assert _greedy(url, PROMPTS[0]).json()["choices"][0]["text"] == reference[0]


@pytest.mark.parametrize("seed", [2**64 - 1, -(2**63), 0])
def test_seeds_at_the_limits_are_served_reproducibly(server, seed):
    url, _ = server
    body = {"model": "tiny", "prompt": "w5 w6", "max_tokens": 5, "temperature": 1.0, "seed": seed, "ignore_eos": True}
    first, second = (httpx.post(f"{url}/v1/completions", json=body, timeout=60) for _ in range(2))
    assert first.status_code == 200 and first.json()["choices"][0]["text"] == second.json()["choices"][0]["text"]


def test_a_request_failing_inside_the_engine_gets_500_and_no_one_else_notices(server, reference, monkeypatch, caplog):
    url, state = server
    runner = state.engine.runner
    real = runner.execute
    poison = 400  # the first token id of the poisoned prompt (w400)

    def execute(batch, **kw):  # kw: the engine's overlap callback
        if any(seq.token_ids[0] == poison for seq in batch.seqs):
            raise RuntimeError("simulated failure of one request's kernel")
        return real(batch, **kw)

    monkeypatch.setattr(runner, "execute", execute)

    async def run():
        async with httpx.AsyncClient(timeout=60) as client:
            bodies = [{"model": "tiny", "prompt": p, "max_tokens": 6, "temperature": 0, "ignore_eos": True}
                      for p in [*PROMPTS, "w400 w401"]]
            return await asyncio.gather(*(client.post(f"{url}/v1/completions", json=b) for b in bodies))

    with caplog.at_level(logging.ERROR, logger="accelkit.serve"):
        *good, bad = asyncio.run(run())
    assert [r.json()["choices"][0]["text"] for r in good] == reference
    error = bad.json()["error"]
    assert bad.status_code == 500 and error["code"] == "engine_error" and "simulated failure" in error["message"]
    assert "failed; the engine goes on without it" in caplog.text and "cmpl-" in caplog.text  # logged, with its id
    stream = httpx.post(f"{url}/v1/completions", timeout=60, json={"model": "tiny", "prompt": "w400", "max_tokens": 3,
                                                                  "stream": True})
    events = [line for line in stream.text.splitlines() if line.startswith("data: ")]
    assert json.loads(events[-2][6:])["error"]["code"] == "engine_error" and events[-1] == "data: [DONE]"
    # one failing choice of several: it is named, and the message says its siblings were stopped
    both = httpx.post(f"{url}/v1/completions", timeout=60, json={"model": "tiny", "prompt": ["w5 w6", "w400"],
                                                                "max_tokens": 3, "ignore_eos": True})
    message = both.json()["error"]["message"]
    assert both.status_code == 500 and message.startswith("prompt 1 of this request failed inside the engine"), message
    assert "; the rest of it was stopped; other requests are not affected" in message
    three = httpx.post(f"{url}/v1/completions", timeout=60, json={"model": "tiny", "prompt": "w400", "n": 3,
                                                                 "max_tokens": 3, "seed": 1})
    assert three.status_code == 500 and three.json()["error"]["message"].startswith("choice 0 of this request failed")
    assert httpx.get(f"{url}/health").status_code == 200
    _idle(state)


# ---- 2. a client that leaves aborts its request, streaming or not --------------------------------------
def test_non_streaming_requests_abort_when_their_client_disconnects(server):
    url, state = server
    before = dict(state.engine.get_stats().requests_finished)

    async def leave():
        async with httpx.AsyncClient(timeout=0.5) as client:
            with pytest.raises(httpx.TimeoutException):
                await client.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": "w5 w6", "max_tokens": 2000,
                                                                 "ignore_eos": True})

    async def three():
        await asyncio.gather(leave(), leave(), leave())

    asyncio.run(three())
    _idle(state, timeout=60)
    after = state.engine.get_stats().requests_finished
    assert after["abort"] - before["abort"] == 3 and after["length"] == before["length"]


# ---- 3. big bodies: 413 before reading; tokenization never blocks the event loop ------------------------
def test_a_body_over_the_limit_is_413_before_it_is_read(server):
    url, _ = server
    big = json.dumps({"model": "tiny", "prompt": "w5 " * 100_000}).encode()  # 300 kB > 256 KiB
    resp = httpx.post(f"{url}/v1/completions", content=big, headers={"content-type": "application/json"}, timeout=30)
    error = resp.json()["error"]
    assert resp.status_code == 413 and error["code"] == "request_too_large" and "262144" in error["message"]
    chunked = httpx.post(f"{url}/v1/completions", content=iter([big[:100_000], big[100_000:]]), timeout=30,
                         headers={"content-type": "application/json"})  # no Content-Length: counted as it arrives
    assert chunked.status_code == 413 and chunked.json()["error"]["code"] == "request_too_large"
    under = httpx.post(f"{url}/v1/completions", timeout=30, json={"model": "tiny", "prompt": "w5 " * 50_000})
    assert under.status_code == 400 and under.json()["error"]["param"] == "prompt"  # read, and too long a prompt
    assert httpx.get(f"{url}/health").status_code == 200


def test_tokenization_runs_off_the_event_loop(server, monkeypatch):
    url, state = server
    tokenizer = state.engine.tokenizer
    real_encode = tokenizer.encode
    slow_started, slow_done = threading.Event(), threading.Event()

    def encode(text, *args, **kwargs):
        if text.startswith("w77"):
            slow_started.set()
            time.sleep(3)  # a tokenizer busy for seconds: it must not hold up anyone else
            slow_done.set()
        return real_encode(text, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", encode)
    order = []

    def slow():  # (longer than INLINE_PROMPT_LEN: a short prompt is tokenized on the event loop, in microseconds)
        _greedy(url, "w77 w78 " + "w5 " * 400)
        order.append("slow")

    thread = threading.Thread(target=slow)
    thread.start()
    assert slow_started.wait(30)
    assert httpx.get(f"{url}/health", timeout=30).status_code == 200
    # on the event loop, /health would wait for the tokenizer (and, answered the moment it returns, still come
    # before the slow request's reply: the order alone let an encode on the loop pass)
    assert not slow_done.is_set()
    order.append("health")
    thread.join(60)
    assert order == ["health", "slow"]


def test_a_prompt_far_beyond_the_context_is_refused_without_tokenizing_all_of_it(server, monkeypatch):
    url, state = server
    tokenizer = state.engine.tokenizer
    real_encode = tokenizer.encode
    lengths = []

    def encode(text, *args, **kwargs):
        lengths.append(len(text))
        return real_encode(text, *args, **kwargs)

    monkeypatch.setattr(tokenizer, "encode", encode)
    prompt = "w5 " * 80_000  # 240 kB of text, 80k tokens, context 2048
    resp = httpx.post(f"{url}/v1/completions", json={"model": "tiny", "prompt": prompt}, timeout=60)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "prompt"
    assert "more than" in resp.json()["error"]["message"] and max(lengths) < len(prompt) / 4


# ---- 6. hygiene -------------------------------------------------------------------------------------------
def test_auth_scope_scheme_and_constant_time_compare(model_dir, monkeypatch):
    from accelkit.serve.server import middleware

    compared = []
    real = middleware.hmac.compare_digest
    monkeypatch.setattr(middleware.hmac, "compare_digest", lambda a, b: compared.append(1) or real(a, b))
    with running_server(model_dir, api_key="s3cret") as (url, _):
        key = {"authorization": "Bearer s3cret"}
        for path in ("/docs", "/redoc", "/openapi.json", "/v1/models", "/version"):
            denied = httpx.get(f"{url}{path}")
            assert denied.status_code == 401 and denied.json()["error"]["code"] == "invalid_api_key", path
            assert httpx.get(f"{url}{path}", headers=key).status_code == 200, path
        for path in ("/health", "/metrics"):  # probes and scrapers stay open
            assert httpx.get(f"{url}{path}").status_code == 200
        for header in ("bearer s3cret", "BEARER s3cret", "Bearer  s3cret"):
            assert httpx.get(f"{url}/v1/models", headers={"authorization": header}).status_code == 200, header
        for header in ("Bearer s3creT", "Bearer s3cret2", "Basic s3cret", "s3cret", "Bearer"):
            assert httpx.get(f"{url}/v1/models", headers={"authorization": header}).status_code == 401, header
        assert compared  # the key went through hmac.compare_digest


def test_models_do_not_leak_the_path_and_errors_are_openai_objects(server, model_dir):
    url, _ = server
    listed = httpx.get(f"{url}/v1/models").json()["data"][0]
    assert listed["root"] == "tiny" and model_dir not in json.dumps(listed)
    cases = [("GET", "/nope", None, 404, "not_found"), ("GET", "/v1/completions", None, 405, "method_not_allowed"),
             ("DELETE", "/v1/models", None, 405, "method_not_allowed"),
             ("POST", "/v1/completions", b"[1, 2]", 400, "invalid_json"),
             ("POST", "/v1/completions", b'"text"', 400, "invalid_json"),
             ("POST", "/v1/completions", b"{nope", 400, "invalid_json")]
    for method, path, content, status, code in cases:
        resp = httpx.request(method, f"{url}{path}", content=content, headers={"content-type": "application/json"})
        body = resp.json()
        assert resp.status_code == status and "detail" not in body, (method, path, body)
        assert set(body["error"]) == {"message", "type", "param", "code"} and body["error"]["code"] == code


@pytest.mark.parametrize(("extra", "param"), [
    ({"temperature": 10**400}, "temperature"), ({"top_p": -(10**400)}, "top_p"), ({"temperature": 1e308 * 10}, None),
    ({"top_k": -2}, "top_k"), ({"stop": [""]}, "stop"), ({"stop": ["x"] * 65}, "stop"),
    ({"prompt": [10**30]}, "prompt"), ({"prompt": [-1]}, "prompt"), ({"max_tokens": 10**30}, "max_tokens"),
])
def test_numbers_past_every_limit_are_400_naming_the_field(server, extra, param):
    url, _ = server
    body = json.dumps({"model": "tiny", "prompt": "w5", "max_tokens": 2, **extra}).replace("Infinity", "1e999")
    resp = httpx.post(f"{url}/v1/completions", content=body, headers={"content-type": "application/json"}, timeout=30)
    assert resp.status_code == 400, resp.text
    if param is not None:
        assert resp.json()["error"]["param"] == param


HUGE = "9" * 5000  # past Python's 4,300-digit int-string limit, which json.loads raises as a ValueError


@pytest.mark.parametrize(("route", "body", "param", "words"), [
    ("/v1/completions", f'{{"prompt": "w5", "max_tokens": {HUGE}}}', "max_tokens", "max_tokens: an integer of 5000"),
    ("/v1/completions", f'{{"prompt": [5, -{HUGE}]}}', "prompt", "prompt.1: an integer of 5000"),
    ("/v1/completions", f'{{"prompt": "w5", "seed": 1, "extra": {{"deep": [[{HUGE}]]}}}}', "extra",
     "extra.deep.0.0"),
    ("/v1/completions", f'{{"prompt": "w5", "logit_bias": {{"{HUGE}": 1}}}}', "logit_bias", "is not a token id"),
    ("/v1/chat/completions", f'{{"messages": [{{"role": "user", "content": "w5"}}], "stop_token_ids": [{HUGE}]}}',
     "stop_token_ids", "stop_token_ids.0: an integer"),
    ("/detokenize", f'{{"tokens": [{HUGE}]}}', "tokens", "tokens.0: an integer"),
    ("/v1/completions", HUGE, None, "body: an integer"),
])
def test_an_integer_literal_too_long_to_convert_is_a_400_naming_its_field(server, caplog, route, body, param, words):
    url, _ = server
    with caplog.at_level(logging.WARNING, logger="accelkit.serve"):
        resp = httpx.post(f"{url}{route}", content=body, headers={"content-type": "application/json"}, timeout=30)
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["param"] == param and words in err["message"], err
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no traceback in the log


@pytest.mark.parametrize("past", [0, 2**70])
@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_stop_token_ids_past_the_vocabulary_are_a_400(server, route, past):
    url, state = server
    ids = [5, state.engine.model_args.vocab_size + past]  # the first id past the vocabulary, and far past it
    prompt = {"prompt": "w5"} if route == "/v1/completions" else {"messages": [{"role": "user", "content": "w5"}]}
    resp = httpx.post(f"{url}{route}", json={**prompt, "max_tokens": 2, "stop_token_ids": ids}, timeout=30)
    err = resp.json()["error"]
    assert resp.status_code == 400 and err["param"] == "stop_token_ids" and f"={ids[-1]} is not a token id" in \
        err["message"], err


# ---- 4, 5. the process: bounded quiet shutdown, bind before loading -------------------------------------
def test_shutdown_aborts_what_outlives_the_timeout_quietly_and_exits_0(model_dir, tmp_path):
    proc, url = serve_on_a_free_port(model_dir, tmp_path, "--shutdown-timeout", "0.5")
    try:
        wait_healthy(url, 120)
        body = {"model": "tiny", "prompt": "w5 w6", "max_tokens": 2000, "ignore_eos": True}

        async def stream(client):
            async with client.stream("POST", f"{url}/v1/completions", json={**body, "stream": True}) as resp:
                return [line async for line in resp.aiter_lines() if line.startswith("data: ")]

        async def run():
            async with httpx.AsyncClient(timeout=120) as client:
                tasks = [asyncio.ensure_future(stream(client)) for _ in range(3)]
                tasks += [asyncio.ensure_future(client.post(f"{url}/v1/completions", json=body)) for _ in range(3)]
                # all six admitted (a loaded machine may take a while) and far from their 2000 tokens
                deadline = time.monotonic() + 60
                while (metric(url, "vllm:num_requests_running") + metric(url, "vllm:num_requests_waiting") < 6
                       and time.monotonic() < deadline):
                    await asyncio.sleep(0.05)
                proc.send_signal(signal.SIGTERM)
                return await asyncio.gather(*tasks)

        assert httpx.post(f"{url}/v1/completions", content=b"{", headers={"content-type": "application/json"},
                          timeout=30).status_code == 400
        assert httpx.get(f"{url}/v1/%1b]0;pwned%07%1b[2J", timeout=30).status_code == 404  # a hostile path
        results = asyncio.run(run())
        for events in results[:3]:  # streams end with an error event naming the shutdown, then [DONE]
            assert events[-1] == "data: [DONE]" and json.loads(events[-2][6:])["error"]["code"] == "shutting_down"
        for resp in results[3:]:
            assert resp.status_code == 503 and resp.json()["error"]["code"] == "shutting_down"
        assert proc.wait(timeout=60) == 0
        stderr = proc.stderr.read()
        assert "Traceback" not in stderr and "CancelledError" not in stderr, stderr
        assert "aborted 6 request(s) still running after 0.5 s" in stderr
        # a line per request at info level (#29 item 11), 4xx too; a client's path shown with its controls escaped
        lines = stderr.splitlines()
        for said in ("GET /health 200 ", "POST /v1/completions 400 ", "POST /v1/completions 503 ",
                     "GET /v1/\\x1b]0;pwned\\x07\\x1b[2J 404 "):
            assert any(line.startswith("INFO: 127.0.0.1 " + said) and line.endswith(" ms") for line in lines), said
        assert "\x1b" not in stderr
    finally:
        if proc.poll() is None:
            proc.kill()


def test_a_busy_port_or_a_bad_host_is_one_line_before_loading(model_dir, cli):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for args, words in ((["--port", str(port)], "cannot listen on 127.0.0.1"),
                            (["--host", "999.1.1.1"], "--host '999.1.1.1' is not an address"),
                            (["--host", "192.0.2.1"], "use an address of this machine"),
                            (["--enable-auto-tool-choice"], "--enable-auto-tool-choice needs --tool-call-parser")):
            proc = cli("serve", "--model", model_dir, "--served-model-name", "tiny", "--kv-cache-memory", "8MiB", *args)
            stderr = proc.stderr
            lines = [line for line in stderr.splitlines() if line.strip()]
            assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), stderr
            assert words in lines[0] and "serving '" not in stderr


def _broken_copy(model_dir, tmp_path, name, *, config=None, raw_config=None, weights=None, drop=()):
    import shutil

    target = tmp_path / name
    shutil.copytree(model_dir, target)
    if config is not None:
        cfg = json.loads((target / "config.json").read_text())
        cfg.update(config)
        (target / "config.json").write_text(json.dumps(cfg))
    if raw_config is not None:
        (target / "config.json").write_bytes(raw_config)
    if weights is not None:
        (target / "model.safetensors").write_bytes(weights)
    for file in drop:
        (target / file).unlink()
    return str(target)


@pytest.mark.parametrize(("name", "change", "args", "words"), [
    ("list", {"raw_config": b"[1, 2, 3]"}, [], "holds a JSON list"),
    ("malformed", {"raw_config": b'{"vocab_size": 512,'}, [], "is not valid JSON"),
    ("latin1", {"raw_config": b'{"name": "caf\xe9"}'}, [], "is not UTF-8"),
    ("vocab", {"config": {"vocab_size": 10**12}}, [], "vocab_size=1000000000000"),
    ("positions", {"config": {"max_position_embeddings": 10**12}}, [], "--max-model-len"),
    ("layers", {"config": {"num_hidden_layers": 10**9}}, [], "do not belong together"),
    ("garbage", {"weights": b"not a safetensors file" * 20}, [], "is not a safetensors file"),
    ("tokenizer", {"drop": ("tokenizer.json", "tokenizer_config.json")}, [], "cannot load the tokenizer"),
    ("kv", {}, ["--kv-cache-memory", "100TiB"], "--kv-cache-memory"),
    # (transformers would not tie them, and would use the checkpoint's head: tying here served other logits)
    ("tied-head", {"config": {"tie_word_embeddings": True}}, [], "tie_word_embeddings=true, but the checkpoint's"),
    ("template-missing", {}, ["--chat-template", "/nonexistent/t.jinja"], "--chat-template"),
    ("template-dir", {}, ["--chat-template", "/"], "is a directory"),
])
def test_serve_refuses_a_bad_model_directory_in_one_line_before_allocating(model_dir, tmp_path, cli, name, change,
                                                                             args, words):
    target = _broken_copy(model_dir, tmp_path, name, **change)
    proc = cli("serve", "--model", target, "--port", "0", *args, timeout=120)
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert proc.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"), proc.stderr[-2000:]
    assert words in lines[0] and "serving '" not in proc.stderr
