"""Logprobs' text fields against OpenAI's definitions, over real HTTP: completions' ``text_offset`` is where each
token's text starts in the returned text, and chat's ``bytes`` are each token's UTF-8 bytes, so that the bytes of
a character split across tokens join into it. Also completions' ``echo``.

The split character comes from a tiny byte-level BPE whose vocabulary holds ``€`` (e2 82 ac) only as the piece
e2 82 plus the byte ac. A model whose logits are all zero, steered by ``logit_bias`` (the lead piece +100, the
continuation +99) and ``frequency_penalty=2``, alternates them under greedy decoding: ``€€…``."""

import json

import httpx
import openai
import pytest
import torch

from accelkit.serve.testing import SPECIAL_TOKENS, build_euro_splitting_tokenizer, hf_model, save_tiny_model
from tests.integration.serve_server_util import running_server

EURO = "€".encode()  # b"\xe2\x82\xac"


LEAD, CONT = 260, len(SPECIAL_TOKENS) + 0xAC  # e2 82 | ac
STEER = {"logit_bias": {str(LEAD): 100, str(CONT): 99}, "frequency_penalty": 2.0, "temperature": 0, "max_tokens": 4}


@pytest.fixture(scope="module")
def euro_server(tmp_path_factory):
    tokenizer = build_euro_splitting_tokenizer()
    assert tokenizer.encode("€", add_special_tokens=False) == [LEAD, CONT]
    model = hf_model("tiny-llama", vocab_size=len(tokenizer))
    with torch.no_grad():
        model.lm_head.weight.zero_()  # every logit 0: logit_bias and the penalty alone pick the tokens
    path = tmp_path_factory.mktemp("serve-euro") / "euro"
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    with running_server(str(path), max_model_len=64) as (url, _):
        yield url


@pytest.fixture(scope="module")
def words_server(tmp_path_factory):
    path = save_tiny_model(tmp_path_factory.mktemp("serve-words") / "tiny", "tiny-llama")
    with running_server(str(path), max_model_len=64) as (url, _):
        yield url


def client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="x", max_retries=0)


def stream_events(url: str, path: str, body: dict) -> list[dict]:
    with httpx.stream("POST", f"{url}{path}", json={**body, "stream": True}, timeout=60) as resp:
        assert resp.status_code == 200
        return [json.loads(line[6:]) for line in resp.iter_lines() if line.startswith("data: {")]


def test_chat_bytes_of_a_character_split_across_tokens_join_into_it(euro_server):
    """Each piece of € decodes alone to U+FFFD, whose UTF-8 (ef bf bd) the bytes used to be: three bytes per
    piece, joining into two replacement characters instead of the €."""
    body = {"model": "tiny", "messages": [{"role": "user", "content": "ab"}], "logprobs": True, **STEER,
            "ignore_eos": True}
    resp = httpx.post(f"{euro_server}/v1/chat/completions", json=body, timeout=60).json()
    message = resp["choices"][0]["message"]["content"]
    content = resp["choices"][0]["logprobs"]["content"]
    assert message == "€€"
    assert [c["bytes"] for c in content] == [[0xE2, 0x82], [0xAC], [0xE2, 0x82], [0xAC]]
    assert bytes(b for c in content for b in c["bytes"]).decode() == message
    streamed = [c for e in stream_events(euro_server, "/v1/chat/completions", body)
                if e["choices"] and e["choices"][0]["logprobs"] for c in e["choices"][0]["logprobs"]["content"]]
    assert [c["bytes"] for c in streamed] == [c["bytes"] for c in content]


def test_text_offset_of_a_split_character_is_the_characters_own(euro_server):
    """Both pieces of a € start where the € does; each used to count its U+FFFD as a character: [0, 1, 2, 3] for
    a two-character text."""
    body = {"model": "tiny", "prompt": "ab", "logprobs": 0, **STEER, "ignore_eos": True}
    choice = httpx.post(f"{euro_server}/v1/completions", json=body, timeout=60).json()["choices"][0]
    assert choice["text"] == "€€"
    assert choice["logprobs"]["text_offset"] == [0, 0, 1, 1]
    streamed = [o for e in stream_events(euro_server, "/v1/completions", body)
                if e["choices"] and e["choices"][0]["logprobs"] for o in e["choices"][0]["logprobs"]["text_offset"]]
    assert streamed == [0, 0, 1, 1]


def test_text_offset_is_where_each_token_starts_in_the_text(words_server):
    """A decoder that joins words with spaces: ``w9`` alone is ``w9`` but `` w9`` in the text; summing the lengths
    of the tokens alone drifted one character per token from where they are."""
    body = {"model": "tiny", "prompt": "w5 w6", "max_tokens": 6, "temperature": 0, "logprobs": 1, "ignore_eos": True}
    choice = httpx.post(f"{words_server}/v1/completions", json=body, timeout=60).json()["choices"][0]
    text, lp = choice["text"], choice["logprobs"]
    offsets = lp["text_offset"]
    pieces = [text[a:b] for a, b in zip(offsets, [*offsets[1:], len(text)], strict=True)]
    assert "".join(pieces) == text
    assert [p.strip() for p in pieces] == lp["tokens"]
    streamed = [o for e in stream_events(words_server, "/v1/completions", body)
                if e["choices"] and e["choices"][0]["logprobs"] for o in e["choices"][0]["logprobs"]["text_offset"]]
    assert streamed == offsets


def test_echo_puts_the_prompt_before_the_completion(words_server):
    base = {"model": "tiny", "max_tokens": 5, "temperature": 0, "extra_body": {"ignore_eos": True}}
    plain = client(words_server).completions.create(prompt=["w5 w6", "w9"], n=2, **base)
    echoed = client(words_server).completions.create(prompt=["w5 w6", "w9"], n=2, echo=True, **base)
    assert [c.text for c in echoed.choices] == [p + c.text for p, c in
                                               zip(["w5 w6", "w5 w6", "w9", "w9"], plain.choices, strict=True)]
    assert echoed.usage == plain.usage  # the prompt is not counted twice
    streamed: dict[int, str] = {}
    for chunk in client(words_server).completions.create(prompt=["w5 w6", "w9"], n=2, echo=True, stream=True, **base):
        for c in chunk.choices:
            streamed[c.index] = streamed.get(c.index, "") + c.text
    assert [streamed[i] for i in range(4)] == [c.text for c in echoed.choices]
    ids = client(words_server).completions.create(prompt=[1, 5, 6], echo=True, **base)  # token ids: decoded
    assert ids.choices[0].text.startswith("<s> w5 w6")


@pytest.mark.parametrize(("body", "param", "needle"), [
    ({"stop": ""}, "stop", "empty string"), ({"stop": ["w5", ""]}, "stop", "empty string"),
    ({"stop": ["w5"] * 65}, "stop", "at most 64"), ({"stop": [5]}, "stop", "valid string"),
    ({"n": 0}, "n", "at least 1"), ({"n": 2, "best_of": 1}, "best_of", "at least n=2"),
    ({"best_of": 3, "stream": True}, "best_of", "cannot be streamed"),
    ({"n": 2, "best_of": 1000}, "best_of", "runs at most"), ({"max_tokens": 0}, "max_tokens", "echo"),
])
def test_stop_n_and_best_of_mistakes_are_openai_errors_naming_the_field(words_server, body, param, needle):
    resp = httpx.post(f"{words_server}/v1/completions", json={"model": "tiny", "prompt": "w5", **body}, timeout=60)
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["type"] == "invalid_request_error" and error["param"] == param and needle in error["message"]


def test_best_of_with_echo_echoes_the_chosen_choice(words_server):
    body = {"model": "tiny", "prompt": "w5 w6", "max_tokens": 4, "best_of": 3, "seed": 1, "echo": True,
            "ignore_eos": True}
    choices = httpx.post(f"{words_server}/v1/completions", json=body, timeout=60).json()["choices"]
    plain = httpx.post(f"{words_server}/v1/completions", json={**body, "echo": False}, timeout=60).json()["choices"]
    assert [c["text"] for c in choices] == ["w5 w6" + plain[0]["text"]]
