"""The engine's CUDA path, checked on a CPU: the Triton backend (under Triton's interpreter) gives greedy
outputs token-identical to transformers in fp32 — decodes, chunked prefill (chunks read their context from
the cache), prefix-cache hits, GQA, block size 5, a Mistral sliding window, Llama's q/k/v/o and MLP biases,
fp8/int8 caches close to the reference — and the CUDA-graph path (decode steps padded to a batch-size
bucket at the fixed layout of the persistent buffers) run eagerly gives the same tokens as the plain path, its padding rows touching nothing
but the scratch block; the decode region obeys what a capture demands (no host sync, no host data) and gives
the same tokens when every step reuses the metadata fixed at capture, as a replay does. Plus the
configuration errors of the backend seam."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before the kernels are first imported (they read it then)

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.attention import resolve_attention_backend
from accelkit.serve.testing import hf_greedy, hf_model, random_prompts, save_model_dir, save_tiny_model
from tests.integration.graph_capture import CaptureRules

pytest.importorskip("triton")

# on a machine with CUDA the same tests run there (eagerly: the graphs themselves are tested in tests/gpu)
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"

MAX_TOKENS = 6
PROMPTS = random_prompts(3, min_len=3, max_len=30, seed=11)  # the interpreter is slow: few, short requests
SHARED = [list(range(10, 30)) + p[:5] for p in PROMPTS[:2]]  # a 20-token common prefix
KV_BYTES = 2 * 2**20
TRITON = {"attention_backend": "triton"}
COMMON = {"kv_cache_memory_bytes": KV_BYTES, "max_model_len": 128, "device": DEVICE, "enforce_eager": True}
interpreted = pytest.mark.slow  # each Triton-backend run takes 5-10 s under the interpreter


def reference(model_dir, prompts):
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    return [hf_greedy(hf, p, MAX_TOKENS) for p in prompts]


def generate(model_dir, prompts, **kwargs):
    llm = LLM(str(model_dir), **{**COMMON, **kwargs})
    return [o.token_ids for o in llm.generate(prompts, SamplingParams.greedy(MAX_TOKENS))], llm


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    d = save_tiny_model(tmp_path_factory.mktemp("llama") / "m", "tiny-llama", seed=1)
    return d, reference(d, PROMPTS), reference(d, SHARED)


@pytest.fixture(scope="module")
def triton_quantized(llama):
    """The Triton backend's greedy tokens with an fp8 or int8 KV cache, by kind: each run is seconds under the
    interpreter, and two tests compare against the same run (same model, prompts and engine settings)."""
    runs: dict[str, list] = {}

    def tokens(kind: str) -> list:
        if kind not in runs:
            runs[kind] = generate(llama[0], PROMPTS, kv_cache_dtype=kind, **TRITON)[0]
        return runs[kind]

    return tokens


# ---- the Triton backend -------------------------------------------------------------------------------
@interpreted
@pytest.mark.parametrize(
    "config", [{}, {"max_num_batched_tokens": 16}, {"block_size": 5, "max_num_seqs": 2}], ids=["default", "chunked", "block5"]
)
def test_triton_backend_greedy_equals_transformers(llama, config):
    model_dir, ref, _ = llama
    got, llm = generate(model_dir, PROMPTS, **TRITON, **config)
    assert llm.engine.runner.backend.name == "triton"
    assert got == ref


@interpreted
def test_triton_backend_prefix_cache_hits_stay_exact(llama):
    model_dir, _, ref = llama
    llm = LLM(str(model_dir), **COMMON, **TRITON)
    first = llm.generate(SHARED[:1], SamplingParams.greedy(MAX_TOKENS))
    second = llm.generate(SHARED[1:], SamplingParams.greedy(MAX_TOKENS))
    assert second[0].metrics.num_cached_tokens >= 16  # its first block came from the cache
    assert [o.token_ids for o in first + second] == ref


@interpreted
def test_triton_backend_mistral_sliding_window(tmp_path):
    d = save_tiny_model(tmp_path / "mistral", "tiny-mistral", seed=3, sliding_window=8)
    got, _ = generate(d, PROMPTS, max_num_batched_tokens=16, **TRITON)
    assert got == reference(d, PROMPTS)


@interpreted
def test_triton_backend_qwen3_moe_qk_norm_and_experts(tmp_path):
    # the fused path: q/k RMSNorm (Triton rms_norm over (tokens · heads, head_dim) rows) before the kernel that
    # applies RoPE and writes K/V; a dense layer (fused silu_mul) and a sparse one
    d = save_tiny_model(tmp_path / "m", "tiny-qwen3-moe", seed=6, mlp_only_layers=[0])
    got, llm = generate(d, PROMPTS, **TRITON, max_num_batched_tokens=16)
    assert llm.engine.runner.backend.name == "triton"
    assert got == reference(d, PROMPTS)


@interpreted
def test_triton_backend_and_padded_decode_path_with_llama_biases(tmp_path):
    """attention_bias (q/k/v/o) and mlp_bias: the fused RoPE + KV write, RMSNorm and SiLU·mul kernels see the
    biased projections, and the padded decode path gives the same tokens."""
    hf = hf_model("tiny-llama", seed=4, attention_bias=True, mlp_bias=True)
    torch.manual_seed(5)
    with torch.no_grad():  # transformers initialises biases to zero, which would hide a dropped one
        for name, param in hf.named_parameters():
            if name.endswith(".bias"):
                param.normal_(0.0, 0.5)
    model_dir = save_model_dir(hf, tmp_path / "m")
    ref = [hf_greedy(hf, p, MAX_TOKENS) for p in PROMPTS]
    llm = LLM(str(model_dir), **COMMON, **TRITON, max_num_seqs=4)
    llm.engine.runner.enable_decode_graphs(capture=False)
    assert [o.token_ids for o in llm.generate(PROMPTS, SamplingParams.greedy(MAX_TOKENS))] == ref


@interpreted
@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_triton_backend_quantized_cache_agrees_with_the_sdpa_reference(llama, triton_quantized, kind):
    """Same codes and scales on both paths; the kernels dequantize in place, SDPA after a gather."""
    model_dir, _, _ = llama
    sdpa, _ = generate(model_dir, PROMPTS, kv_cache_dtype=kind)
    triton = triton_quantized(kind)
    same = sum(a == b for a, b in zip(sdpa, triton, strict=True))
    assert same >= len(PROMPTS) - 1, (sdpa, triton)


@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_a_quantized_cache_gives_the_same_output_whatever_the_chunking(llama, kind):
    """On the SDPA path a prompt chunk with no cached context attended to its own K/V unquantized, every later read
    (a chunk with context, a prefix hit, a decode) to their quantized codes: the output changed with
    max_num_batched_tokens (found in review, 11 of 40 greedy outputs). Fresh chunks now read what the cache holds."""
    model_dir, _, _ = llama
    prompts = random_prompts(6, min_len=20, max_len=60, seed=5)
    params = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, logprobs=0)
    runs = {}
    for chunk in (256, 8):
        llm = LLM(str(model_dir), **COMMON, kv_cache_dtype=kind, attention_backend="sdpa", max_num_seqs=4,
                  max_num_batched_tokens=chunk, enable_prefix_caching=False)
        runs[chunk] = llm.generate(prompts, params)
    for whole, chunked in zip(runs[256], runs[8], strict=True):
        assert whole.token_ids == chunked.token_ids
        got = [lp for lp, _ in chunked.logprobs]
        want = [lp for lp, _ in whole.logprobs]
        assert max(abs(a - b) for a, b in zip(got, want, strict=True)) < 1e-4, (got, want)


# ---- the CUDA-graph path, run eagerly -------------------------------------------------------------------
@pytest.mark.parametrize("backend", ["sdpa", "triton"])
def test_padded_decode_path_gives_the_same_tokens(llama, backend):
    model_dir, ref, _ = llama
    llm = LLM(str(model_dir), **COMMON, attention_backend=backend, max_num_seqs=8)
    runner = llm.engine.runner
    graphs = runner.enable_decode_graphs(capture=False)
    assert graphs.sizes == [1, 2, 4, 8]
    used = []
    run = graphs.run
    graphs.run = lambda size, meta: used.append(size) or run(size, meta)
    outs = llm.generate(PROMPTS, SamplingParams.greedy(MAX_TOKENS))
    assert [o.token_ids for o in outs] == ref
    assert 4 in used  # 3 decoding sequences padded to the bucket of 4


def test_padding_rows_write_only_the_scratch_block(llama):
    model_dir, _, _ = llama
    llm = LLM(str(model_dir), **COMMON, max_num_seqs=8)
    engine, runner = llm.engine, llm.engine.runner
    runner.enable_decode_graphs(capture=False)
    assert engine.block_manager.num_blocks == runner.kv_cache.num_blocks - 1  # the scratch block is never handed out
    for p in PROMPTS:
        engine.add_request(p, SamplingParams.greedy(MAX_TOKENS))
    engine.step()  # the prompts
    checked = []
    execute = runner.execute

    def checking(batch, **kw):  # kw: the engine's overlap callback
        before = runner.kv_cache.k.clone()
        tokens = execute(batch, **kw)
        changed = (runner.kv_cache.k != before).flatten(2).any(-1).nonzero().tolist()  # [layer, block]
        step_blocks = {s.block_table[s.num_computed_tokens // runner.block_size] for s in batch.seqs}
        assert {b for _, b in changed} <= step_blocks | {runner.scratch_block}
        # 3 real rows + 1 padding row; it writes the same K (token 0, position 0) every time after the first
        checked.append(any(b == runner.scratch_block for _, b in changed))
        return tokens

    runner.execute = checking
    while engine.has_unfinished_requests():
        engine.step()
    assert len(checked) == MAX_TOKENS - 1 and checked[0]


@interpreted
@pytest.mark.parametrize("kind", ["auto", "fp8", "int8"])
def test_decode_graph_region_obeys_capture_and_replays_its_captured_metadata(llama, triton_quantized, kind):
    """What capture and replay demand of the decode forward, short of a GPU. The region is run once per
    bucket at capture time on padding rows, under CaptureRules (no host sync, no host data). Every later
    decode step then runs it with *that* metadata — host integers and tensor views fixed at capture, as a
    replayed graph has them — on the buffers this step filled, and must give the tokens of the plain path."""
    model_dir, ref, _ = llama
    expected = ref if kind == "auto" else triton_quantized(kind)
    llm = LLM(str(model_dir), **COMMON, **TRITON, kv_cache_dtype=kind, max_num_seqs=8)
    runner = llm.engine.runner
    graphs = runner.enable_decode_graphs(capture=False)
    rules = CaptureRules()
    captured: dict[int, tuple] = {}

    def pointers(size):  # where the bucket's input views live: a graph keeps reading those addresses
        return {name: t.data_ptr() for name, t in runner.buffers.device_views(runner._graph_layout(size)).items()}

    with torch.inference_mode():
        for size in sorted(graphs.sizes, reverse=True):  # as capture_all does
            meta = runner._graph_prepare(size)
            with rules:
                runner._graph_forward(size, meta)
            captured[size] = (meta, pointers(size))
    assert rules.violations == []
    replayed = []

    def replay(size, meta):
        captured_meta, at_capture = captured[size]
        assert pointers(size) == at_capture  # the inputs never move
        replayed.append(size)
        with rules:
            return runner._graph_forward(size, captured_meta)

    graphs.run = replay
    outs = llm.generate(PROMPTS, SamplingParams.greedy(MAX_TOKENS))
    assert rules.violations == []
    assert [o.token_ids for o in outs] == expected
    assert 4 in replayed


# ---- configuration ------------------------------------------------------------------------------------
def test_backend_resolution_and_its_errors(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    assert resolve_attention_backend("auto", cpu) == "cpu"
    assert resolve_attention_backend("auto", cuda, enforce_eager=False) == "triton"
    with pytest.raises(ValueError, match=r"attention_backend='sdpa'.*enforce_eager=True"):
        resolve_attention_backend("sdpa", cuda, enforce_eager=False)
    assert resolve_attention_backend("sdpa", cuda, enforce_eager=True) == "sdpa"
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match=r"attention_backend='triton' runs on CUDA"):
        resolve_attention_backend("triton", cpu)
    with pytest.raises(ValueError, match="attention_backend"):
        from accelkit.serve.config import EngineConfig

        EngineConfig(model="m", attention_backend="flash")
