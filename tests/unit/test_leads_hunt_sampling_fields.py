"""vLLM's SamplingParams fields detokenize and spaces_between_special_tokens were a bare TypeError ("__init__() got
an unexpected keyword argument"), as was any misspelt field (found in a hunt). Now spaces_between_special_tokens is
accepted (no effect with a fast tokenizer, as in transformers and vLLM's fast detokenizer), detokenize=False is one
line saying it is not supported (a 200 with text would ignore it), and an unknown keyword names itself and the
closest field."""

from __future__ import annotations

import pytest

from accelkit.serve.detokenizer import TokenDecoder
from accelkit.serve.sampling import SamplingParams, StructuredOutputs
from accelkit.serve.testing import build_bytelevel_tokenizer


def test_spaces_between_special_tokens_is_accepted_and_a_fast_tokenizer_decodes_alike_either_way():
    assert SamplingParams(spaces_between_special_tokens=False).spaces_between_special_tokens is False
    assert SamplingParams().spaces_between_special_tokens is True  # vLLM's default
    tok = build_bytelevel_tokenizer()
    ids = [*tok.encode("ab cd"), tok.eos_token_id, *tok.encode(" ef")]
    text = tok.decode(ids, skip_special_tokens=False)
    assert TokenDecoder(tok).is_fast and TokenDecoder(tok).decode_special(ids) == text
    for spaces in (True, False):  # what "no effect" rests on: transformers' fast decode drops the keyword
        assert tok.decode(ids, skip_special_tokens=False, spaces_between_special_tokens=spaces) == text


def test_detokenize_false_is_one_line_naming_it_and_true_is_the_default():
    assert SamplingParams(detokenize=True).detokenize and SamplingParams().detokenize
    with pytest.raises(ValueError, match=r"^detokenize=False is not supported: .*leave detokenize out$"):
        SamplingParams(detokenize=False)


@pytest.mark.parametrize(("cls", "key", "near"), [(SamplingParams, "temprature", "temperature"),
                                                   (SamplingParams, "max_new_tokens", "max_tokens"),
                                                   (StructuredOutputs, "jsn", "json")])
def test_an_unknown_keyword_names_itself_and_the_closest_field(cls, key, near):
    with pytest.raises(TypeError, match=rf"^{cls.__name__} has no field '{key}'; did you mean '{near}'\?$"):
        cls(**{key: 1})


def test_an_unknown_keyword_with_nothing_close_lists_the_fields_and_the_rest_still_works():
    with pytest.raises(TypeError, match=r"^SamplingParams has no field 'zzz'; its fields are n, temperature, .*cache_salt$"):
        SamplingParams(zzz=1)
    params = SamplingParams(temperature=0.5, stop="x")
    assert params.replace(top_p=0.5).top_p == 0.5 and SamplingParams.from_dict({"n": 2}).n == 2
    assert params.stop == ("x",)
