"""A generation body → SamplingParams: the checks that need the server (vocabulary, capacity), each a 400 naming its
field, and the per-choice parameters (no engine needed)."""

import pytest

from accelkit.serve.sampling import SEED_MAX, SEED_MIN
from accelkit.serve.server.errors import APIError
from accelkit.serve.server.params import check_choices, derived_seed, leading_field, sampling_params
from accelkit.serve.server.protocol import ChatCompletionRequest, CompletionRequest

VOCAB = 100


def completion(**fields):
    return CompletionRequest(**{"prompt": "w1", **fields})


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"n": 0}, "n", "n=0 must be at least 1"),
    ({"n": 3, "best_of": 2}, "best_of", "best_of=2 must be at least n=3"),
    ({"best_of": 3, "stream": True}, "best_of", "cannot be streamed"),
    ({"logprobs": 21}, "logprobs", "logprobs=21 is out of range; expected 0 to 20"),
    ({"prompt_logprobs": -1}, "prompt_logprobs", "prompt_logprobs=-1 is out of range"),
    ({"logit_bias": {"+5": 1}}, "logit_bias", "is not a token id"),
    ({"logit_bias": {str(VOCAB): 1}}, "logit_bias", "is not a token id"),
    ({"allowed_token_ids": []}, "allowed_token_ids", "allowed_token_ids is empty"),
    ({"allowed_token_ids": [1, VOCAB]}, "allowed_token_ids", f"allowed_token_ids[1]={VOCAB} is not a token id"),
    ({"truncate_prompt_tokens": 0}, "truncate_prompt_tokens", "expected k >= 1"),
    ({"n": 5}, "n", "asks for 5 completions"),
    ({"n": 1, "best_of": 5}, "best_of", "best_of=5"),
])
def test_each_refusal_names_its_field(fields, param, words):
    with pytest.raises(APIError) as err:
        check_choices(completion(**fields), 1, vocab_size=VOCAB, capacity=4)
    assert err.value.status == 400 and err.value.param == param and words in err.value.message


def test_too_many_prompts_name_the_prompt():
    with pytest.raises(APIError) as err:
        check_choices(completion(), 5, vocab_size=VOCAB, capacity=4)
    assert err.value.param == "prompt" and "prompt holds 5 prompts" in err.value.message
    check_choices(completion(n=2), 2, vocab_size=VOCAB, capacity=4)  # 4 engine requests fit


def test_chat_names_top_logprobs():
    with pytest.raises(APIError) as err:
        check_choices(ChatCompletionRequest(messages=[{"role": "user", "content": "x"}], top_logprobs=1),
                      1, vocab_size=VOCAB, capacity=4)
    assert err.value.param == "top_logprobs"


def test_each_choice_gets_its_own_seed_fixed_by_the_request():
    params = [sampling_params(completion(seed=SEED_MAX, temperature=0.5), max_tokens=3, choice=j, logprobs=None,
                              prompt_logprobs=None, structured=None) for j in range(3)]
    assert [p.seed for p in params] == [SEED_MAX, SEED_MIN, SEED_MIN + 1]  # wrapped into the generator's range
    assert derived_seed(None, 2) is None and derived_seed(7, 0) == 7
    assert params[0].max_tokens == 3 and params[0].temperature == 0.5


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({"top_k": -2}, "top_k", "0 or -1 means no limit"),
    ({"temperature": 10**400}, "temperature", "is too large"),  # (the guard behind the body's own validation)
    ({"presence_penalty": 3.0}, "presence_penalty", "presence_penalty"),
])
def test_parameters_the_engine_refuses_are_400s_naming_the_field(fields, param, words):
    with pytest.raises(APIError) as err:
        sampling_params(completion().model_copy(update=fields), max_tokens=3, choice=0, logprobs=None, prompt_logprobs=None,
                        structured=None)
    assert err.value.status == 400 and err.value.param == param and words in err.value.message


def test_the_leading_field_of_an_engine_message():
    assert leading_field(ValueError("top_k=0 is not valid")) == "top_k"
    assert leading_field(ValueError("logit_bias[5]=300 is out of range")) == "logit_bias"
    assert leading_field(ValueError("prompt is empty; give one token")) == "prompt"
