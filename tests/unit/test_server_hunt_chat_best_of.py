"""Chat's ``best_of`` (vLLM v0's chat field, as completions' one): generated and the n with the highest logprob per
token returned (found in a hunt: chat did not declare the field, so ``"best_of": 4`` was logged as an unknown field
and ignored — one sample, not the best of four — where vLLM v0 honours it and v1 refuses it)."""

from __future__ import annotations

import pytest

from accelkit.serve.server.errors import APIError
from accelkit.serve.server.protocol import ChatCompletionRequest, parse_body
from accelkit.serve.server.serving_chat import ServingChat
from tests.unit.serving_util import models, run, serving_state

MESSAGES = [{"role": "user", "content": "w10 w11 w12"}]


@pytest.fixture(scope="module")
def serving() -> ServingChat:
    state = serving_state()
    return ServingChat(state, models(state))


def chat(serving: ServingChat, **fields) -> dict:
    body = ChatCompletionRequest(**{"messages": MESSAGES, "max_tokens": 4, "temperature": 1.0, "ignore_eos": True,
                                    "seed": 11, "logprobs": True, **fields})
    assert "best_of" not in body.ignored_fields()
    return run(serving.create_chat_completion(body))


def mean_logprob(choice: dict) -> float:
    tokens = choice["logprobs"]["content"]
    return sum(t["logprob"] for t in tokens) / len(tokens)


def test_best_of_returns_the_candidate_with_the_highest_logprob_per_token(serving) -> None:
    candidates = chat(serving, n=4)["choices"]  # (choice j samples with seed + j: best_of's candidates are these)
    texts = [c["message"]["content"] for c in candidates]
    assert len(set(texts)) > 1  # (the candidates differ: which one is picked matters)
    best = max(candidates, key=mean_logprob)["message"]["content"]
    assert best != texts[0]  # (the seed's own sample, what n=1 alone returns, is not the best)
    picked = chat(serving, n=1, best_of=4)["choices"]
    assert [c["message"]["content"] for c in picked] == [best]
    two = chat(serving, n=2, best_of=4)["choices"]
    ranked = sorted(candidates, key=mean_logprob, reverse=True)[:2]
    assert [c["message"]["content"] for c in two] == [c["message"]["content"] for c in ranked]


@pytest.mark.parametrize(("fields", "words"), [({"best_of": 1, "n": 2}, "best_of=1 must be at least n=2"),
                                               ({"best_of": 3, "stream": True}, "cannot be streamed")])
def test_best_of_is_checked_as_completions_check_it(serving, fields, words) -> None:
    with pytest.raises(APIError) as err:
        chat(serving, **fields)
    assert err.value.status == 400 and err.value.param == "best_of" and words in err.value.message


@pytest.mark.parametrize("best_of", ['"x"', "[]", "2.5", "true"])
def test_a_best_of_that_is_no_integer_is_a_400_naming_it(best_of) -> None:
    raw = f'{{"messages": [{{"role": "user", "content": "hi"}}], "best_of": {best_of}}}'.encode()
    with pytest.raises(APIError) as err:
        parse_body(ChatCompletionRequest, raw, "application/json", max_model_len=256)
    assert err.value.status == 400 and err.value.param == "best_of", err.value.message
