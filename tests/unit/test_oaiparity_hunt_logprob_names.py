"""Completions' top_logprobs are keyed by token text, and ids may decode alike (the byte-level pieces of a split
character all decode to U+FFFD): the sampled token's own logprob keeps the key, so top_logprobs[i][tokens[i]] is
token_logprobs[i] — another piece's lower logprob overwrote it, in the generated tokens and in echo's."""

from __future__ import annotations

import functools

from accelkit.serve.server.logprobs import LogprobFormatter
from accelkit.serve.testing import SPECIAL_TOKENS, build_euro_splitting_tokenizer

LEAD, CONT = 260, len(SPECIAL_TOKENS) + 0xAC  # e2 82 | ac: both decode alone to U+FFFD
formatter = functools.cache(lambda: LogprobFormatter(build_euro_splitting_tokenizer()))


def test_the_sampled_tokens_logprob_keeps_its_name():
    fmt = formatter()
    assert fmt.token_text(LEAD) == fmt.token_text(CONT) == "\ufffd"
    entry = (-0.5, [(LEAD, -0.5), (CONT, -2.0)])  # the sampled LEAD is the most likely; CONT, less likely, alike
    out = fmt.completion([LEAD], [entry], [0])
    assert out["top_logprobs"][0]["\ufffd"] == out["token_logprobs"][0] == -0.5
    # a sampled token that is not the most likely: its own logprob still, not the likelier alike-named one's
    out = fmt.completion([CONT], [(-2.0, [(LEAD, -0.5), (CONT, -2.0)])], [0])
    assert out["top_logprobs"][0] == {"\ufffd": -2.0}
    # echo's prompt tokens alike
    echo = fmt.prompt_completion([4, LEAD], [None, entry], [0, 1])
    assert echo["top_logprobs"][1]["\ufffd"] == echo["token_logprobs"][1] == -0.5
