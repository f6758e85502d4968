"""The offline LLM's request semantics beside vLLM's: SamplingParams(n=2) was a bare TypeError (vLLM returns one
RequestOutput with n outputs); a chat message without content (or role) rendered as nothing and was answered; generate
after shutdown() still ran although the docstring says it cannot."""

import pytest

from accelkit.serve.llm import LLM
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.testing import save_tiny_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_model(tmp_path_factory.mktemp("m")))


@pytest.fixture(scope="module")
def llm(model_dir):
    return LLM(model_dir, max_model_len=24)


def test_n_choices_come_back_in_one_output_each_seeded_as_vllm(llm):
    outs = llm.generate(["w5 w6", "w7"], SamplingParams(n=3, max_tokens=4, seed=7))
    assert [[c.index for c in o.outputs] for o in outs] == [[0, 1, 2], [0, 1, 2]]
    assert [o.request_id for o in outs] == [outs[0].request_id, outs[1].request_id] and len({o.request_id for o in outs}) == 2
    choices = [c.token_ids for c in outs[0].outputs]
    assert all(len(t) == 4 for t in choices) and len({tuple(t) for t in choices}) == 3  # sampled apart
    # choice i samples with seed + i (vLLM's), so each is the single request with that seed
    alone = llm.generate(["w5 w6"] * 2, [SamplingParams(max_tokens=4, seed=s) for s in (7, 8)])
    assert [o.outputs[0].token_ids for o in alone] == choices[:2]


def test_n_is_checked_and_an_engine_request_refuses_it(llm):
    for bad in (0, 257):
        with pytest.raises(ValueError, match=rf"^n={bad} is out of range"):
            SamplingParams(n=bad)
    with pytest.raises(ValueError, match=r"^n=2: an engine request makes one output; LLM.generate"):
        llm.engine.make_request("w5", SamplingParams(n=2))


@pytest.mark.parametrize(("message", "says"), [
    ({"role": "user"}, "messages[1]={'role': 'user'} has no content; give 'content'"),
    ({"role": "user", "content": None}, "messages[1]={'role': 'user', 'content': None} has no content"),
    ({"content": "w5"}, "messages[1]={'content': 'w5'} has no role; give 'role'"),
])
def test_chat_refuses_a_message_without_content_or_role(llm, message, says):
    with pytest.raises(ValueError) as caught:
        llm.chat([{"role": "system", "content": "w4"}, message], SamplingParams(max_tokens=1))
    assert str(caught.value).startswith(says)


def test_chat_takes_an_assistant_tool_call_without_content(llm):
    call = {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {"name": "f"}}]}
    out = llm.chat([{"role": "user", "content": "w5"}, call], SamplingParams(max_tokens=1))
    assert len(out[0].outputs[0].token_ids) == 1


def test_generate_after_shutdown_is_refused(model_dir):
    with LLM(model_dir, max_model_len=24) as llm:
        assert len(llm.generate("w5", SamplingParams(max_tokens=1))[0].outputs[0].token_ids) == 1
    for call in (lambda: llm.generate("w5"), lambda: llm.chat([{"role": "user", "content": "w5"}])):
        with pytest.raises(RuntimeError, match=r"^this LLM was shut down .*make a new LLM"):
            call()
    llm.shutdown()  # (safe to repeat)


def test_max_tokens_none_generates_up_to_the_context_limit(llm):
    """vLLM's max_tokens=None (until the context is full) was refused: "max_tokens=None is not valid"."""
    out = llm.generate([list(range(4, 20))], SamplingParams(max_tokens=None, min_tokens=2, ignore_eos=True))[0]
    assert (len(out.token_ids), out.finish_reason) == (8, "length")
    assert SamplingParams.from_dict(SamplingParams(max_tokens=None).to_dict()).max_tokens is None


def test_a_stop_token_id_past_the_vocabulary_is_refused_naming_it(llm):
    """It could never be sampled, so it would never stop anything (a stop list of another model's ids); logit_bias and
    allowed_token_ids were checked against the vocabulary, stop_token_ids not."""
    vocab = llm.engine.model_args.vocab_size
    with pytest.raises(ValueError, match=rf"stop_token_ids has the token id {vocab + 5}, which is not in the "
                                         rf"vocabulary; expected ids in \[0, {vocab}\)"):
        llm.generate("hello", SamplingParams(max_tokens=2, stop_token_ids=[1, vocab + 5]))
