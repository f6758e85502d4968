"""vLLM's ``return_token_ids`` through the serving classes (no HTTP, a real tiny engine loop): the prompt's and each
choice's token ids beside the text, streamed and not — and vLLM's ``logits_processors``, which the server cannot
run, refused instead of ignored. Both were unknown fields, dropped with a log line, until a review found them."""

import pytest

from accelkit.serve.server.errors import APIError
from accelkit.serve.server.protocol import ChatCompletionRequest, CompletionRequest
from accelkit.serve.server.serving_chat import ServingChat
from accelkit.serve.server.serving_completion import ServingCompletion
from tests.unit.serving_util import events, models, run, serving_state, settled

PROMPT = "w10 w11 w12 w13"
MESSAGES = [{"role": "user", "content": "w10 w11 w12"}]
EOS = 2  # the tiny tokenizer's </s>: no text, so a stream had no chunk for it
FIELDS = {"max_tokens": 5, "temperature": 0, "ignore_eos": True, "return_token_ids": True}


@pytest.fixture(scope="module")
def completion():
    state = serving_state()
    return ServingCompletion(state, models(state))


@pytest.fixture(scope="module")
def chat():
    state = serving_state()
    return ServingChat(state, models(state))


def answer(create, body, stream=False):
    async def go():
        result = await create(body)
        return await events(result) if stream else result
    return run(go())


def joined_ids(chunks):
    ids = {}
    for chunk in chunks[:-1]:
        for choice in chunk["choices"]:
            ids.setdefault(choice["index"], []).extend(choice["token_ids"])
    return ids


def test_completions_return_each_choices_prompt_and_output_ids(completion):
    data = answer(completion.create_completion, CompletionRequest(prompt=[PROMPT, "w20 w21"], n=2, **FIELDS))
    tokenizer = completion.engine.tokenizer
    assert [c["prompt_token_ids"] for c in data["choices"]] == [tokenizer(PROMPT).input_ids] * 2 + \
        [tokenizer("w20 w21").input_ids] * 2
    assert all(len(c["token_ids"]) == 5 and tokenizer.decode(c["token_ids"], skip_special_tokens=True) ==
               c["text"].strip() for c in data["choices"])  # (EOS under ignore_eos: an id without text)
    assert sum(map(len, (c["token_ids"] for c in data["choices"]))) == data["usage"]["completion_tokens"]
    echoed = answer(completion.create_completion, CompletionRequest(prompt=PROMPT, echo=True, **{**FIELDS,
                                                                                                  "max_tokens": 0}))
    assert echoed["choices"][0]["token_ids"] == []  # echo alone: the token the engine sampled is not returned
    assert "token_ids" not in answer(completion.create_completion, CompletionRequest(prompt=PROMPT, max_tokens=2)
                                     )["choices"][0]  # not asked: vLLM's response, unchanged
    assert settled(completion.state)


def test_a_completions_stream_hands_out_every_id_once(completion):
    # every token EOS (allowed_token_ids, ignore_eos): no text at all, and every id still reaches the client
    fields = {**FIELDS, "allowed_token_ids": [EOS]}
    full = answer(completion.create_completion, CompletionRequest(prompt=PROMPT, **fields))
    chunks = answer(completion.create_completion, CompletionRequest(prompt=PROMPT, stream=True, **fields), stream=True)
    assert full["choices"][0]["token_ids"] == [EOS] * 5 and joined_ids(chunks) == {0: [EOS] * 5}
    assert chunks[0]["choices"][0]["prompt_token_ids"] == full["choices"][0]["prompt_token_ids"]
    assert sum("prompt_token_ids" in c["choices"][0] for c in chunks[:-1]) == 1  # the first chunk only


def test_chat_returns_the_templates_ids_and_each_choices(chat):
    data = answer(chat.create_chat_completion, ChatCompletionRequest(messages=MESSAGES, n=2, **FIELDS))
    assert len(data["prompt_token_ids"]) == data["usage"]["prompt_tokens"]
    assert [len(c["token_ids"]) for c in data["choices"]] == [5, 5]
    body = ChatCompletionRequest(messages=MESSAGES, stream=True, **{**FIELDS, "allowed_token_ids": [EOS]})
    chunks = answer(chat.create_chat_completion, body, stream=True)
    full = answer(chat.create_chat_completion, body.model_copy(update={"stream": False}))
    assert joined_ids(chunks) == {0: full["choices"][0]["token_ids"]} == {0: [EOS] * 5}  # (ids without text)
    assert chunks[0]["prompt_token_ids"] == data["prompt_token_ids"]  # vLLM's place: the first chunk, beside choices
    assert all("prompt_token_ids" not in c for c in chunks[1:-1])
    assert settled(chat.state)


@pytest.mark.parametrize("route", ["/v1/completions", "/v1/chat/completions"])
def test_logits_processors_are_refused_not_ignored(completion, route):
    cls, body = ((CompletionRequest, '"prompt": "w1"') if route == "/v1/completions"
                 else (ChatCompletionRequest, '"messages": [{"role": "user", "content": "w1"}]'))
    with pytest.raises(APIError) as err:
        run(completion.accept(cls, f'{{{body}, "logits_processors": ["my.Proc"]}}'.encode(), "application/json",
                              route=route))
    assert err.value.status == 400 and err.value.param == "logits_processors" and err.value.code == "unsupported"
    run(completion.accept(cls, f'{{{body}, "logits_processors": []}}'.encode(), "application/json", route=route))
