"""The engine's CUDA path, checked on a CPU: the Triton backend (under Triton's interpreter) gives greedy
outputs token-identical to transformers in fp32, with its log-probabilities — decodes, chunked prefill (chunks
read their context from the cache), prefix-cache hits, GQA, block size 5, a Mistral sliding window, Llama's
q/k/v/o and MLP biases, fp8/int8 caches close to the reference — and the CUDA-graph path (decode steps padded to
a batch-size bucket at the fixed layout of the persistent buffers) run eagerly gives the same tokens as the plain
path, its padding rows touching nothing but the scratch block; the decode region obeys what a capture demands (no
host sync, no host data) and gives the same tokens when every step reuses the metadata fixed at capture, as a
replay does. Plus the configuration errors of the backend seam."""

import os
from typing import NamedTuple

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

# The interpreter is slow (each program instance runs in Python, a prompt token costs more than a decode step's
# token): few, short requests, each a prefill and 3 decode steps. Three sequences (a decode batch of 3 is padded to
# the CUDA-graph bucket of 4), their lengths the block boundaries they cross in 16-token blocks: 16 (a prefill that
# fills its block; its first decode takes the first slot of a new block, and the two after it read across both),
# 17 (a prefill over two blocks; chunked at 16 tokens a step, its last chunk has context and straddles a block),
# 4 (within one block).
MAX_TOKENS = 4
PROMPTS = [random_prompts(1, min_len=n, max_len=n, seed=11 + i)[0] for i, n in enumerate((16, 17, 4))]
SHARED = [list(range(10, 30)) + p[:5] for p in PROMPTS[:2]]  # a 20-token common prefix
KV_BYTES = 2 * 2**20
TRITON = {"attention_backend": "triton"}
COMMON = {"kv_cache_memory_bytes": KV_BYTES, "max_model_len": 128, "device": DEVICE, "enforce_eager": True}
interpreted = pytest.mark.slow  # each Triton-backend run takes seconds under the interpreter


class Greedy(NamedTuple):
    """Greedy runs of some prompts: each one's tokens, and the log-probabilities over the vocabulary that chose
    them, (tokens, vocab) per prompt."""

    tokens: list[list[int]]
    logprobs: list[torch.Tensor]


def hf_reference(hf, prompts) -> Greedy:
    """transformers' greedy tokens (``generate``), and its log-probabilities at each (one forward over prompt and
    tokens)."""
    tokens = [hf_greedy(hf, p, MAX_TOKENS) for p in prompts]
    logprobs = []
    with torch.inference_mode():
        for p, t in zip(prompts, tokens, strict=True):
            logits = hf(torch.tensor([p + t])).logits[0, len(p) - 1 : len(p) - 1 + len(t)]
            logprobs.append(torch.log_softmax(logits.float(), dim=-1))
    return Greedy(tokens, logprobs)


def reference(model_dir, prompts) -> Greedy:
    import transformers

    return hf_reference(transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32), prompts)


def greedy(llm, *batches) -> tuple[Greedy, list]:
    """Each batch of prompts generated in turn by ``llm`` (greedy): the tokens and the log-probabilities of the logits
    its sampler was given, and the outputs."""
    rows: dict[int, list[torch.Tensor]] = {}
    sampler = llm.engine.runner.sampler
    launch = sampler.launch

    def recording(logits, params, seq_ids, *args, **kwargs):
        logprobs = torch.log_softmax(logits.float(), dim=-1).cpu()
        for row, seq_id in enumerate(seq_ids):
            rows.setdefault(seq_id, []).append(logprobs[row])
        return launch(logits, params, seq_ids, *args, **kwargs)

    sampler.launch = recording
    try:
        outs = [o for batch in batches for o in llm.generate(batch, SamplingParams.greedy(MAX_TOKENS))]
    finally:
        sampler.launch = launch
    return Greedy([o.token_ids for o in outs], [torch.stack(r) for _, r in sorted(rows.items())]), outs  # prompt order


def generate(model_dir, prompts, **kwargs) -> tuple[Greedy, LLM]:
    llm = LLM(str(model_dir), **{**COMMON, **kwargs})
    return greedy(llm, prompts)[0], llm


def assert_close(got: torch.Tensor, want: torch.Tensor) -> None:
    """Log-probabilities over the whole vocabulary, step by step, within 1e-4 (the paths agree to about 1e-6). This
    random tiny model's top tokens are often within 1e-3 of each other, so a bug that moves the logits may flip no
    token: a decode writing its K/V one block too early at a block's first slot moved them by 0.04 and changed no
    token of these runs."""
    assert got.shape == want.shape and (got - want).abs().max().item() < 1e-4, (got - want).abs().max().item()


def assert_same(got: Greedy, want: Greedy) -> None:
    """The same tokens, and the same log-probabilities at each of them."""
    assert got.tokens == want.tokens
    for a, b in zip(got.logprobs, want.logprobs, strict=True):
        assert_close(a, b)


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    d = save_tiny_model(tmp_path_factory.mktemp("llama") / "m", "tiny-llama", seed=1)
    return d, reference(d, PROMPTS), reference(d, SHARED)


@pytest.fixture(scope="module")
def triton_quantized(llama):
    """The Triton backend's greedy run with an fp8 or int8 KV cache, by kind: each run is seconds under the
    interpreter, and two tests compare against the same run (same model, prompts and engine settings)."""
    runs: dict[str, Greedy] = {}

    def tokens(kind: str) -> Greedy:
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
    assert_same(got, ref)


@interpreted
def test_triton_backend_prefix_cache_hits_stay_exact(llama):
    model_dir, _, ref = llama
    llm = LLM(str(model_dir), **COMMON, **TRITON)
    got, (_, second) = greedy(llm, SHARED[:1], SHARED[1:])
    assert second.metrics.num_cached_tokens >= 16  # its first block came from the cache
    assert_same(got, ref)


@interpreted
def test_triton_backend_mistral_sliding_window(tmp_path):
    d = save_tiny_model(tmp_path / "mistral", "tiny-mistral", seed=3, sliding_window=8)
    got, _ = generate(d, PROMPTS, max_num_batched_tokens=16, **TRITON)
    assert_same(got, reference(d, PROMPTS))


@interpreted
def test_triton_backend_qwen3_moe_qk_norm_and_experts(tmp_path):
    # the fused path: q/k RMSNorm (Triton rms_norm over (tokens · heads, head_dim) rows) before the kernel that
    # applies RoPE and writes K/V; a dense layer (fused silu_mul) and a sparse one
    d = save_tiny_model(tmp_path / "m", "tiny-qwen3-moe", seed=6, mlp_only_layers=[0])
    got, llm = generate(d, PROMPTS, **TRITON, max_num_batched_tokens=16)
    assert llm.engine.runner.backend.name == "triton"
    assert_same(got, reference(d, PROMPTS))


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
    ref = hf_reference(hf, PROMPTS)
    llm = LLM(str(model_dir), **COMMON, **TRITON, max_num_seqs=4)
    llm.engine.runner.enable_decode_graphs(capture=False)
    assert_same(greedy(llm, PROMPTS)[0], ref)


@interpreted
@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_triton_backend_quantized_cache_agrees_with_the_sdpa_reference(llama, triton_quantized, kind):
    """Same codes and scales on both paths; the kernels dequantize in place, SDPA after a gather. (A near-tie may
    make one prompt's tokens part: its steps are compared up to the one where they do.)"""
    model_dir, _, _ = llama
    sdpa, _ = generate(model_dir, PROMPTS, kv_cache_dtype=kind)
    triton = triton_quantized(kind)
    same = sum(a == b for a, b in zip(sdpa.tokens, triton.tokens, strict=True))
    assert same >= len(PROMPTS) - 1, (sdpa.tokens, triton.tokens)
    for a, b, want, got in zip(sdpa.tokens, triton.tokens, sdpa.logprobs, triton.logprobs, strict=True):
        steps = next((i + 1 for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b)))
        assert_close(got[:steps], want[:steps])


@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_a_quantized_cache_gives_the_same_output_whatever_the_chunking(llama, kind):
    """On the SDPA path a prompt chunk with no cached context attended to its own K/V unquantized, every later read
    (a chunk with context, a prefix hit, a decode) to their quantized codes: the output changed with
    max_num_batched_tokens (found in review, 11 of 40 greedy outputs). Fresh chunks now read what the cache holds."""
    model_dir, _, _ = llama
    prompts = random_prompts(6, min_len=20, max_len=60, seed=5)
    params = SamplingParams(max_tokens=6, temperature=0.0, logprobs=0)  # (no interpreter here: SDPA only)
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
    assert_same(greedy(llm, PROMPTS)[0], ref)
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
    got, _ = greedy(llm, PROMPTS)
    assert rules.violations == []
    assert_same(got, expected)
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
