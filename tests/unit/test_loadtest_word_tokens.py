"""Issue #29 item 7: docs/loadtest.md states how many tokens a random-dataset word becomes with the README tour's
tiny model — measured here with that model's own tokenizer, so the figure cannot drift from the code — and a
server's too-long-prompt refusal names --random-input-len with a length that fits."""

from __future__ import annotations

import random
import re

from accelkit.loadtest.config import LoadTestConfig
from accelkit.loadtest.datasets import random_requests
from accelkit.loadtest.runner import context_hint
from accelkit.serve.testing import build_bytelevel_tokenizer
from tests.conftest import REPO


def _tokens_per_word() -> tuple[float, int, int]:
    tokenizer = build_bytelevel_tokenizer(vocab_size=512)  # what save_bytelevel_model saves with the tiny model
    requests = random_requests(20, 1024, 8, 0.0, random.Random(0))
    counts = [len(tokenizer(r.prompt, add_special_tokens=False)["input_ids"]) for r in requests]
    return sum(counts) / (1024 * len(counts)), min(counts), max(counts)


def test_the_docs_state_the_measured_tokens_per_word():
    per_word, low, high = _tokens_per_word()
    docs = (REPO / "docs" / "loadtest.md").read_text()
    stated = {float(x) for x in re.findall(r"makes \*{0,2}(\d+\.\d) tokens of (?:each|a word)", docs)}
    assert stated == {round(per_word, 1)}, (stated, per_word)
    assert f"{low:,}–{high:,} tokens" in docs
    assert "≈ one token" not in docs
    assert per_word > 2  # the reason for all this: a word is not one token to a small vocabulary


def test_a_too_long_prompt_names_the_flag_and_a_length_that_fits():
    config = LoadTestConfig(base_url="http://127.0.0.1:9", model="tiny")  # the defaults: 1,024 words, 128 out
    request = random_requests(1, 1024, 128, 0.0, random.Random(0))[0]
    ours = ("HTTP 400: This model's maximum context length is 2048 tokens and your request has 4,566 input tokens "
            "(the prompt plus at least one output token must fit); shorten the prompt to at most 2047 tokens")
    hint = context_hint(ours, config, request)
    assert "--random-input-len 1024" in hint and "--random-output-len 128" in hint
    words = int(re.search(r"lower --random-input-len to about (\d+)", hint).group(1))
    assert words * 4566 / 1024 + 128 <= 2048 < (words + 2) * 4566 / 1024 + 128  # the most that fits, no less
    vllm = ("HTTP 400: This model's maximum context length is 512 tokens. However, your request has 4566 input "
            "tokens. Please reduce the length of the input messages.")
    assert "lower --random-input-len to about" in context_hint(vllm, config, request)
    assert "lower --random-input-len" in context_hint("HTTP 400: prompt too long", config, request)
    assert context_hint("HTTP 500: boom", config, request) == ""
    files = LoadTestConfig(base_url="http://127.0.0.1:9", model="tiny", dataset=f"jsonl:{REPO / 'README.md'}")
    assert context_hint(ours, files, request) == ""  # a file's prompts are not --random-input-len
