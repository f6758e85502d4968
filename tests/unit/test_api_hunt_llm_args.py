"""LLM's offline API names a bad argument: an unknown keyword was a bare TypeError from EngineConfig, model=None read
as the directory 'None', a dict of sampling options was iterated as its keys and a str as its letters ("sampling_params
has 6 entries for 1 prompts")."""

import pytest

from accelkit.serve.llm import LLM
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.testing import save_tiny_model


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    return LLM(str(save_tiny_model(tmp_path_factory.mktemp("m"))))


@pytest.mark.parametrize(("sampling_params", "starts"), [
    ({"max_tokens": 3}, "sampling_params={'max_tokens': 3} is not valid; expected a SamplingParams"),
    ("greedy", "sampling_params='greedy' is not valid; expected a SamplingParams"),
    ([SamplingParams(max_tokens=2), {"max_tokens": 3}], "sampling_params[1]={'max_tokens': 3} is not valid"),
])
def test_generate_names_bad_sampling_params(llm, sampling_params, starts):
    with pytest.raises(ValueError) as caught:
        llm.generate(["a b", "c"], sampling_params)
    assert str(caught.value).startswith(starts)
    assert [len(o.outputs[0].token_ids) for o in llm.generate(["a b", "c"], SamplingParams(max_tokens=2))] == [2, 2]


def test_llm_names_an_unknown_option_and_a_missing_model(tmp_path):
    with pytest.raises(ValueError, match=r"^LLM\(\) has no option 'max_num_seq'; did you mean 'max_num_seqs'\?"):
        LLM(str(tmp_path), max_num_seq=4)
    with pytest.raises(ValueError, match=r"^model=None is not valid; give the path"):
        LLM(None)  # type: ignore[arg-type]
