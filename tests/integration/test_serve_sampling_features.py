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


# ---- vLLM's allowed_token_ids, include_stop_str_in_output, truncate_prompt_tokens ------------------------------
def _allowed_outside(tokens: list[int], count: int) -> tuple[int, ...]:
    """``count`` word ids that greedy decoding did not pick: a restriction to them changes every token."""
    return tuple(t for t in range(40, 120) if t not in tokens)[:count]


def test_allowed_token_ids_are_the_only_tokens_a_request_samples(llm, greedy_ref):
    allowed = _allowed_outside([t for ref in greedy_ref for t in ref], 3)
    params = [SamplingParams.greedy(24, ignore_eos=True, allowed_token_ids=allowed),
              SamplingParams(max_tokens=24, ignore_eos=True, seed=4, allowed_token_ids=allowed, logprobs=2),
              SamplingParams.greedy(24, ignore_eos=True),  # a neighbour without it: untouched
              SamplingParams.greedy(24, ignore_eos=True, allowed_token_ids=allowed[:1])]
    outs = llm.generate(PROMPTS, params)
    assert set(outs[0].token_ids) <= set(allowed) and set(outs[1].token_ids) <= set(allowed)
    assert outs[2].token_ids == greedy_ref[2]
    assert outs[3].token_ids == [allowed[0]] * 24
    with pytest.raises(ValueError, match="allowed_token_ids"):
        llm.generate(PROMPTS[0], SamplingParams.greedy(5, allowed_token_ids=(5, 10**6)))
    # only EOS (id 2) allowed, which min_tokens masks: nothing could be sampled (the argmax of all -inf is token 0)
    with pytest.raises(ValueError, match=r"allowed_token_ids=\[2\] holds only tokens that end generation"):
        llm.generate(PROMPTS[0], SamplingParams.greedy(5, min_tokens=2, allowed_token_ids=(2,)))
    eos_only = llm.generate(PROMPTS[0], SamplingParams.greedy(5, min_tokens=2, allowed_token_ids=(2,), ignore_eos=True))
    assert eos_only[0].token_ids == [2] * 5  # with ignore_eos it is a token like any other


def test_allowed_token_ids_on_the_padded_decode_graph_path(model_dir, llm, greedy_ref):
    """Decode steps through the graph buckets (run eagerly on a CPU): the same tokens as the eager path."""
    allowed = _allowed_outside([t for ref in greedy_ref for t in ref], 4)
    params = [SamplingParams.greedy(16, ignore_eos=True, allowed_token_ids=allowed[: 2 + i % 3]) for i in range(3)]
    graphed = LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_model_len=128, max_num_seqs=4)
    graphs = graphed.engine.runner.enable_decode_graphs(capture=False)
    used = []
    run = graphs.run
    graphs.run = lambda size, meta: used.append(size) or run(size, meta)
    outs = graphed.generate(PROMPTS[:3], params)
    assert 4 in used  # 3 decoding sequences padded to the bucket of 4
    assert [o.token_ids for o in outs] == [o.token_ids for o in llm.generate(PROMPTS[:3], params)]
    for out, p in zip(outs, params, strict=True):
        assert set(out.token_ids) <= set(p.allowed_token_ids)


def test_include_stop_str_in_output_keeps_the_stop_string_streamed_too(llm, greedy_ref):
    ref = greedy_ref[1]
    full = llm.generate(PROMPTS[1], SamplingParams.greedy(24, ignore_eos=True))[0].text
    for stop in (llm.tokenizer.decode([ref[4]]), llm.tokenizer.decode(ref[5:7])):  # one token's text, two tokens'
        end = full.find(stop) + len(stop)
        params = SamplingParams.greedy(24, ignore_eos=True, stop=(stop, "w9999"), include_stop_str_in_output=True)
        out = llm.generate(PROMPTS[1], params)[0]
        assert out.finish_reason == "stop" and out.text == full[:end] and out.text.endswith(stop)
        assert llm.generate(PROMPTS[1], params.replace(include_stop_str_in_output=False))[0].text == \
            full[: end - len(stop)]
        llm.engine.add_request(PROMPTS[1], params, request_id="inc")
        streamed = []
        while llm.engine.has_unfinished_requests():
            streamed += llm.engine.step()
        text = ""
        for o in streamed:
            text += o.new_text
            assert o.text == text
        assert text == out.text and streamed[-1].finish_reason == "stop"


def test_truncate_prompt_tokens_runs_the_last_k_tokens(llm, greedy_ref):
    prompt = PROMPTS[3]
    for k in (1, 3, len(prompt), len(prompt) + 5):  # a prompt of at most k tokens runs whole
        out = llm.generate(prompt, SamplingParams.greedy(24, ignore_eos=True, truncate_prompt_tokens=k))[0]
        alone = llm.generate(prompt[-k:], SamplingParams.greedy(24, ignore_eos=True))[0]
        assert out.prompt_token_ids == prompt[-k:] and out.token_ids == alone.token_ids
    assert alone.token_ids == greedy_ref[3]
    text = llm.tokenizer.decode(prompt[-3:])
    out = llm.generate("w7 w8 " + text, SamplingParams.greedy(4, truncate_prompt_tokens=3))[0]
    assert out.prompt_token_ids == prompt[-3:] and out.prompt == "w7 w8 " + text  # the text as given
    long = list(range(4, 4 + 300))  # far past max_model_len=128: truncated, it fits
    out = llm.generate(long, SamplingParams.greedy(4, truncate_prompt_tokens=100))[0]
    assert out.prompt_token_ids == long[-100:] and len(out.token_ids) == 4
    with pytest.raises(ValueError, match="max_model_len"):
        llm.generate(long, SamplingParams.greedy(4))
