"""Engine-survives test (issue #15, acceptance 3): a real server on 127.0.0.1 with a tiny real model takes
rounds of concurrent valid, invalid and extreme requests — every SamplingParams field at and past its limits,
malformed and oversized bodies, clients that leave mid-request, streaming and not. After every round
``/health`` is 200 and a greedy request returns exactly the offline engine's text; at the end no request is
in flight, every KV block is free, and no request ever failed inside the engine (all bad input was refused
up front). The mix comes from a seeded generator, so a failure replays; set ACCELKIT_CHAOS_SEED to explore.
"""

import asyncio
import contextlib
import json
import os
import random
import time

import httpx
import pytest

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.sampling import MAX_STOP_STRINGS, SEED_MAX, SEED_MIN
from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import running_server

MAX_MODEL_LEN = 256
BODY_LIMIT = 64 * 1024
ROUNDS, PER_ROUND = 7, 16
CHAOS_SEED = int(os.environ.get("ACCELKIT_CHAOS_SEED", "15"))
REFERENCE_PROMPT = "w21 w22 w23"

OK, BAD = "ok", "bad"
# (field, value, outcome, param named by the 400): every sampling field at its limits (ok) and past them (bad)
FIELD_CASES = [
    ("temperature", 0, OK, None), ("temperature", 1e-7, OK, None), ("temperature", 2.0, OK, None),
    ("temperature", 1e300, OK, None), ("temperature", -0.5, BAD, "temperature"),
    ("temperature", float("inf"), BAD, "temperature"), ("temperature", 10**400, BAD, "temperature"),
    ("temperature", "hot", BAD, "temperature"), ("temperature", True, BAD, "temperature"),
    ("top_p", 1, OK, None), ("top_p", 1e-9, OK, None), ("top_p", 0, BAD, "top_p"),
    ("top_p", 1.000001, BAD, "top_p"), ("top_p", -1, BAD, "top_p"), ("top_p", float("-inf"), BAD, "top_p"),
    ("top_k", 1, OK, None), ("top_k", 10**30, OK, None), ("top_k", None, OK, None), ("top_k", 0, OK, None),
    ("top_k", -1, OK, None), ("top_k", -2, BAD, "top_k"), ("top_k", 2.5, BAD, "top_k"),
    ("max_tokens", 1, OK, None), ("max_tokens", 0, BAD, "max_tokens"), ("max_tokens", -7, BAD, "max_tokens"),
    ("max_tokens", 10**30, BAD, "max_tokens"), ("max_tokens", "room", OK, None),
    ("max_tokens", "room+1", BAD, "max_tokens"),
    ("stop", ["w9"], OK, None), ("stop", "w7", OK, None), ("stop", ["x" * 5000], OK, None),
    ("stop", [f"s{i}" for i in range(MAX_STOP_STRINGS)], OK, None), ("stop", [], OK, None),
    ("stop", [f"s{i}" for i in range(MAX_STOP_STRINGS + 1)], BAD, "stop"), ("stop", [""], BAD, "stop"),
    ("stop", 42, BAD, "stop"),
    ("seed", SEED_MIN, OK, None), ("seed", SEED_MAX, OK, None), ("seed", 0, OK, None),
    ("seed", SEED_MAX + 1, BAD, "seed"), ("seed", SEED_MIN - 1, BAD, "seed"), ("seed", 10**40, BAD, "seed"),
    ("seed", "lucky", BAD, "seed"),
    ("ignore_eos", True, OK, None), ("ignore_eos", "yes", BAD, "ignore_eos"),
    ("n", 1, OK, None), ("n", 3, OK, None), ("n", 0, BAD, "n"), ("presence_penalty", 0.5, OK, None),
    ("presence_penalty", 2.5, BAD, "presence_penalty"),
    ("model", None, OK, None), ("model", 42, BAD, "model"),  # an unknown model is a 404: test_serve_openai_compat
]
PROMPT_CASES = [  # completions only
    ("prompt", "w5 w6 w7", OK, None), ("prompt", [5, 6, 7], OK, None), ("prompt", ["w5", "w6 w7"], OK, None),
    ("prompt", [[5, 6], [7]], OK, None), ("prompt", [4] * (MAX_MODEL_LEN - 1), OK, None),
    ("prompt", "", BAD, "prompt"), ("prompt", [], BAD, "prompt"), ("prompt", [10**30], BAD, "prompt"),
    ("prompt", [-1], BAD, "prompt"), ("prompt", [4] * MAX_MODEL_LEN, BAD, "prompt"),
    ("prompt", "w5 " * 3000, BAD, "prompt"), ("prompt", 7, BAD, "prompt"),
]
CHAT_CASES = [
    ("messages", [{"role": "user", "content": "w5 w6"}], OK, None),
    ("messages", [{"role": "system", "content": "w9"}, {"role": "user", "content": [{"type": "text", "text": "w5"}]}],
     OK, None),
    ("messages", [], BAD, "messages"), ("messages", [{"role": "wizard", "content": "w5"}], BAD, "messages"),
]


# issue #30's generators: huge integer literals, ids past the vocabulary in every id field, control characters and
# escape sequences in every string field, deeply nested JSON in the object fields
HUGE_INT = "9" * 5000  # past Python's 4,300-digit int-string limit
ESCAPES = ("\x1b]0;pwned\x07", "\x1b[2J\x1b[H", "\x9b31m", "\x00\x7f", "\u202e\x08\r")
ID_FIELDS = ("prompt", "stop_token_ids", "allowed_token_ids", "logit_bias")  # prompt: completions only
INT_FIELDS = ("max_tokens", "seed", "n", "top_k", "min_tokens", "priority", "truncate_prompt_tokens")


def _hostile(rng: random.Random, chat: bool, body: dict, vocab: int) -> dict:
    """One of #30's hostile requests (not streamed): raw JSON text, its outcome and the param a 400 must name."""
    body["stream"] = False
    kind = rng.choice(("huge", "past_vocab", "escapes", "deep"))
    marker = '"__hostile__"'
    if kind == "huge":  # json.dumps cannot write such an int: a marker is replaced in the text
        field = rng.choice((*INT_FIELDS, "stop_token_ids", "logit_bias", *(() if chat else ("prompt",))))
        body[field] = {"__hostile__": 1} if field == "logit_bias" else [5, "__hostile__"] if field in ID_FIELDS \
            else "__hostile__"
        sign = rng.choice(("", "-"))
        content = json.dumps(body).replace(marker, f'"{HUGE_INT}"' if field == "logit_bias" else sign + HUGE_INT)
        return {"kind": "rawjson", "content": content, "outcome": BAD, "param": field, "body": body}
    if kind == "past_vocab":
        field = rng.choice(ID_FIELDS[1:] if chat else ID_FIELDS)
        token = vocab + rng.choice((0, 1, 2**31, 2**70))
        body[field] = {str(token): 1} if field == "logit_bias" else [5, token]
        return {"kind": "rawjson", "content": json.dumps(body), "outcome": BAD, "param": field, "body": body}
    if kind == "escapes":  # free text takes them (200, printed escaped wherever it is logged); a name does not
        text = "w5 " + rng.choice(ESCAPES)
        field = rng.choice(("stop", "user", "model", "content" if chat else "prompt", *(("role",) if chat else ())))
        outcome, param = OK, None
        if field == "content":
            body["messages"] = [{"role": "user", "content": text}]
        elif field == "role":
            body["messages"] = [{"role": text, "content": "w5"}]
            outcome, param = BAD, "messages"
        elif field == "model":
            body["model"] = text
            outcome = "404"
        else:
            body[field] = [text] if field == "stop" else text
        return {"kind": "rawjson", "content": json.dumps(body), "outcome": outcome, "param": param, "body": body}
    # deep: nested past what json.loads takes (the whole body refused), or deep inside an object field
    depth = rng.choice((200, 900, 30_000))  # 30,000: past what json.loads takes, inside the 64 KiB body limit
    field = rng.choice(("logit_bias", "stream_options"))  # (chat_template_kwargs takes any JSON: nesting is its own)
    body[field] = {"a": "__hostile__"}
    content = json.dumps(body).replace(marker, "[" * depth + "]" * depth)
    if depth == 30_000:
        return {"kind": "rawjson", "content": content, "outcome": BAD, "param": None, "body": body}
    return {"kind": "rawjson", "content": content, "outcome": BAD, "param": field, "body": body}


def _case(rng: random.Random, vocab: int) -> dict:
    """One request: its kind, JSON body (or raw bytes), the outcome expected and the param a 400 must name."""
    chat = rng.random() < 0.25
    body: dict = {"model": "tiny", "max_tokens": rng.randint(1, 24), "stream": rng.random() < 0.5}
    body.update({"messages": [{"role": "user", "content": "w5 w6"}]} if chat else {"prompt": "w5 w6 w7"})
    if rng.random() < 0.3:
        return _hostile(rng, chat, body, vocab)
    special = rng.random()
    if special < 0.06:
        return {"kind": "raw", "content": b'{"model": "tiny", "prompt": ', "outcome": BAD, "param": None}
    if special < 0.10:
        return {"kind": "raw", "content": b"[1, 2, 3]", "outcome": BAD, "param": None}
    if special < 0.14:
        return {"kind": "raw", "content": json.dumps({**body, "prompt": "w5 " * 30_000}).encode(), "outcome": "413",
                "param": None}
    if special < 0.24:  # a client that leaves mid-request
        body.update({"max_tokens": 200, "ignore_eos": True})
        return {"kind": "leave", "body": body, "outcome": "leave", "param": None}
    by_field: dict[str, list] = {}
    for c in FIELD_CASES + (CHAT_CASES if chat else PROMPT_CASES):
        by_field.setdefault(c[0], []).append(c)
    fields = rng.sample(sorted(by_field), rng.randint(1, 3))  # distinct fields, so no case undoes another
    if "prompt" in fields and "max_tokens" in fields:
        fields.remove("max_tokens")  # max_tokens' limits depend on the prompt: tested with a prompt of their own
    picked = [rng.choice(by_field[f]) for f in fields]
    outcome, params = OK, set()
    for field, value, result, param in picked:
        if field == "max_tokens" and isinstance(value, str):
            if chat:
                continue
            prompt = [5, 6, 7, 8]
            body["prompt"] = prompt
            value = MAX_MODEL_LEN - len(prompt) + (1 if value == "room+1" else 0)
        body[field] = value
        if result == BAD:
            outcome = BAD
            params.add(param)
    if isinstance(body.get("prompt"), list) and len(body["prompt"]) == MAX_MODEL_LEN - 1:
        body["max_tokens"] = 1  # the longest prompt the context holds leaves room for one token
    return {"kind": "json", "body": body, "outcome": outcome, "param": params.pop() if len(params) == 1 else None}


async def _send(client: httpx.AsyncClient, url: str, case: dict) -> None:
    """Send one case and check its answer (a failed assert names the case)."""
    body = case.get("body", {})
    path = "/v1/chat/completions" if "messages" in body else "/v1/completions"
    if case["kind"] == "raw":
        resp = await client.post(f"{url}/v1/completions", content=case["content"],
                                 headers={"content-type": "application/json"})
        status = 413 if case["outcome"] == "413" else 400
        assert resp.status_code == status and set(resp.json()["error"]) == {"message", "type", "param", "code"}, case
        return
    content = json.dumps(body).replace("Infinity", "1e999").encode()  # JSON has no inf: send an overflowing literal
    headers = {"content-type": "application/json"}
    if case["kind"] == "rawjson":
        resp = await client.post(f"{url}{path}", content=case["content"].encode(), headers=headers)
        expected = {OK: 200, BAD: 400, "404": 404}[case["outcome"]]
        assert resp.status_code == expected, (case["body"], resp.text[:300])
        if expected != 200:
            error = resp.json()["error"]
            assert case["param"] is None or error["param"] == case["param"], (case["body"], error)
        return
    if case["kind"] == "leave":
        if body["stream"]:
            async with client.stream("POST", f"{url}{path}", content=content, headers=headers) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: "):
                        break  # one event, then gone
        else:
            with contextlib.suppress(httpx.TimeoutException):
                await client.post(f"{url}{path}", content=content, headers=headers, timeout=0.3)
        return
    if body.get("stream") and case["outcome"] == OK:
        async with client.stream("POST", f"{url}{path}", content=content, headers=headers) as resp:
            assert resp.status_code == 200, (case, await resp.aread())
            events = [line async for line in resp.aiter_lines() if line.startswith("data: ")]
        assert events[-1] == "data: [DONE]" and not any('"error"' in e for e in events), (case, events[-3:])
        return
    resp = await client.post(f"{url}{path}", content=content, headers=headers)
    if case["outcome"] == OK:
        assert resp.status_code == 200, (case, resp.text)
        assert all(c["finish_reason"] in ("stop", "length") for c in resp.json()["choices"]), (case, resp.text)
    else:
        assert resp.status_code == 400, (case, resp.text)
        error = resp.json()["error"]
        assert error["message"] and (case["param"] is None or error["param"] == case["param"]), (case, error)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_model(tmp_path_factory.mktemp("chaos") / "tiny", "tiny-llama"))


def test_the_engine_survives_a_random_mix_of_valid_invalid_and_extreme_requests(model_dir):
    reference = LLM(model_dir, kv_cache_memory_bytes=4 << 20, max_model_len=MAX_MODEL_LEN).generate(
        REFERENCE_PROMPT, SamplingParams.greedy(12, ignore_eos=True))[0].text
    rng = random.Random(CHAOS_SEED)
    seen = {OK: 0, BAD: 0, "413": 0, "leave": 0, "rawjson": 0}
    with running_server(model_dir, max_num_seqs=8, max_queue=64, kv_cache_memory_bytes=4 << 20,
                        max_model_len=MAX_MODEL_LEN, server={"max_body_bytes": BODY_LIMIT}) as (url, state):
        async def round_(cases):
            limits = httpx.Limits(max_connections=64)
            async with httpx.AsyncClient(timeout=120, limits=limits) as client:
                await asyncio.gather(*(_send(client, url, c) for c in cases))
                health = await client.get(f"{url}/health")
                assert health.status_code == 200, health.text
                check = await client.post(f"{url}/v1/completions", json={
                    "model": "tiny", "prompt": REFERENCE_PROMPT, "max_tokens": 12, "temperature": 0, "ignore_eos": True})
                assert check.json()["choices"][0]["text"] == reference  # exact, whatever came before

        vocab = state.engine.model_args.vocab_size
        for _ in range(ROUNDS):
            cases = [_case(rng, vocab) for _ in range(PER_ROUND)]
            for c in cases:
                seen[BAD if c["outcome"] == "404" else c["outcome"]] += 1
                seen["rawjson"] += c["kind"] == "rawjson"
            asyncio.run(round_(cases))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (state.admission.in_flight or state.engine.has_unfinished_requests()):
            time.sleep(0.05)
        stats = state.engine.get_stats()
        assert state.admission.in_flight == 0 and stats.num_running == 0 and stats.num_waiting == 0
        assert stats.kv_cache_usage == 0 and state.engine.block_manager.num_free_blocks == stats.num_blocks
        assert stats.requests_finished["error"] == 0  # every bad request was refused before reaching the engine
        assert state.loop.is_alive
    assert all(seen[k] > 0 for k in seen), seen  # the mix really held every kind
