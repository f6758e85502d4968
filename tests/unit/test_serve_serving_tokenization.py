"""ServingTokenization without HTTP: vLLM's /tokenize and /detokenize on a real tiny engine's tokenizer."""

import pytest

from accelkit.serve.server.errors import APIError
from accelkit.serve.server.protocol import DetokenizeRequest, TokenizeRequest
from accelkit.serve.server.serving_tokenization import ServingTokenization
from tests.unit.serving_util import models, run, serving_state


@pytest.fixture(scope="module")
def serving():
    state = serving_state()
    return ServingTokenization(state, models(state))


def test_a_prompt_and_its_tokens_round_trip(serving):
    data = run(serving.tokenize(TokenizeRequest(prompt="w10 w11 w12", return_token_strs=True)))
    assert data == {"count": 3, "max_model_len": 256, "tokens": [10, 11, 12], "token_strs": ["w10", "w11", "w12"]}
    assert run(serving.detokenize(DetokenizeRequest(tokens=data["tokens"]))) == {"prompt": "w10 w11 w12"}


def test_messages_are_counted_as_the_chat_template_renders_them(serving):
    data = run(serving.tokenize(TokenizeRequest(messages=[{"role": "user", "content": "w10"}])))
    assert data["tokens"] == serving.engine.encode("user w10 assistant", add_special_tokens=False)
    assert data["token_strs"] is None


@pytest.mark.parametrize(("fields", "param", "words"), [
    ({}, "prompt", "exactly one of prompt"),
    ({"prompt": "w1", "messages": [{"role": "user", "content": "w1"}]}, "prompt", "exactly one of prompt"),
    ({"prompt": "w1", "tools": [{"type": "function", "function": {"name": "f"}}]}, "tools", "send them with messages"),
    ({"prompt": "\ud800"}, "prompt", "not valid Unicode"),
])
def test_tokenize_refusals_name_the_field(serving, fields, param, words):
    with pytest.raises(APIError) as err:
        run(serving.tokenize(TokenizeRequest(**fields)))
    assert err.value.status == 400 and err.value.param == param and words in err.value.message


def test_an_id_past_the_vocabulary_is_a_400_naming_it(serving):
    vocab = serving.engine.model_args.vocab_size
    with pytest.raises(APIError) as err:
        run(serving.detokenize(DetokenizeRequest(tokens=[5, vocab])))
    assert err.value.param == "tokens" and f"tokens[1]={vocab} is not a token id" in err.value.message
