"""Prompt logprobs (``SamplingParams.prompt_logprobs``) equal log_softmax of transformers' fp32 logits over the
prompt, however the prompt is computed: in one step, in chunks (one-token chunks among decodes too), recomputed
after preemption, through the padded decode-graph path, and when the prefix cache holds the prompt already."""

import pytest
import torch

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import hf_model, random_prompts, save_model_dir

KV_BYTES = 8 * 2**20
PROMPTS = [*random_prompts(5, min_len=2, max_len=70, seed=23), [7]]  # a one-token prompt has only the None entry
TOP = 3


@pytest.fixture(scope="module")
def hf():
    return hf_model("tiny-llama", seed=4).float().eval()


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, hf):
    return save_model_dir(hf, tmp_path_factory.mktemp("plp") / "m")


@pytest.fixture(scope="module")
def reference(hf):
    refs = []
    with torch.inference_mode():
        for prompt in PROMPTS:
            refs.append(torch.log_softmax(hf(torch.tensor([prompt])).logits[0].float(), dim=-1))
    return refs


def check(prompt, got, ref, k, ranks):
    assert got is not None and len(got) == len(prompt)
    assert ranks is not None and len(ranks) == len(prompt)
    assert got[0] is None and ranks[0] is None
    for i in range(1, len(prompt)):
        entry = got[i]
        assert entry is not None, i
        chosen, top = entry
        row = ref[i - 1]  # position i-1 predicts token i
        assert chosen == pytest.approx(float(row[prompt[i]]), abs=2e-4), i
        values, ids = row.topk(k) if k else (row[:0], row[:0].long())
        assert [t for t, _ in top] == ids.tolist(), i
        assert [lp for _, lp in top] == pytest.approx(values.tolist(), abs=2e-4)
        # its place in the vocabulary sorted by logprob: 1 + the tokens more likely, give or take those within the
        # tolerance of it (the engine's logprobs differ from transformers' in the last bits)
        lp = float(row[prompt[i]])
        assert 1 + int((row > lp + 2e-4).sum()) <= ranks[i] <= 1 + int((row > lp - 2e-4).sum()), i


CONFIGS = {
    "one-step": {},
    # 9-token budget with decodes running: chunks of every size, one-token chunks beside decodes included
    "chunked": {"max_num_batched_tokens": 9, "max_num_seqs": 4},
    # 14 blocks of 16 tokens for 6 prompts up to 70 tokens + 12 each: preemption, prompts recomputed
    "preemption": {"kv_cache_memory_bytes": 15 * 16 * 512, "max_model_len": 96, "max_num_batched_tokens": 32},
}


@pytest.mark.parametrize("name", list(CONFIGS))
def test_prompt_logprobs_are_the_models_log_softmax(model_dir, reference, name):
    llm = LLM(str(model_dir), **{"kv_cache_memory_bytes": KV_BYTES, **CONFIGS[name]})
    plain = llm.generate(PROMPTS, SamplingParams.greedy(12, ignore_eos=True))
    # every other request asks: a batch mixes rows that want them with rows that do not
    params = [SamplingParams.greedy(12, ignore_eos=True, prompt_logprobs=TOP if i % 2 == 0 else None)
              for i in range(len(PROMPTS))]
    outs = llm.generate(PROMPTS, params)
    for i, (prompt, out, ref) in enumerate(zip(PROMPTS, outs, reference, strict=True)):
        assert out.token_ids == plain[i].token_ids  # what a request samples is unchanged
        if i % 2:
            assert out.prompt_logprobs is None and out.prompt_logprob_ranks is None
        else:
            check(prompt, out.prompt_logprobs, ref, TOP, out.prompt_logprob_ranks)
    if name == "preemption":
        assert llm.engine.get_stats().num_preemptions > 0


def test_a_cached_prompt_is_scored_again(model_dir, reference):
    """The prefix cache holds the prompt after a first request; one asking for prompt logprobs computes it anyway
    (a cached token has no logits), and one that does not still hits the cache."""
    llm = LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES)
    prompt = PROMPTS[0]
    llm.generate(prompt, SamplingParams.greedy(2))
    out = llm.generate(prompt, SamplingParams.greedy(2, prompt_logprobs=0))[0]
    assert out.metrics.num_cached_tokens == 0
    check(prompt, out.prompt_logprobs, reference[0], 0, out.prompt_logprob_ranks)
    again = llm.generate(prompt, SamplingParams.greedy(2))[0]
    assert again.metrics.num_cached_tokens > 0


def test_padded_decode_graph_path(model_dir, reference, monkeypatch):
    """Decode-only steps through the graph buckets (run eagerly on a CPU): a one-token prompt chunk among them
    takes its logits from the padded rows' logits."""
    llm = LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_num_batched_tokens=3, max_num_seqs=3)
    runner = llm.engine.runner
    runner.enable_decode_graphs(capture=False)
    paths = []
    score = runner._prompt_logprobs

    def recorded(rows, prompt, *, computed):
        paths.append(computed)
        return score(rows, prompt, computed=computed)

    monkeypatch.setattr(runner, "_prompt_logprobs", recorded)
    outs = llm.generate(PROMPTS[:3], SamplingParams.greedy(40, ignore_eos=True, prompt_logprobs=1))
    assert set(paths) == {True, False}  # graph steps (computed logits) and eager steps both scored prompt tokens
    for prompt, out, ref in zip(PROMPTS[:3], outs, reference[:3], strict=True):
        check(prompt, out.prompt_logprobs, ref, 1, out.prompt_logprob_ranks)


def test_streamed_outputs_carry_them_from_the_first(model_dir, reference):
    llm = LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES, max_num_batched_tokens=16)
    engine = llm.engine
    engine.add_request(PROMPTS[1], SamplingParams.greedy(4, ignore_eos=True, prompt_logprobs=2), request_id="p")
    seen = []
    while engine.has_unfinished_requests():
        seen += [(out.prompt_logprobs, out.prompt_logprob_ranks) for out in engine.step()]
    assert seen and all(s == seen[0] for s in seen)
    logprobs, ranks = seen[0]
    check(PROMPTS[1], logprobs, reference[1], 2, ranks)


def test_out_of_range_is_refused():
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=21)
    with pytest.raises(ValueError, match="prompt_logprobs"):
        SamplingParams(prompt_logprobs=-1)


def test_requests_sharing_a_context_are_admitted_together(model_dir):
    """lm-eval's multiple choice: one context, several continuations, each scored. They never read the prefix
    cache, so none waits for another to compute a block of the shared context: all run in the first step (they
    were admitted one step apart, holding up everything queued behind them)."""
    llm = LLM(str(model_dir), kv_cache_memory_bytes=KV_BYTES)
    engine = llm.engine
    context = PROMPTS[1][:48]
    for i in range(4):
        engine.add_request([*context, 100 + i, 200 + i], SamplingParams.greedy(1, prompt_logprobs=1), request_id=str(i))
    first = engine.step()
    assert sorted(out.request_id for out in first if out.finished) == ["0", "1", "2", "3"]
    assert engine.get_stats().prefix_cache_queries == 0  # none looked the cache up
