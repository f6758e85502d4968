"""Logprobs in OpenAI's two shapes: completions' ``{tokens, token_logprobs, top_logprobs, text_offset}`` and chat's
``{content: [{token, logprob, bytes, top_logprobs}]}``; and vLLM's ``prompt_logprobs`` (per prompt token,
``{id: {logprob, rank, decoded_token}}``).

A token's text is ``tokenizer.decode([id])``, as vLLM names it. Two fields need more than that text:

- ``text_offset`` is where each token's text starts in the choice's text, in characters. One token decoded alone
  is not its share of the text: a tokenizer whose decoder joins words with spaces decodes ``w9`` alone where the
  text holds `` w9``, and the tokens of a character split across them (``€`` as ``e2 82`` + ``ac`` in a
  byte-level BPE) each decode to U+FFFD, one character apiece for a character that is one. So the offsets replay
  the engine's own incremental detokenization (same prompt context, same algorithm): a token's offset is the
  length of the text the tokens before it gave, and the tokens of a split character share the offset of that
  character.
- chat's ``bytes`` is the token's UTF-8 bytes, which OpenAI documents for exactly the split-character case: the
  bytes of consecutive tokens, joined, are the text's. A token that decodes to U+FFFD is such a piece (or a
  byte that is not UTF-8 at all): its raw bytes come from the vocabulary — a byte-level BPE piece through
  GPT-2's byte-to-character table, a byte-fallback piece ``<0xE2>`` as that byte. Any other token's bytes are
  its text's UTF-8.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import re
from collections.abc import Callable
from typing import Any

from accelkit.serve.detokenizer import IncrementalDetokenizer, TokenDecoder
from accelkit.serve.outputs import TokenLogprobs

_BYTE_PIECE = re.compile(r"<0x([0-9A-Fa-f]{2})>")  # sentencepiece's byte fallback


def logprob_value(value: float) -> float | None:
    """JSON has no -inf (vLLM's floor: -9999.0) and no NaN: a NaN logprob — a model whose logits overflowed —
    is null, no figure, rather than a made-up one or an invalid document (a 500 without streaming)."""
    return None if math.isnan(value) else min(max(value, -9999.0), 0.0)


@functools.lru_cache(maxsize=1)
def _byte_level_table() -> dict[str, int]:
    """GPT-2's byte-level alphabet, character → byte: printable bytes stand for themselves, the other 68 are
    shifted past U+00FF in byte order (``bytes_to_unicode`` of GPT-2 and of ``tokenizers``' ByteLevel)."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table = {chr(b): b for b in printable}
    shifted = (b for b in range(256) if b not in table.values())
    table.update({chr(256 + n): b for n, b in enumerate(shifted)})
    return table


def _decoder_types(tokenizer: Any) -> set[str]:
    """The ``type`` of every decoder in a fast tokenizer's pipeline (``ByteLevel``, ``ByteFallback`` …); empty for
    a slow tokenizer or one whose pipeline cannot be read."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    try:
        decoder = json.loads(backend.to_str()).get("decoder") if backend is not None else None
    except (AttributeError, TypeError, ValueError):
        return set()
    types: set[str] = set()
    stack = [decoder]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            if isinstance(node.get("type"), str):
                types.add(node["type"])
            stack += node.values()
        elif isinstance(node, list):
            stack += node
    return types


def _id_name(token: int) -> str:
    return f"token_id:{token}"


class LogprobFormatter:
    """Formats the engine's per-token logprobs for one server (one tokenizer); thread-safe (its caches are)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._decoder = TokenDecoder(tokenizer) if tokenizer is not None else None
        # a byte-level vocabulary: fast (a ByteLevel decoder) or slow (GPT2Tokenizer's own byte_decoder)
        self._byte_level = tokenizer is not None and (
            "ByteLevel" in _decoder_types(tokenizer) or isinstance(getattr(tokenizer, "byte_decoder", None), dict)
        )
        self.token_text: Callable[[int], str] = functools.lru_cache(maxsize=1 << 16)(self._token_text)
        self.token_bytes: Callable[[int], list[int]] = functools.lru_cache(maxsize=1 << 16)(self._token_bytes)
        self._by_id: LogprobFormatter | None = None

    def by_id(self) -> LogprobFormatter:
        """This formatter naming every token ``token_id:<id>`` (its bytes those of that name), as vLLM's
        ``return_tokens_as_token_ids`` has them — for clients that need the exact ids, a token's text being
        ambiguous (two ids may decode alike, a byte-level piece to U+FFFD)."""
        if self._by_id is None:
            named = copy.copy(self)
            named.token_text = _id_name
            named.token_bytes = lambda token: list(_id_name(token).encode())
            self._by_id = named
        return self._by_id

    def _token_text(self, token: int) -> str:
        """One token's text, as logprobs name it (vLLM's decoded token)."""
        return str(self.tokenizer.decode([token])) if self.tokenizer is not None else str(token)

    def _token_bytes(self, token: int) -> list[int]:
        text = self.token_text(token)
        if "\ufffd" in text and self.tokenizer is not None:  # (part of) a character split across tokens
            piece = self.tokenizer.convert_ids_to_tokens(token)
            if isinstance(piece, str):
                byte = _BYTE_PIECE.fullmatch(piece)
                if byte is not None:
                    return [int(byte.group(1), 16)]
                table = _byte_level_table()
                if self._byte_level and piece and all(c in table for c in piece):
                    return [table[c] for c in piece]
        return list(text.encode("utf-8", "replace"))

    def offsets(self, prompt_token_ids: list[int], *, start: int = 0) -> TextOffsets:
        """A tracker of one choice's ``text_offset`` (see the module doc), its first token at ``start``."""
        return TextOffsets(self._decoder, prompt_token_ids, start)

    def completion(self, token_ids: list[int], logprobs: list[TokenLogprobs], offsets: list[int]) -> dict[str, Any]:
        """OpenAI's completions logprobs: token texts, their logprobs, the most likely (the sampled token among
        them, as vLLM's) and each token's character offset in the text (``offsets``, from :meth:`offsets`)."""
        text = self.token_text
        top = [self._named(token, chosen, alternatives) for token, (chosen, alternatives) in
               zip(token_ids, logprobs, strict=True)]
        return {"tokens": [text(t) for t in token_ids], "token_logprobs": [logprob_value(c) for c, _ in logprobs],
                "top_logprobs": top, "text_offset": offsets}

    def _named(self, token: int, chosen: float, alternatives: list[tuple[int, float]]) -> dict[str, float | None]:
        """Completions' ``top_logprobs`` entry: ``{text: logprob}`` of the token, first, and of the most likely. Ids
        that decode alike (byte-level pieces of characters all decode to U+FFFD) share a key: the token's own logprob
        keeps it, so that ``top_logprobs[i][tokens[i]]`` is ``token_logprobs[i]``, else the likeliest's (the last of
        them overwrote it: the chosen piece of a split character was shown with another piece's, lower, logprob)."""
        text = self.token_text
        named = {text(token): logprob_value(chosen)}
        for t, lp in alternatives:  # (most likely first)
            named.setdefault(text(t), logprob_value(lp))
        return named

    def prompt_offsets(self, prompt: str | list[int], ids: list[int], *, add_special_tokens: bool) -> list[int]:
        """Where each token of an echoed prompt starts in the echoed text: the text as sent (a string prompt), or
        ``tokenizer.decode(ids)`` with its special tokens (a prompt of ids, as completions' echo writes it).

        A string prompt takes its tokens' spans in that very string (a fast tokenizer's offset mapping, when it
        tokenizes to the same ids): re-decoding it could differ from what was sent (two spaces, a BOS that was
        added). A special token has no span: it starts where the text before it ends."""
        tokenizer = self.tokenizer
        if tokenizer is None:
            return [0] * len(ids)
        if isinstance(prompt, str):
            spans = self._spans(prompt, ids, add_special_tokens)
            if spans is not None:
                return spans
            return TextOffsets(self._decoder, [], 0).add(ids, final=True)
        return TextOffsets(_WithSpecials(tokenizer), [], 0).add(ids, final=True)

    def _spans(self, prompt: str, ids: list[int], add_special_tokens: bool) -> list[int] | None:
        try:
            encoded = self.tokenizer(prompt, add_special_tokens=add_special_tokens, return_offsets_mapping=True)
            mapping = encoded["offset_mapping"]
        except (NotImplementedError, TypeError, ValueError, KeyError):  # a slow tokenizer has no offsets
            return None
        if list(encoded["input_ids"]) != list(ids) or len(mapping) != len(ids):
            return None
        # contiguous: the characters between two spans belong to the token after them (a ByteLevel post-processor
        # with trim_offsets, GPT-2's and Pythia's, leaves a token's leading space out of its span: found in review),
        # and the tokens of a split character share its span, so its start
        offsets, end = [], 0
        for start, stop in mapping:
            offsets.append(min(start, end) if stop > start else end)  # (0, 0): a special token, no characters
            end = max(end, stop)
        return offsets

    def prompt_completion(self, prompt_token_ids: list[int], logprobs: list[TokenLogprobs | None],
                          offsets: list[int], *, top: int | None = None) -> dict[str, Any]:
        """Completions' logprobs of an echoed prompt: as :meth:`completion`'s, the first token's logprob and top
        null (nothing precedes it, as OpenAI's and vLLM's); ``offsets`` from :meth:`prompt_offsets`; the ``top``
        most likely of each entry (None: all it holds)."""
        text = self.token_text
        most = [None if entry is None else self._named(token, entry[0], entry[1][:top])
                for token, entry in zip(prompt_token_ids, logprobs, strict=True)]
        return {"tokens": [text(t) for t in prompt_token_ids],
                "token_logprobs": [None if e is None else logprob_value(e[0]) for e in logprobs],
                "top_logprobs": most, "text_offset": offsets}

    def prompt_logprobs(self, prompt_token_ids: list[int], logprobs: list[TokenLogprobs | None],
                        ranks: list[int | None], top: int) -> list[dict[str, dict[str, Any]] | None]:
        """vLLM's ``prompt_logprobs`` field: per prompt token null for the first (nothing precedes it), then
        ``{token id as a string: {logprob, rank, decoded_token}}`` holding the token itself (first) and the ``top``
        most likely there. The token's rank is where it stands in the whole vocabulary (from the engine; past
        ``top`` when it is not one of them); each of the most likely is ranked 1 + those of them strictly more
        likely — its position unless it ties, since every token more likely than one of the top is one of them."""
        text = self.token_text
        fields: list[dict[str, dict[str, Any]] | None] = []
        for token, entry, rank in zip(prompt_token_ids, logprobs, ranks, strict=True):
            if entry is None:
                fields.append(None)
                continue
            chosen, most = entry[0], entry[1][:top]
            field = {str(token): {"logprob": logprob_value(chosen), "rank": rank, "decoded_token": text(token)}}
            place = 0
            for i, (t, lp) in enumerate(most):  # (most likely first)
                if i == 0 or lp < most[i - 1][1]:  # a tie keeps the rank of the one before it
                    place = i + 1
                field.setdefault(str(t), {"logprob": logprob_value(lp), "rank": place, "decoded_token": text(t)})
            fields.append(field)
        return fields

    def chat(self, token_ids: list[int], logprobs: list[TokenLogprobs]) -> dict[str, Any]:
        """OpenAI's chat logprobs: per token its text, logprob, UTF-8 bytes and the most likely ones."""
        def entry(token: int, lp: float) -> dict[str, Any]:
            return {"token": self.token_text(token), "logprob": logprob_value(lp), "bytes": self.token_bytes(token)}

        return {"content": [{**entry(token, chosen), "top_logprobs": [entry(t, lp) for t, lp in alternatives]}
                            for token, (chosen, alternatives) in zip(token_ids, logprobs, strict=True)]}


class _WithSpecials(TokenDecoder):
    """Decodes as ``tokenizer.decode(ids)`` does by default, special tokens kept: the echo of a prompt of ids."""

    def __init__(self, tokenizer: Any) -> None:  # (no super().__init__: nothing of TokenDecoder's fast path applies)
        self.is_fast = False
        self.decode = lambda ids: str(tokenizer.decode(ids))


class TextOffsets:
    """``text_offset`` of one choice's tokens, fed in order as they are generated (all at once, or chunk by chunk
    while streaming: the offsets are the same).

    Tokens the detokenizer holds back (their text ends in an unfinished character) are counted once the text
    comes out; meanwhile each token starts where its text first differs from the held text: the pieces of a
    character split across tokens all start where that character does, and held bytes that never complete a
    character (a lone ``e4`` before ``-``) are a U+FFFD of their own, before the token after them. (Found in
    review: a token that released held text took the held text's offset.)"""

    __slots__ = ("_detokenizer", "_held", "offset")

    def __init__(self, decoder: TokenDecoder | None, prompt_token_ids: list[int], start: int) -> None:
        self._detokenizer = IncrementalDetokenizer(decoder, prompt_token_ids) if decoder is not None else None
        self.offset = start  # characters of text before the next token
        self._held = ""  # the text of the tokens held back since, not yet in ``offset``

    def add(self, token_ids: list[int], *, final: bool) -> list[int]:
        """The offsets of ``token_ids``, the next tokens of the choice; ``final`` when they are its last."""
        detokenizer = self._detokenizer
        if detokenizer is None:  # (without a tokenizer the text is empty)
            return [self.offset] * len(token_ids)
        offsets = []
        last = len(token_ids) - 1
        for i, token in enumerate(token_ids):
            emitted = detokenizer.add([token], final=final and i == last)
            # the text through this token, past what was emitted before (held text included)
            text = emitted or detokenizer.decode(detokenizer.ids[detokenizer.prefix_offset:])[
                len(detokenizer.prefix_text or ""):]
            offsets.append(self.offset + _settled(self._held, text))
            if emitted:
                self.offset, self._held = self.offset + len(emitted), ""
            else:
                self._held = text
        return offsets


def _settled(held: str, text: str) -> int:
    """Characters of ``held`` (the text before a token) that ``text`` (the text with it) keeps as they were: their
    common start, less a U+FFFD that ends ``text`` (bytes that may still complete a character, which then starts
    there)."""
    if text.endswith("\ufffd"):
        text = text[:-1]
    n = 0
    for a, b in zip(held, text, strict=False):
        if a != b:
            break
        n += 1
    return n
