"""Incremental detokenization: the text a new token adds, without decoding the whole output each step."""

from __future__ import annotations

from typing import Any

_CONTEXT_TOKENS = 5  # prompt tokens decoded with the first outputs, so word boundaries come out right


class IncrementalDetokenizer:
    """Decodes a sliding window ``ids[prefix_offset:]`` and emits what lies past ``ids[prefix_offset:read_offset]``
    (the approach of TGI and vLLM); a trailing U+FFFD means an unfinished multi-byte character: wait."""

    __slots__ = ("ids", "prefix_offset", "read_offset", "tokenizer")

    def __init__(self, tokenizer: Any, prompt_token_ids: list[int]) -> None:
        self.tokenizer = tokenizer
        self.ids = list(prompt_token_ids[-_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.ids)

    def _decode(self, ids: list[int]) -> str:
        return str(self.tokenizer.decode(ids, skip_special_tokens=True))

    def add(self, token_ids: list[int], *, final: bool = False) -> str:
        self.ids.extend(token_ids)
        prefix = self._decode(self.ids[self.prefix_offset : self.read_offset])
        text = self._decode(self.ids[self.prefix_offset :])
        if len(text) > len(prefix) and (final or not text.endswith("\ufffd")):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return text[len(prefix) :]
        return ""
