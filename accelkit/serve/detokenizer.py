"""Incremental detokenization: the text a new token adds, without decoding the whole output each step.

It runs for every request on every step, so its cost per token matters: at batch 128 a few microseconds
per token is a sizeable share of a GPU decode step. Two things keep it small, neither changing the text:

- :class:`TokenDecoder` calls the Rust ``tokenizers`` backend directly when ``tokenizer.decode`` is
  exactly transformers' fast-tokenizer decode (backend decode, then the tokenizer's optional clean-up) —
  the same result without transformers' per-call Python (argument conversion, batching checks); any
  other tokenizer goes through its own ``decode``;
- the window that ends a step's emission is usually one token long, and one token always decodes to the
  same text, so single-token decodes are memoised.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

_CONTEXT_TOKENS = 5  # prompt tokens decoded with the first outputs, so word boundaries come out right


def _fast_backend(tokenizer: Any) -> tuple[Any, bool] | None:
    """``(tokenizers.Tokenizer, clean_up)`` when ``tokenizer.decode(ids, skip_special_tokens=True)`` is the
    backend's decode followed (when ``clean_up``) by ``tokenizer.clean_up_tokenization``; else None."""
    try:
        from transformers import PreTrainedTokenizerFast
    except ImportError:
        return None
    cls = type(tokenizer)
    if not isinstance(tokenizer, PreTrainedTokenizerFast):
        return None
    if cls.decode is not PreTrainedTokenizerFast.decode or cls._decode is not PreTrainedTokenizerFast._decode:
        return None  # a subclass that decodes its own way
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "decode"):
        return None
    clean_up = bool(getattr(tokenizer, "clean_up_tokenization_spaces", False))
    force_flag = "clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output"
    # transformers 5 skips the clean-up for BPE models unless forced (it corrupts their output)
    if (clean_up and hasattr(tokenizer, force_flag) and type(backend.model).__name__ == "BPE"
            and not getattr(tokenizer, force_flag)):
        clean_up = False
    return backend, clean_up


class TokenDecoder:
    """``decode(ids)`` is ``tokenizer.decode(ids, skip_special_tokens=True)`` as a string, cheaper (see the
    module doc); ``decode_special(ids)`` the same with ``skip_special_tokens=False`` (special tokens in the text: a
    request's ``SamplingParams.skip_special_tokens``). One per engine; used from the engine thread only."""

    __slots__ = ("decode", "decode_special", "is_fast")

    def __init__(self, tokenizer: Any) -> None:
        fast = _fast_backend(tokenizer)
        self.is_fast = fast is not None
        # closures in instance slots rather than methods: one plain call per decode on the hottest path
        self.decode: Callable[[list[int]], str] = _decoder(tokenizer, fast, skip_special_tokens=True)
        self.decode_special: Callable[[list[int]], str] = _decoder(tokenizer, fast, skip_special_tokens=False)


def _decoder(tokenizer: Any, fast: tuple[Any, bool] | None, *, skip_special_tokens: bool) -> Callable[[list[int]], str]:
    single: dict[int, str] = {}  # token id → its text alone (bounded by the vocabulary)
    if fast is not None:
        backend_decode, clean_up = fast[0].decode, fast[1]
        clean = tokenizer.clean_up_tokenization

        def decode_many(ids: list[int]) -> str:
            text: str = backend_decode(ids, skip_special_tokens)
            return clean(text) if clean_up else text
    else:
        def decode_many(ids: list[int]) -> str:
            return str(tokenizer.decode(ids, skip_special_tokens=skip_special_tokens))

    def decode(ids: list[int]) -> str:
        if len(ids) != 1:
            return decode_many(ids)
        text = single.get(ids[0])
        if text is None:
            text = single[ids[0]] = decode_many(ids)
        return text

    return decode


class IncrementalDetokenizer:
    """Decodes a sliding window ``ids[prefix_offset:]`` and emits what lies past ``ids[prefix_offset:read_offset]``
    (the approach of TGI and vLLM); a trailing U+FFFD means an unfinished multi-byte character: wait.

    A prompt may end inside a character (token ids that split it): the first output tokens then complete it, and
    the character is the output's, as vLLM's ``DecodeStream`` gives it — the prefix's trailing U+FFFD are left out
    of what the window's text is compared with, and any of them the window still decodes to (bytes that stayed
    invalid) are the prompt's, not emitted."""

    __slots__ = ("decode", "ids", "prefix_offset", "prefix_pending", "prefix_text", "read_offset")

    def __init__(self, decoder: TokenDecoder | Any, prompt_token_ids: list[int], *,
                 skip_special_tokens: bool = True) -> None:
        """``decoder``: the engine's :class:`TokenDecoder` (or a tokenizer, wrapped in one)."""
        decoders = decoder if isinstance(decoder, TokenDecoder) else TokenDecoder(decoder)
        self.decode = decoders.decode if skip_special_tokens else decoders.decode_special
        self.ids = list(prompt_token_ids[-_CONTEXT_TOKENS:])
        self.prefix_offset = 0
        self.read_offset = len(self.ids)
        # decode(ids[prefix_offset:read_offset]) without its trailing U+FFFD, once computed, and how many there were
        self.prefix_text: str | None = None
        self.prefix_pending = 0

    def add(self, token_ids: list[int], *, final: bool = False) -> str:
        ids = self.ids
        ids.extend(token_ids)
        prefix = self.prefix_text
        if prefix is None:
            prefix = self.decode(ids[self.prefix_offset : self.read_offset])
            if prefix.endswith("\ufffd"):  # (the prompt's context ends inside a character)
                full = len(prefix)
                prefix = prefix.rstrip("\ufffd")
                self.prefix_pending = full - len(prefix)
            self.prefix_text = prefix
        text = self.decode(ids[self.prefix_offset :])
        if len(text) > len(prefix) and (final or not text.endswith("\ufffd")):
            new = text[len(prefix) :]
            pending = self.prefix_pending
            if pending:  # the prefix's unfinished bytes that the new tokens did not complete: not output
                kept = new.lstrip("\ufffd")
                new = new[min(pending, len(new) - len(kept)) :]
                self.prefix_pending = 0
            self.prefix_offset, self.read_offset = self.read_offset, len(ids)
            self.prefix_text = None
            return new
        return ""
