"""Penalties, logit_bias, min_tokens, min_p and logprobs through the real engine and the tiny Llama, serial and
with overlapped postprocessing; logprobs checked against transformers in fp32."""

import pytest
import torch

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import hf_model, random_prompts, save_model_dir

KV_BYTES = 8 * 2**20
SEED = 5
PROMPTS = random_prompts(4, min_len=4, max_len=30, seed=11)


@pytest.fixture(scope="module")
def hf():
    return hf_model("tiny-llama", seed=SEED).float().eval()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, hf):
    return save_model_dir(hf, tmp_path_factory.mktemp("features") / "m")


@pytest.fixture(scope="module", params=[False, True], ids=["serial", "overlapped-postprocess"])
def llm(model_dir, request):
    return LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_model_len=128, overlap_postprocess=request.param)


@pytest.fixture(scope="module")
def greedy_ref(llm):
    return [o.token_ids for o in llm.generate(PROMPTS, SamplingParams.greedy(24, ignore_eos=True))]


def test_a_large_presence_penalty_never_repeats_a_token(llm, greedy_ref):
    assert any(len(set(ref)) < len(ref) for ref in greedy_ref)  # greedy alone repeats itself
    outs = llm.generate(PROMPTS, SamplingParams.greedy(24, ignore_eos=True, presence_penalty=2.0,
                                                       repetition_penalty=100.0))
    for out in outs:
        assert len(set(out.token_ids)) == len(out.token_ids) == 24


def test_logit_bias_minus_100_removes_the_greedy_token(llm, greedy_ref):
    banned = greedy_ref[0][0]
    out = llm.generate(PROMPTS[0], SamplingParams.greedy(24, ignore_eos=True, logit_bias={banned: -100.0}))[0]
    assert banned not in out.token_ids and out.token_ids[0] != banned
    forced = llm.generate(PROMPTS[0], SamplingParams.greedy(5, ignore_eos=True, logit_bias={17: 100.0}))[0]
    assert forced.token_ids == [17] * 5
    with pytest.raises(ValueError, match="logit_bias"):
        llm.generate(PROMPTS[0], SamplingParams.greedy(5, logit_bias={10**6: 1.0}))


def test_min_tokens_outlasts_a_stop_token_greedy_hits_early(llm, greedy_ref):
    ref = greedy_ref[1]
    stop = ref[1]
    early = llm.generate(PROMPTS[1], SamplingParams.greedy(24, ignore_eos=True, stop_token_ids=(stop,)))[0]
    assert early.finish_reason == "stop" and len(early.token_ids) == ref.index(stop) + 1 <= 2
    out = llm.generate(PROMPTS[1], SamplingParams.greedy(24, ignore_eos=True, stop_token_ids=(stop,),
                                                         min_tokens=8))[0]
    assert len(out.token_ids) >= 8 and stop not in out.token_ids[:8]
    assert out.finish_reason == "length" or out.token_ids[-1] == stop
    # stop strings do not end it within min_tokens either (vLLM's)
    word = llm.tokenizer.decode([ref[0]])
    cut = llm.generate(PROMPTS[1], SamplingParams.greedy(24, ignore_eos=True, stop=(word,)))[0]
    assert cut.finish_reason == "stop" and len(cut.token_ids) == 1
    kept = llm.generate(PROMPTS[1], SamplingParams.greedy(24, ignore_eos=True, stop=(word,), min_tokens=6))[0]
    assert len(kept.token_ids) > 6


def test_min_p_one_is_greedy(llm, greedy_ref):
    outs = llm.generate(PROMPTS, SamplingParams(temperature=1.0, min_p=1.0, max_tokens=24, ignore_eos=True, seed=1))
    assert [o.token_ids for o in outs] == greedy_ref


def test_logprobs_are_the_models_log_softmax(llm, hf, greedy_ref):
    """Greedy requests with logprobs=3: each token's logprob and the top 3 equal log_softmax of transformers'
    fp32 logits over prompt + the generated tokens; greedy's tokens are unchanged; streaming gives the same."""
    outs = llm.generate(PROMPTS, SamplingParams.greedy(24, ignore_eos=True, logprobs=3))
    for prompt, out, ref in zip(PROMPTS, outs, greedy_ref, strict=True):
        assert out.token_ids == ref
        with torch.inference_mode():
            logits = hf(torch.tensor([prompt + out.token_ids])).logits[0].float()
        reference = torch.log_softmax(logits, dim=-1)[len(prompt) - 1 : -1]  # the rows that predicted each token
        assert out.logprobs is not None and len(out.logprobs) == len(out.token_ids)
        for i, (token, (chosen, top)) in enumerate(zip(out.token_ids, out.logprobs, strict=True)):
            assert chosen == pytest.approx(float(reference[i, token]), abs=2e-4)
            values, ids = reference[i].topk(3)
            assert [t for t, _ in top] == ids.tolist()
            assert [lp for _, lp in top] == pytest.approx(values.tolist(), abs=2e-4)
            assert top[0] == (token, pytest.approx(chosen))
    plain = llm.generate(PROMPTS[0], SamplingParams.greedy(4))[0]
    assert plain.logprobs is None


def test_streamed_outputs_carry_their_new_tokens_logprobs(llm):
    engine = llm.engine
    engine.add_request(PROMPTS[2], SamplingParams.greedy(10, ignore_eos=True, logprobs=0), request_id="lp")
    engine.add_request(PROMPTS[3], SamplingParams.greedy(10, ignore_eos=True), request_id="plain")
    streamed, final = [], None
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.request_id != "lp":
                assert out.new_logprobs is None
                continue
            assert out.new_logprobs is not None and len(out.new_logprobs) == len(out.new_token_ids)
            streamed += out.new_logprobs
            final = out
    assert final is not None and final.finished
    assert streamed == final.logprobs and len(streamed) == 10
    assert all(top == [] for _, top in streamed)
