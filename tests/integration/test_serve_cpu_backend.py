"""The CPU attention backends end to end: the compiled decode kernel (``cpu``, what ``auto`` picks on a CPU) and the
gather + SDPA reference (``sdpa``) each give transformers' greedy tokens — GQA, a sliding window shorter than the
prompts, chunked prompts that continue from cached context, and a block size that divides nothing."""

from __future__ import annotations

import os
import shutil

import pytest
import torch

from accelkit.serve import LLM, SamplingParams
from accelkit.serve.testing import hf_greedy, random_prompts, save_tiny_model

MAX_TOKENS = 8
PROMPTS = random_prompts(4, min_len=3, max_len=40, seed=12)
# without a C compiler the engine runs sdpa instead (tested below too); CI installs one (.ci/run)
needs_cc = pytest.mark.skipif(
    shutil.which(os.environ.get("CC") or "cc") is None and not os.environ.get("CI"),
    reason="no C compiler here to build the CPU decode kernel (`apt-get install gcc`; .ci/run installs it)",
)
COMMON = {"kv_cache_memory_bytes": 2 * 2**20, "max_model_len": 128, "device": "cpu"}


@pytest.fixture(scope="module", params=[("tiny-llama", {}), ("tiny-mistral", {"sliding_window": 8})],
                ids=["llama-gqa", "mistral-window8"])
def model(request, tmp_path_factory):
    import transformers

    name, extra = request.param
    d = save_tiny_model(tmp_path_factory.mktemp(name) / "m", name, seed=3, **extra)
    hf = transformers.AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32)
    return d, [hf_greedy(hf, p, MAX_TOKENS) for p in PROMPTS]


@pytest.mark.parametrize("backend", [pytest.param("auto", marks=needs_cc), "sdpa"])
@pytest.mark.parametrize("config", [{}, {"max_num_batched_tokens": 16, "block_size": 5}], ids=["default", "chunked-block5"])
def test_cpu_backends_give_transformers_greedy_tokens(model, backend, config):
    model_dir, want = model
    llm = LLM(str(model_dir), **COMMON, **config, attention_backend=backend)
    assert llm.engine.runner.backend.name == ("cpu" if backend == "auto" else "sdpa")
    outs = llm.generate(PROMPTS, SamplingParams.greedy(MAX_TOKENS))
    assert [o.token_ids for o in outs] == want
