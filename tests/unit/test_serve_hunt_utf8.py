"""A prompt of token ids that ends inside a multi-byte character: the first output token completes it, and the
character is the output's text (as vLLM's DecodeStream gives it), not lost — streamed token by token or not."""

import functools

import pytest

from accelkit.serve.detokenizer import IncrementalDetokenizer
from accelkit.serve.testing import build_euro_splitting_tokenizer

euro_tokenizer = functools.cache(build_euro_splitting_tokenizer)  # (specials 0–3, byte b is 4 + b, 260 = e2 82)

A, LEAD, CONT, BYTE_FF = 4 + ord("a"), 260, 4 + 0xAC, 4 + 0xFF  # a | e2 82 | ac | ff (never UTF-8)


def emitted(prompt: list[int], output: list[int], step: int) -> str:
    detok = IncrementalDetokenizer(euro_tokenizer(), prompt)
    chunks = [output[i:i + step] for i in range(0, len(output), step)]
    return "".join(detok.add(c, final=k == len(chunks) - 1) for k, c in enumerate(chunks))


@pytest.mark.parametrize("step", [1, 2, 3])
@pytest.mark.parametrize(("prompt", "output", "text"), [
    ([A, LEAD], [CONT, A], "€a"),  # the prompt's e2 82 completed by the output's ac
    ([A, LEAD], [CONT, LEAD, CONT], "€€"),
    ([A, LEAD], [CONT], "€"),  # completed by the last token
    ([BYTE_FF, A, LEAD], [CONT, A], "€a"),  # an invalid byte earlier in the prompt stays the prompt's
    ([A, LEAD], [A, A], "aa"),  # never completed: the prompt's broken bytes are not the output's
    ([A, LEAD], [BYTE_FF, A], "\ufffda"),  # the output's own invalid byte is its own
    ([A], [LEAD, CONT, A], "€a"),  # (a character split inside the output: as before)
])
def test_character_completed_across_the_prompt_end(prompt, output, text, step):
    assert emitted(prompt, output, step) == text
