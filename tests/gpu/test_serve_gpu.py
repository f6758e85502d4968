"""The serving engine on CUDA: greedy outputs token-identical to transformers in fp32 with CUDA graphs on and
off (Triton backend, chunked prefill, prefix caching, a sliding window), a graph replay equal to the same
padded step run eagerly, the Triton kernels at real shapes in bf16 and fp8 against a float64 reference, and
fp8/int8 KV caches agreeing on top-1 with the full-precision cache. Skipped without a CUDA device;
``scripts/gpu_check.sh`` runs them on a GPU machine (well under a minute on an H200)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"),
]

MAX_TOKENS = 16
KV_BYTES = 16 * 2**20


@pytest.fixture(scope="module")
def prompts():
    from accelkit.serve.testing import random_prompts

    return random_prompts(8, min_len=1, max_len=90, seed=7)


def _hf_reference(model_dir, prompts, max_tokens=MAX_TOKENS):
    """transformers greedy generate, fp32, on the same GPU (TF32 stays off: torch's default)."""
    import transformers

    assert not torch.backends.cuda.matmul.allow_tf32
    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    out = []
    with torch.inference_mode():
        for p in prompts:
            ids = torch.tensor([p], device="cuda")
            gen = hf.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_tokens)
            out.append(gen[0, len(p) :].tolist())
    return out


@pytest.fixture(scope="module")
def llama(tmp_path_factory, prompts):
    from accelkit.serve.testing import save_tiny_model

    d = save_tiny_model(tmp_path_factory.mktemp("llama") / "m", "tiny-llama", seed=1)
    return d, _hf_reference(d, prompts)


def _generate(model_dir, prompts, **kwargs):
    from accelkit.serve import LLM, SamplingParams

    llm = LLM(str(model_dir), device="cuda", kv_cache_memory_bytes=KV_BYTES, max_num_seqs=8, **kwargs)
    return [o.token_ids for o in llm.generate(prompts, SamplingParams.greedy(MAX_TOKENS))], llm


@pytest.mark.parametrize(
    "config",
    [{}, {"enforce_eager": True}, {"max_num_batched_tokens": 24}, {"enforce_eager": True, "attention_backend": "sdpa"}],
    ids=["graphs", "eager", "graphs-chunked", "sdpa-eager"],
)
def test_fp32_greedy_equals_transformers_on_cuda(llama, prompts, config):
    model_dir, ref = llama
    got, llm = _generate(model_dir, prompts, **config)
    runner = llm.engine.runner
    assert (runner.graphs is not None) == (not config.get("enforce_eager", False))
    assert got == ref


@pytest.mark.parametrize("preset", ["tiny-qwen3", "tiny-qwen3-moe", "tiny-mixtral"])
def test_qwen3_and_moe_fp32_greedy_equal_transformers_on_cuda(tmp_path, prompts, preset):
    """Qwen3's q/k norms on the Triton path inside the decode graphs; the MoE models' reference expert loop, whose
    decode steps run eagerly (the runner captures no graphs for them)."""
    from accelkit.serve.testing import save_tiny_model

    d = save_tiny_model(tmp_path / "m", preset, seed=2)
    got, llm = _generate(d, prompts, max_num_batched_tokens=24)
    assert (llm.engine.runner.graphs is None) == (preset != "tiny-qwen3")
    assert got == _hf_reference(d, prompts)


@pytest.mark.parametrize("config", [{"max_num_batched_tokens": 3, "max_num_seqs": 3}, {"enforce_eager": True}],
                         ids=["graphs-one-token-chunks", "eager"])
def test_prompt_logprobs_equal_transformers_on_cuda(llama, prompts, config):
    """Prompt logprobs (echo + logprobs) in fp32 on CUDA: from the decode graphs' padded logits when a one-token
    prompt chunk rides a graph step (a 3-token budget with decodes running), and from eager steps."""
    import transformers

    from accelkit.serve import LLM, SamplingParams

    model_dir, _ = llama
    llm = LLM(str(model_dir), device="cuda", kv_cache_memory_bytes=KV_BYTES, **config)
    outs = llm.generate(prompts[:3], SamplingParams.greedy(40, ignore_eos=True, prompt_logprobs=2))
    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).cuda().eval()
    for prompt, out in zip(prompts[:3], outs, strict=True):
        with torch.inference_mode():
            ref = torch.log_softmax(hf(torch.tensor([prompt], device="cuda")).logits[0].float(), dim=-1).cpu()
        got, ranks = out.prompt_logprobs, out.prompt_logprob_ranks
        assert got is not None and len(got) == len(prompt) and got[0] is None
        assert ranks is not None and len(ranks) == len(prompt) and ranks[0] is None
        for i in range(1, len(prompt)):
            chosen, top = got[i]
            lp = float(ref[i - 1, prompt[i]])
            assert chosen == pytest.approx(lp, abs=1e-3)
            assert [t for t, _ in top] == ref[i - 1].topk(2).indices.tolist()
            # the rank counted on the device: 1 + the tokens more likely, give or take those within the tolerance
            assert 1 + int((ref[i - 1] > lp + 1e-3).sum()) <= ranks[i] <= 1 + int((ref[i - 1] > lp - 1e-3).sum())


@pytest.mark.parametrize("config", [{}, {"enforce_eager": True}], ids=["graphs", "eager"])
def test_structured_outputs_on_cuda(tmp_path_factory, config):
    """Guided rows beside plain ones on CUDA (the default overlapped postprocessing, decode graphs on and off): the
    masks reach the device, each output matches its constraint, and the plain rows sample as without them."""
    import json
    import re

    from accelkit.serve import LLM, SamplingParams, StructuredOutputs
    from accelkit.serve.testing import save_bytelevel_model

    model_dir = save_bytelevel_model(tmp_path_factory.mktemp("structured") / "m", seed=3)
    llm = LLM(str(model_dir), device="cuda", kv_cache_memory_bytes=KV_BYTES, max_num_seqs=8, **config)
    assert (llm.engine.runner.graphs is not None) == (not config)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "ok": {"type": "boolean"}},
              "required": ["n", "ok"]}
    specs = [StructuredOutputs(choice=["yes", "no"]), StructuredOutputs(regex="[0-9]{3}-[a-z]{2}"),
             StructuredOutputs(json=schema)]
    plain = SamplingParams.greedy(12, ignore_eos=True)
    alone = llm.generate("p:", plain)[0].token_ids
    params = [plain] + [SamplingParams(temperature=1.0, seed=s, max_tokens=200, structured_outputs=spec)
                        for s in range(3) for spec in specs]
    outs = llm.generate(["p:"] * len(params), params)
    assert outs[0].token_ids == alone
    for out, p in zip(outs[1:], params[1:], strict=True):
        spec = p.structured_outputs
        assert out.finish_reason == "stop", out
        if spec.choice is not None:
            assert out.text in spec.choice
        elif spec.regex is not None:
            assert re.fullmatch(spec.regex, out.text)
        else:
            doc = json.loads(out.text)
            assert list(doc) == ["n", "ok"] and type(doc["n"]) is int and type(doc["ok"]) is bool


def test_prefix_cache_hits_and_sliding_window_stay_exact_on_cuda(tmp_path, prompts):
    from accelkit.serve import LLM, SamplingParams
    from accelkit.serve.testing import save_tiny_model

    d = save_tiny_model(tmp_path / "mistral", "tiny-mistral", seed=3, sliding_window=8)
    shared = [list(range(10, 50)) + p[:12] for p in prompts[:4]]  # a 40-token common prefix
    llm = LLM(str(d), device="cuda", kv_cache_memory_bytes=KV_BYTES, max_num_seqs=8, max_num_batched_tokens=32)
    first = llm.generate(shared[:1], SamplingParams.greedy(MAX_TOKENS))  # fills the prefix cache
    rest = llm.generate(shared[1:], SamplingParams.greedy(MAX_TOKENS))
    assert [o.token_ids for o in first + rest] == _hf_reference(d, shared)
    assert llm.engine.get_stats().prefix_cache_hits >= 3 * 32


def test_graph_replay_equals_the_same_step_run_eagerly(llama, prompts):
    from accelkit.serve import LLM, SamplingParams

    model_dir, _ = llama
    llm = LLM(str(model_dir), device="cuda", kv_cache_memory_bytes=KV_BYTES, max_num_seqs=8)
    runner = llm.engine.runner
    assert runner.graphs is not None and runner.graphs.sizes == [1, 2, 4, 8]
    compared = []
    forward = runner.forward

    def checking(step):
        logits = forward(step)
        if step.graph_size is not None and logits is not None:
            replayed = logits.clone()
            eager = runner._graph_forward(step.graph_size, step.meta)[: len(replayed)]  # same buffers, no graph
            assert torch.equal(replayed.argmax(-1), eager.argmax(-1))
            torch.testing.assert_close(replayed, eager, atol=1e-4, rtol=1e-4)
            compared.append(step.graph_size)
        return logits

    runner.forward = checking
    llm.generate(prompts[:3], SamplingParams.greedy(6))
    assert compared and set(compared) == {4}


def _attention_reference(q, cache, tables, seq_lens, query_start):
    out = torch.zeros(q.shape, dtype=torch.float64)
    rep = q.shape[1] // cache.num_kv_heads
    for s, total in enumerate(seq_lens):
        a, b = query_start[s], query_start[s + 1]
        k, v = cache.gather(0, torch.tensor(tables[s][: -(-total // cache.block_size)], device="cuda"))
        k = k[:total].double().cpu().repeat_interleave(rep, 1)
        v = v[:total].double().cpu().repeat_interleave(rep, 1)
        scores = torch.einsum("thd,lhd->htl", q[a:b].double().cpu(), k) * q.shape[-1] ** -0.5
        causal = torch.arange(total)[None, :] <= torch.arange(total - (b - a), total)[:, None]
        out[a:b] = torch.einsum("htl,lhd->thd", scores.masked_fill(~causal, float("-inf")).softmax(-1), v)
    return out


@pytest.mark.parametrize("kind", ["auto", "fp8"])
def test_triton_attention_at_real_shapes_bf16(kind):
    """32/8 heads, head_dim 64, block 16: 16 decodes at ~1K context (split-K) + a 300-token chunk after 700."""
    from accelkit.serve.kernels.paged_attention import decode_num_splits, paged_attention
    from accelkit.serve.kv_cache import kv_cache_class

    heads, kv_heads, dim, page, num_blocks = 32, 8, 64, 16, 1200
    cache = kv_cache_class(kind)(num_layers=1, num_blocks=num_blocks, block_size=page, num_kv_heads=kv_heads,
                                 head_dim=dim, dtype=torch.bfloat16, device=torch.device("cuda"))
    gen = torch.Generator(device="cuda").manual_seed(0)
    fill = torch.randn(num_blocks * page, kv_heads, dim, generator=gen, device="cuda", dtype=torch.bfloat16)
    cache.write(0, torch.arange(num_blocks * page, device="cuda"), fill, fill.flip(0))
    q_lens = [1] * 16 + [300]
    seq_lens = [1000 + 3 * i for i in range(16)] + [1000]
    order = torch.randperm(num_blocks, generator=torch.Generator().manual_seed(1)).tolist()
    width = max(-(-n // page) for n in seq_lens)
    tables, used = [], 0
    for n in seq_lens:
        nb = -(-n // page)
        tables.append(order[used : used + nb] + [0] * (width - nb))
        used += nb
    query_start = [0]
    for n in q_lens:
        query_start.append(query_start[-1] + n)
    q = torch.randn(query_start[-1], heads, dim, generator=gen, device="cuda", dtype=torch.bfloat16)
    out = torch.full_like(q, float("nan"))
    args = dict(block_tables=torch.tensor(tables, device="cuda"), seq_lens=torch.tensor(seq_lens, device="cuda"),
                query_start=torch.tensor(query_start, device="cuda"), scale=dim**-0.5, kind=kind)
    k_scale, v_scale = cache.scales(0)
    splits = decode_num_splits(16, kv_heads, torch.cuda.get_device_properties(0).multi_processor_count)
    paged_attention(q, out, cache.k[0], cache.v[0], k_scale, v_scale, seq_offset=0, num_seqs=16, max_query_len=1,
                    num_splits=splits, **args)
    paged_attention(q, out, cache.k[0], cache.v[0], k_scale, v_scale, seq_offset=16, num_seqs=1, max_query_len=300,
                    **args)
    err = (out.double().cpu() - _attention_reference(q, cache, tables, seq_lens, query_start)).abs().max().item()
    assert err < 2e-2, f"max abs error {err:.3g}"


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    from accelkit.serve.testing import markov_corpus, train_tiny_model

    shape = {"hidden_size": 128, "num_attention_heads": 2, "num_key_value_heads": 1, "head_dim": 64, "intermediate_size": 256}
    model_dir = train_tiny_model(tmp_path_factory.mktemp("trained") / "m", "tiny-llama", steps=300, batch_size=8, **shape)
    return model_dir, [seq[:40] for seq in markov_corpus(16, 40, seed=99)]


@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_quantized_kv_top1_agreement_on_cuda(trained, kind):
    from accelkit.serve import LLM, SamplingParams
    from accelkit.serve.testing import forced_top1_agreement

    model_dir, prompts = trained
    full = LLM(str(model_dir), device="cuda", dtype="bfloat16", kv_cache_memory_bytes=KV_BYTES)
    ref = [o.token_ids for o in full.generate(prompts, SamplingParams.greedy(64, ignore_eos=True))]
    quant = LLM(str(model_dir), device="cuda", dtype="bfloat16", kv_cache_dtype=kind, kv_cache_memory_bytes=KV_BYTES,
                max_num_batched_tokens=64)
    agree, total = forced_top1_agreement(quant.engine, prompts, ref)
    assert total == 16 * 63
    assert agree / total >= 0.99, f"{kind}: top-1 agreement {agree}/{total}"
