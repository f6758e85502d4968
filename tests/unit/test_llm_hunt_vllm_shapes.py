"""A script written for vLLM's LLM reads what it reads there: ``outputs[0].logprobs`` as per token ``{id: Logprob}``
(it was ``(logprob, [(id, logprob)])``, so ``lp[token].logprob`` failed or read the wrong element), and
``SamplingParams.clone()``; vLLM's fields and values the engine does not take (``guided_decoding``, ``output_kind``,
``logprobs=-1``, ``lora_request``) are one line naming the difference and the fix."""

import pytest

from accelkit.serve.llm import LLM
from accelkit.serve.outputs import Logprob, vllm_logprobs
from accelkit.serve.sampling import SamplingParams, StructuredOutputs, StructuredOutputsParams
from accelkit.serve.testing import save_tiny_model

MODEL_DIR: list[str] = []  # (the module's model, for transformers to load too)


@pytest.fixture(scope="module")
def llm(tmp_path_factory):
    MODEL_DIR[:] = [str(save_tiny_model(tmp_path_factory.mktemp("m")))]
    return LLM(MODEL_DIR[0])


def test_completion_logprobs_are_vllms_dicts_of_logprob(llm):
    out = llm.generate("w5 w6", SamplingParams(max_tokens=4, logprobs=2, seed=0))[0]
    completion = out.outputs[0]
    assert len(completion.logprobs) == len(completion.token_ids) == 4
    for token, entry, (chosen, top) in zip(completion.token_ids, completion.logprobs, out.logprobs, strict=True):
        assert next(iter(entry)) == token and entry[token].logprob == chosen  # the token itself first
        assert entry[token].decoded_token == llm.get_tokenizer().decode([token])
        assert [(t, entry[t].logprob, entry[t].rank) for t, _ in top] == [(t, lp, i + 1) for i, (t, lp) in enumerate(top)]
        assert entry[token].rank == 1 + sum(lp > chosen for _, lp in top) or chosen < top[-1][1]
    assert completion.cumulative_logprob == pytest.approx(sum(e[t].logprob for t, e in
                                                              zip(completion.token_ids, completion.logprobs, strict=True)))


def test_the_sampled_tokens_rank_counts_only_strictly_likelier_tokens():
    shaped = vllm_logprobs([7, 8, 9], [(-1.0, [(3, -0.5), (7, -1.0)]), (-1.0, [(3, -1.0), (8, -1.0)]),
                                       (-9.0, [(3, -0.5)])], lambda t: f"t{t}")
    assert shaped[0] == {7: Logprob(-1.0, 2, "t7"), 3: Logprob(-0.5, 1, "t3")}
    assert shaped[1] == {8: Logprob(-1.0, 1, "t8"), 3: Logprob(-1.0, 1, "t3")}  # a tie shares the better rank
    assert shaped[2][9].rank is None  # less likely than every listed token, and no rank from the engine
    assert vllm_logprobs([9], [(-9.0, [(3, -0.5)])], None, ranks=[40])[0][9] == Logprob(-9.0, 40, None)


def test_a_sampled_tokens_rank_is_its_place_in_the_whole_vocabulary(llm):
    """vLLM ranks the sampled token in the whole vocabulary, listed among the k or not (logprobs=0 lists none); the
    engine counts the tokens more likely than it, checked here against transformers' logits of the same model."""
    import torch
    from transformers import AutoModelForCausalLM

    out = llm.generate("w5 w6", SamplingParams(max_tokens=6, logprobs=0, temperature=2.0, seed=3))[0]
    completion = out.outputs[0]
    ranks = [entry[t].rank for t, entry in zip(completion.token_ids, completion.logprobs, strict=True)]
    model = AutoModelForCausalLM.from_pretrained(MODEL_DIR[0]).eval()
    ids = torch.tensor([out.prompt_token_ids + completion.token_ids])
    with torch.no_grad():
        lps = model(ids).logits[0].float().log_softmax(-1)
    start = len(out.prompt_token_ids) - 1
    for i, (token, rank) in enumerate(zip(completion.token_ids, ranks, strict=True)):
        row, mine = lps[start + i], completion.logprobs[i][token].logprob
        assert 1 + int((row > mine + 1e-4).sum()) <= rank <= 1 + int((row > mine - 1e-4).sum())
    assert max(ranks) > 1  # (at temperature 2 some token is not the argmax: the check is not of rank 1 alone)


def test_clone_and_vllms_structured_outputs_name():
    params = SamplingParams(max_tokens=3, stop=["x"], logit_bias={5: 1.0})
    assert params.clone() == params and params.clone() is not params
    assert StructuredOutputsParams is StructuredOutputs


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"guided_decoding": None}, "guided_decoding is vLLM's older name for structured_outputs"),
    ({"output_kind": 2}, "final output (vLLM's FINAL_ONLY); leave output_kind out"),
    ({"logprobs": -1}, "logprobs=-1 (vLLM's whole vocabulary) is not supported; give k in 0..20"),
    ({"prompt_logprobs": -1}, "prompt_logprobs=-1 (vLLM's whole vocabulary) is not supported"),
    ({"truncate_prompt_tokens": -1}, "truncate_prompt_tokens=-1 (vLLM's: cut to the model's context length)"),
])
def test_vllms_fields_the_engine_lacks_name_the_fix(kwargs, words):
    with pytest.raises((TypeError, ValueError), match=r"^[^\n]*$") as info:
        SamplingParams(**kwargs)
    assert words in str(info.value)


def test_lora_request_none_is_taken_and_an_adapter_refused(llm):
    assert llm.generate("w5", SamplingParams(max_tokens=1), lora_request=None)[0].finished
    with pytest.raises(ValueError, match="^lora_request='adapter': LoRA adapters are not supported"):
        llm.chat([{"role": "user", "content": "w5"}], SamplingParams(max_tokens=1), lora_request="adapter")
    with pytest.raises(ValueError, match="2 prompts; give one SamplingParams for all of them, or a list of one per"):
        llm.generate(["w5", "w6"], [SamplingParams()])
