"""vLLM's ``cache_salt``: prompt blocks cached for a salted request serve only requests with the same salt, so tenants
sharing a server cannot learn each other's prompts from how fast theirs are answered. The field was an unknown one,
dropped with a log line: every tenant shared one prefix cache."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from accelkit.serve.llm import LLM
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.server.errors import APIError
from accelkit.serve.server.params import sampling_params
from accelkit.serve.server.protocol import ChatCompletionRequest, CompletionRequest
from accelkit.serve.testing import save_bytelevel_model

PROMPT = "a shared prompt of many words " * 4


@pytest.fixture(scope="module")
def llm() -> LLM:
    return LLM(str(save_bytelevel_model(Path(tempfile.mkdtemp()) / "m", seed=2)), enable_prefix_caching=True,
               block_size=4)


def test_a_salt_meets_only_its_own_cached_blocks(llm: LLM) -> None:
    def cached(salt: str | None) -> tuple[int, list[int]]:
        out = llm.generate(PROMPT, SamplingParams(max_tokens=2, temperature=0, cache_salt=salt))[0]
        assert out.metrics is not None
        return out.metrics.num_cached_tokens, out.token_ids

    first = cached(None)
    runs = [cached(None), cached("tenant-a"), cached("tenant-a"), cached("tenant-b"), cached(None)]
    assert first[0] == 0 and runs[0][0] > 0  # unsalted requests share the cache, as before
    assert [n for n, _ in runs[1:]] == [0, runs[0][0], 0, runs[0][0]]  # a salt hits only its own blocks
    assert all(ids == first[1] for _, ids in runs)  # and what is generated does not change


@pytest.mark.parametrize("cls", [CompletionRequest, ChatCompletionRequest])
def test_the_server_passes_the_salt_and_refuses_an_empty_one(cls: type) -> None:
    fields = {"prompt": "x"} if cls is CompletionRequest else {"messages": [{"role": "user", "content": "x"}]}
    args = {"max_tokens": 1, "choice": 0, "logprobs": None, "prompt_logprobs": None, "structured": None}
    assert sampling_params(cls(cache_salt="tenant-a", **fields), **args).cache_salt == "tenant-a"
    assert sampling_params(cls(**fields), **args).cache_salt is None
    with pytest.raises(APIError) as info:
        sampling_params(cls(cache_salt="", **fields), **args)
    assert (info.value.status, info.value.param) == (400, "cache_salt")
    assert str(info.value).startswith("cache_salt has 0 characters; give 1 to 1024")
