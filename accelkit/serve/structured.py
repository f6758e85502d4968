"""Structured outputs (guided decoding): which tokens keep the output matching a ``choice``, ``regex``, JSON schema
or ``json_object`` constraint.

Three layers, each small:

- :class:`TokenVocabulary`: every token id's bytes as the engine's detokenizer prints them (read from the fast
  tokenizer's decoder: byte-level BPE or SentencePiece-style ``▁``/byte-fallback), and a byte trie over them;
- a *character automaton* per constraint: a DFA from ``interegular`` for ``choice``/``regex``/JSON schema (a
  schema is first turned into a regex by ``structured_patterns``), and a pushdown automaton for ``json_object``
  (JSON objects nest to any depth, which no regex can);
- :class:`Guide`: the automaton lifted to bytes — a guide state is ``(automaton state, pending bytes of an
  unfinished UTF-8 character)``, since a token may end mid-character — and the token mask of a state, found by
  moving the automaton through the vocabulary's byte trie, all the nodes of a depth at once (``structured_walk``:
  numpy over a lazily filled transition table). Masks are cached per state (LRU); a regex has few states, so
  after warm-up almost every step is a cache hit.

Masks are exact at the character level: an allowed token always leaves a completion possible, and with a
vocabulary that covers every byte (byte-level BPE, SentencePiece with byte fallback) that completion is reachable
by tokens. Whitespace between JSON tokens is bounded (:data:`MAX_JSON_WHITESPACE` characters of
:data:`JSON_WHITESPACE`), so a model cannot pad forever; nothing may precede or follow the JSON document.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from collections.abc import Callable, Collection, Hashable, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from accelkit.serve.sampling import StructuredOutputs
from accelkit.serve.structured_patterns import (
    JSON_WHITESPACE,
    MAX_JSON_WHITESPACE,
    escape_literal,
    regex_fsm,
    schema_to_regex,
    strip_anchors,
)
from accelkit.serve.structured_walk import DEAD, UNKNOWN, LevelTrie, TransitionTable, allowed_tokens

if TYPE_CHECKING:
    import torch

MAX_JSON_DEPTH = 32  # json_object: nesting of objects and arrays
MAX_MASK_CACHE_BYTES = 16 << 20  # per guide: cached masks (one byte per vocabulary entry each)
_MAX_INTERNED_STATES = 200_000  # per guide: byte-level states memoised before the memo is dropped


# ------------------------------------------------------------------------------------------------ token bytes

def _byte_level_alphabet() -> dict[str, int]:
    """GPT-2's bytes-to-unicode table, inverted: the character a byte-level BPE token spells each byte with."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: b for b in printable}
    extra = 0
    for b in range(256):
        if b not in chars:
            chars[b] = 256 + extra
            extra += 1
    return {chr(c): b for b, c in chars.items()}


_BYTE_FALLBACK = re.compile(r"<0x([0-9A-Fa-f]{2})>")


def _decoder_steps(decoder: dict[str, Any] | None) -> list[dict[str, Any]]:
    if decoder is None:
        raise ValueError("structured outputs need a byte-level BPE or SentencePiece tokenizer; this model's "
                         "tokenizer has no decoder")
    if decoder.get("type") == "Sequence":
        return [step for sub in decoder.get("decoders", []) for step in _decoder_steps(sub)]
    return [decoder]


def _token_text_to_bytes(steps: list[dict[str, Any]]) -> Callable[[str], bytes | None]:
    """How the decoder turns one (non-added) token string into output bytes, mid-sequence: sequence-level
    steps after ``Fuse`` (``Strip`` of the first space) only touch the very start of the text, which the engine's
    detokenizer decodes with prompt context, so they are left out."""
    types = [step.get("type") for step in steps]
    if "ByteLevel" in types:
        if any(t != "ByteLevel" for t in types):
            raise ValueError(f"structured outputs do not know this decoder sequence: {', '.join(map(str, types))}")
        alphabet = _byte_level_alphabet()

        def byte_level(text: str) -> bytes | None:
            try:
                return bytes(alphabet[c] for c in text)
            except KeyError:
                return None  # not a byte-level spelling: never produced by this model's merges

        return byte_level
    replaces: list[tuple[str, str]] = []
    byte_fallback = fused = False
    for step in steps:
        kind = step.get("type")
        if kind == "Metaspace" and not fused:
            replaces.append((step.get("replacement", "▁"), " "))
        elif kind == "Replace" and not fused and isinstance(step.get("pattern"), dict) and "String" in step["pattern"]:
            replaces.append((step["pattern"]["String"], step.get("content", "")))
        elif kind == "ByteFallback" and not fused:
            byte_fallback = True
        elif kind == "Fuse":
            fused = True
        elif kind == "Strip" and fused and not step.get("stop"):
            pass  # strips the first space of the whole text: see the docstring
        else:
            raise ValueError("structured outputs need a byte-level BPE or SentencePiece tokenizer; this model's "
                             f"decoder is {kind}")

    def sentencepiece(text: str) -> bytes | None:
        if byte_fallback and (m := _BYTE_FALLBACK.fullmatch(text)):
            return bytes([int(m.group(1), 16)])
        for old, new in replaces:
            text = text.replace(old, new)
        return text.encode("utf-8")

    return sentencepiece


class _Trie:
    """A byte trie of the vocabulary: node 0 is the root; ``children[n]`` maps a byte to a node and
    ``token_ids[n]`` lists the tokens whose bytes end at ``n``."""

    __slots__ = ("children", "num_closers", "token_ids")

    def __init__(self, token_bytes: Sequence[bytes | None]) -> None:
        self.children: list[dict[int, int]] = [{}]
        self.token_ids: list[list[int]] = [[]]
        closers = 0
        for token_id, data in enumerate(token_bytes):
            if not data:
                continue  # special, unused, or empty (an empty token would let the output stall forever)
            node = 0
            for byte in data:
                nxt = self.children[node].get(byte)
                if nxt is None:
                    nxt = self.children[node][byte] = len(self.children)
                    self.children.append({})
                    self.token_ids.append([])
                node = nxt
            self.token_ids[node].append(token_id)
            closers = max(closers, sum(data.count(c) for c in b"{}[]"))
        # most brackets in one token: how deep into a JSON stack one token can reach (see _JsonObject.mask_key)
        self.num_closers = closers


class TokenVocabulary:
    """Each token id's bytes as the engine's detokenizer would print them (None: a special/unused id, never
    allowed). Built once per engine; immutable."""

    def __init__(self, token_bytes: Sequence[bytes | None], eos_token_ids: Collection[int]) -> None:
        self.size = len(token_bytes)
        self.eos_token_ids = frozenset(int(i) for i in eos_token_ids)
        if not self.eos_token_ids or not all(0 <= i < self.size for i in self.eos_token_ids):
            raise ValueError(f"eos_token_ids {sorted(self.eos_token_ids)} must be non-empty ids below {self.size}")
        self.token_bytes: tuple[bytes | None, ...] = tuple(
            None if i in self.eos_token_ids else b for i, b in enumerate(token_bytes))
        self._trie: _Trie | None = None
        self._level_trie: LevelTrie | None = None

    @property
    def trie(self) -> _Trie:
        if self._trie is None:
            self._trie = _Trie(self.token_bytes)
        return self._trie

    @property
    def level_trie(self) -> LevelTrie:
        """The trie as arrays per depth (what a mask walk reads)."""
        if self._level_trie is None:
            trie = self.trie
            self._level_trie = LevelTrie(trie.children, trie.token_ids, self.size)
        return self._level_trie

    @classmethod
    def from_tokenizer(cls, tokenizer: Any, vocab_size: int, eos_token_ids: Collection[int]) -> TokenVocabulary:
        """Read token bytes from a Hugging Face fast tokenizer's decoder. ``vocab_size`` is the model's (ids at or
        past the tokenizer's length have no text). Raises ValueError for a decoder it cannot read exactly."""
        from accelkit.serve.detokenizer import _fast_backend

        fast = _fast_backend(tokenizer)
        if fast is None:
            raise ValueError("structured outputs need a Hugging Face fast tokenizer that decodes with its "
                             f"tokenizers backend; this model's is {type(tokenizer).__name__}")
        backend, clean_up = fast
        if clean_up:
            raise ValueError("structured outputs cannot follow this tokenizer's clean_up_tokenization_spaces "
                             "(it rewrites spaces between tokens); it must be off")
        data = json.loads(backend.to_str())
        to_bytes = _token_text_to_bytes(_decoder_steps(data.get("decoder")))
        token_bytes: list[bytes | None] = [None] * vocab_size
        for text, token_id in backend.get_vocab(with_added_tokens=False).items():
            if token_id < vocab_size:
                token_bytes[token_id] = to_bytes(text)
        special = {int(i) for i in getattr(tokenizer, "all_special_ids", [])}
        for added in data.get("added_tokens", []):
            token_id = int(added["id"])
            if token_id >= vocab_size:
                continue
            if added.get("special") or token_id in special:
                token_bytes[token_id] = None
            else:  # added tokens decode as their content, past the decoder's byte mapping; ask the decoder
                text = backend.decode([token_id], skip_special_tokens=False)
                token_bytes[token_id] = None if "\ufffd" in text else text.encode("utf-8")
        for token_id in special:
            if 0 <= token_id < vocab_size:
                token_bytes[token_id] = None
        return cls(token_bytes, eos_token_ids)


# ------------------------------------------------------------------------------------------ character automata

class CharAutomaton(Protocol):
    """A character-level automaton; states are small hashable values, ``None`` is the dead state."""

    def start(self) -> Hashable: ...

    def step(self, state: Any, char: str) -> Hashable | None:
        """The state after ``char``; None when no completion is possible any more."""

    def accepting(self, state: Any) -> bool: ...

    def can_step_in(self, state: Any, lo: int, hi: int) -> bool:
        """Whether some character with a code point in ``lo..hi`` (all valid, all >= 0x80) keeps it alive:
        decides a token that ends inside a multi-byte character."""

    def mask_key(self, state: Any, num_closers: int) -> Hashable:
        """A key under which states with the same token mask share it (the state itself is always right)."""


class _RegexAutomaton:
    """An ``interegular`` DFA restricted to its live states (those from which a final state is reachable)."""

    def __init__(self, fsm: Any) -> None:
        from interegular.fsm import anything_else

        mapping = dict(fsm.alphabet._symbol_mapping)  # char → symbol
        self._other = mapping.pop(anything_else, None)
        self._symbol = mapping
        self._chars = sorted(ord(c) for c in mapping)
        reverse: dict[Any, set[Any]] = {}
        for src, row in fsm.map.items():
            for dst in row.values():
                reverse.setdefault(dst, set()).add(src)
        live, todo = set(fsm.finals), list(fsm.finals)
        while todo:
            for src in reverse.get(todo.pop(), ()):
                if src not in live:
                    live.add(src)
                    todo.append(src)
        self._map = {s: {sym: d for sym, d in row.items() if d in live} for s, row in fsm.map.items() if s in live}
        self._initial = fsm.initial if fsm.initial in live else None
        self._finals = frozenset(fsm.finals)
        self._step_in: dict[tuple[Any, int, int], bool] = {}

    def start(self) -> Hashable:
        return self._initial

    def step(self, state: Any, char: str) -> Hashable | None:
        sym = self._symbol.get(char, self._other)
        return self._map[state].get(sym)

    def accepting(self, state: Any) -> bool:
        return state in self._finals

    def can_step_in(self, state: Any, lo: int, hi: int) -> bool:
        key = (state, lo, hi)
        cached = self._step_in.get(key)
        if cached is None:
            import bisect

            row = self._map[state]
            first, last = bisect.bisect_left(self._chars, lo), bisect.bisect_right(self._chars, hi)
            named = self._chars[first:last]
            cached = any(self._symbol[chr(c)] in row for c in named) or (
                len(named) < hi - lo + 1 and self._other in row)
            self._step_in[key] = cached
        return cached

    def mask_key(self, state: Any, num_closers: int) -> Hashable:
        key: Hashable = state
        return key


# json_object's modes; a state is (mode, stack, whitespace run, sub), stack a str of "o" (object) / "a" (array)
_TOP, _OBJ_FIRST, _OBJ_KEY, _COLON, _VALUE, _ARR_FIRST, _AFTER, _STR, _ESC, _HEX, _NUM, _LIT, _DONE = range(13)
_WS_MODES = frozenset({_OBJ_FIRST, _OBJ_KEY, _COLON, _VALUE, _ARR_FIRST, _AFTER})
_HEX_DIGITS = frozenset("0123456789abcdefABCDEF")
_ESCAPES = frozenset('"\\/bfnrt')
_DIGITS = frozenset("0123456789")
# number phases: after "-", after a leading 0, in the integer part, after ".", in the fraction, after "e",
# after the exponent's sign, in the exponent; the ones a number may end in:
_N_MINUS, _N_ZERO, _N_INT, _N_DOT, _N_FRAC, _N_E, _N_ESIGN, _N_EXP = range(8)
_N_END = frozenset({_N_ZERO, _N_INT, _N_FRAC, _N_EXP})

JsonState = tuple[int, str, int, Any]


class _JsonObject:
    """A pushdown automaton for one JSON object (RFC 8259) nested at most :data:`MAX_JSON_DEPTH` deep, with
    bounded whitespace between tokens. Strings may not contain escapes of lone surrogates (\\uD800-\\uDFFF)."""

    def start(self) -> Hashable:
        return (_TOP, "", 0, None)

    def accepting(self, state: Any) -> bool:
        return bool(state[0] == _DONE)

    def can_step_in(self, state: Any, lo: int, hi: int) -> bool:
        return bool(state[0] == _STR)  # any character >= U+0080 may appear raw in a string, nowhere else

    def mask_key(self, state: Any, num_closers: int) -> Hashable:
        # one token pops at most num_closers levels and then reads the level below, or pushes that many: its fate
        # depends on the top num_closers + 1 levels, whether more lie below, and the depth only near the limit
        mode, stack, ws, sub = state
        reach = num_closers + 1
        depth = len(stack)
        near_limit = depth >= MAX_JSON_DEPTH - reach
        return (mode, ws, sub, stack[-reach:], depth > reach, depth if near_limit else None)

    @staticmethod
    def _after_value(stack: str) -> JsonState:
        return (_AFTER, stack, 0, None) if stack else (_DONE, "", 0, None)

    def _value(self, stack: str, c: str) -> JsonState | None:
        if c == "{" or c == "[":
            if len(stack) >= MAX_JSON_DEPTH:
                return None
            return (_OBJ_FIRST, stack + "o", 0, None) if c == "{" else (_ARR_FIRST, stack + "a", 0, None)
        if c == '"':
            return (_STR, stack, 0, False)
        if c == "-":
            return (_NUM, stack, 0, _N_MINUS)
        if c in _DIGITS:
            return (_NUM, stack, 0, _N_ZERO if c == "0" else _N_INT)
        for literal in ("true", "false", "null"):
            if c == literal[0]:
                return (_LIT, stack, 0, literal[1:])
        return None

    def step(self, state: Any, c: str) -> Hashable | None:
        mode, stack, ws, sub = state
        if mode == _STR:
            if c == '"':
                return (_COLON, stack, 0, None) if sub else self._after_value(stack)
            if c == "\\":
                return (_ESC, stack, 0, sub)
            return None if c < " " else state
        if mode == _ESC:
            if c in _ESCAPES:
                return (_STR, stack, 0, sub)
            return (_HEX, stack, 0, (sub, 0, False)) if c == "u" else None
        if mode == _HEX:
            is_key, index, after_d = sub
            if c not in _HEX_DIGITS or (after_d and c not in "01234567"):
                return None  # \uD800-\uDFFF: a surrogate
            if index == 3:
                return (_STR, stack, 0, is_key)
            return (_HEX, stack, 0, (is_key, index + 1, index == 0 and c in "dD"))
        if mode == _NUM:
            nxt = _number_step(sub, c)
            if nxt is not None:
                return (_NUM, stack, 0, nxt)
            return self.step(self._after_value(stack), c) if sub in _N_END else None
        if mode == _LIT:
            if c != sub[0]:
                return None
            return (_LIT, stack, 0, sub[1:]) if len(sub) > 1 else self._after_value(stack)
        if mode in _WS_MODES and c in JSON_WHITESPACE:
            return (mode, stack, ws + 1, sub) if ws < MAX_JSON_WHITESPACE else None
        if mode == _TOP:
            return (_OBJ_FIRST, "o", 0, None) if c == "{" else None
        if mode in (_OBJ_FIRST, _OBJ_KEY):
            if c == '"':
                return (_STR, stack, 0, True)
            return self._after_value(stack[:-1]) if mode == _OBJ_FIRST and c == "}" else None
        if mode == _COLON:
            return (_VALUE, stack, 0, None) if c == ":" else None
        if mode == _VALUE:
            return self._value(stack, c)
        if mode == _ARR_FIRST:
            return self._after_value(stack[:-1]) if c == "]" else self._value(stack, c)
        if mode == _AFTER:
            top = stack[-1]
            if c == ",":
                return (_OBJ_KEY, stack, 0, None) if top == "o" else (_VALUE, stack, 0, None)
            if c == ("}" if top == "o" else "]"):
                return self._after_value(stack[:-1])
        return None


def _number_step(phase: int, c: str) -> int | None:
    """JSON's number grammar ``-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?``, one character at a time."""
    digit = c in _DIGITS
    if phase == _N_MINUS:
        return (_N_ZERO if c == "0" else _N_INT) if digit else None
    if phase in (_N_ZERO, _N_INT):
        if digit:
            return _N_INT if phase == _N_INT else None
        return _N_DOT if c == "." else _N_E if c in "eE" else None
    if phase in (_N_DOT, _N_FRAC):
        if digit:
            return _N_FRAC
        return _N_E if phase == _N_FRAC and c in "eE" else None
    if phase in (_N_E, _N_ESIGN):
        if digit:
            return _N_EXP
        return _N_ESIGN if phase == _N_E and c in "+-" else None
    return _N_EXP if digit else None  # _N_EXP


# --------------------------------------------------------------------------------------------- the guide

def _utf8_prefix(prefix: bytes) -> tuple[int, int, int] | None:
    """For the leading bytes of one UTF-8 character: (its total length, lowest and highest code point it can
    still become); None if no valid character (no overlong form, no surrogate, <= U+10FFFF) starts so."""
    lead = prefix[0]
    if lead < 0x80:
        return (1, lead, lead) if len(prefix) == 1 else None
    if 0xC2 <= lead <= 0xDF:
        length = 2
    elif 0xE0 <= lead <= 0xEF:
        length = 3
    elif 0xF0 <= lead <= 0xF4:
        length = 4
    else:
        return None
    second = {0xE0: (0xA0, 0xBF), 0xED: (0x80, 0x9F), 0xF0: (0x90, 0xBF), 0xF4: (0x80, 0x8F)}.get(lead, (0x80, 0xBF))
    for i, byte in enumerate(prefix[1:], start=1):
        low, high = second if i == 1 else (0x80, 0xBF)
        if not low <= byte <= high or i >= length:
            return None
    rest = length - len(prefix)
    if rest == 0:
        code = ord(prefix.decode("utf-8"))
        return length, code, code
    lows = [second[0] if len(prefix) == 1 else 0x80] + [0x80] * (rest - 1)
    highs = [second[1] if len(prefix) == 1 else 0xBF] + [0xBF] * (rest - 1)
    return length, ord((prefix + bytes(lows)).decode("utf-8")), ord((prefix + bytes(highs)).decode("utf-8"))


GuideState = tuple[Hashable, bytes]


class Guide:
    """One compiled constraint, shared by all requests with the same spec. A state is ``(automaton state, bytes of
    an unfinished UTF-8 character)``. Not locked: only the engine thread calls it (the GIL is enough)."""

    def __init__(self, automaton: CharAutomaton, vocab: TokenVocabulary) -> None:
        self.automaton = automaton
        self.vocab = vocab
        self._eos = sorted(vocab.eos_token_ids)
        self._masks: OrderedDict[Hashable, torch.Tensor] = OrderedDict()
        self.max_cached_masks = max(8, MAX_MASK_CACHE_BYTES // max(vocab.size, 1))
        self._reset_memo()

    def _reset_memo(self) -> None:
        # byte-level states interned to ints, and their byte transitions in one table: read by the vectorised mask
        # walk and by advance, filled by _transition the first time a (state, byte) pair is met
        self._ids: dict[GuideState, int] = {}
        self._states: list[GuideState] = []
        self._table = TransitionTable()

    def _intern(self, state: GuideState) -> int:
        sid = self._ids.get(state)
        if sid is None:
            sid = self._ids[state] = len(self._states)
            self._states.append(state)
            self._table.ensure(len(self._states))
        return sid

    def _transition(self, sid: int, byte: int) -> int:
        """The table's entry for (state ``sid``, ``byte``): the next state's id or :data:`DEAD`, asked of the
        automaton the first time."""
        to = int(self._table.table[sid, byte])
        if to == UNKNOWN:
            nxt = self._step_byte(sid, byte)
            to = self._table.table[sid, byte] = DEAD if nxt is None else nxt
        return to

    def _step_byte(self, sid: int, byte: int) -> int | None:
        cstate, pending = self._states[sid]
        automaton = self.automaton
        if not pending and byte < 0x80:
            nxt = automaton.step(cstate, chr(byte))
            out = None if nxt is None else self._intern((nxt, b""))
        else:
            prefix = pending + bytes((byte,))
            info = _utf8_prefix(prefix)
            if info is None:
                out = None
            elif info[0] == len(prefix):
                nxt = automaton.step(cstate, prefix.decode("utf-8"))
                out = None if nxt is None else self._intern((nxt, b""))
            else:
                out = self._intern((cstate, prefix)) if automaton.can_step_in(cstate, info[1], info[2]) else None
        return out

    def start(self) -> GuideState:
        return (self.automaton.start(), b"")

    def accepting(self, state: GuideState) -> bool:
        """The text so far is a complete match (EOS allowed)."""
        return not state[1] and self.automaton.accepting(state[0])

    def advance(self, state: GuideState, token_id: int) -> GuideState:
        """The state after ``token_id``; ValueError if the token is not allowed there. EOS is allowed where
        :meth:`allowed` allows it: where the text is accepting, or (the fallback) where nothing else is."""
        if token_id in self.vocab.eos_token_ids:
            if not self.allowed(state)[token_id]:
                raise ValueError(f"EOS token {token_id} is not allowed: the output is not complete yet")
            return state
        data = self.vocab.token_bytes[token_id] if 0 <= token_id < self.vocab.size else None
        if not data:
            raise ValueError(f"token {token_id} has no text and is never allowed under structured outputs")
        if len(self._states) > _MAX_INTERNED_STATES:
            self._reset_memo()
        sid = self._intern(state)
        for byte in data:
            sid = self._transition(sid, byte)
            if sid == DEAD:
                raise ValueError(f"token {token_id} ({data!r}) is not allowed here")
        return self._states[sid]

    def mask_key(self, state: GuideState) -> Hashable:
        """Equal for two states whose :meth:`allowed` masks are equal (what a cache of masks is keyed by)."""
        return (self.automaton.mask_key(state[0], self.vocab.trie.num_closers), state[1])

    def allowed(self, state: GuideState) -> torch.Tensor:
        """``(vocab.size,)`` torch.bool on the CPU, True = allowed; EOS ids True iff :meth:`accepting` — or, when
        no token is allowed, EOS only (the request ends rather than stalls). Cached (LRU): do not modify it."""
        key = self.mask_key(state)
        mask = self._masks.get(key)
        if mask is not None:
            self._masks.move_to_end(key)
            return mask
        import torch

        allowed = self._walk(state)
        mask = torch.from_numpy(allowed)
        if not allowed.any() or self.accepting(state):
            mask[self._eos] = True
        self._masks[key] = mask
        if len(self._masks) > self.max_cached_masks:
            self._masks.popitem(last=False)
        return mask

    def _walk(self, state: GuideState) -> np.ndarray:
        """``(vocab.size,)`` bool: the tokens the byte-level automaton takes whole from ``state`` (all of the
        vocabulary at once, level by level: ``structured_walk``)."""
        if len(self._states) > _MAX_INTERNED_STATES:
            self._reset_memo()
        return allowed_tokens(self.vocab.level_trie, self._table, self._intern(state), self._transition)


# ------------------------------------------------------------------------------------------------ compiling

class GuideCompiler:
    """Compiles :class:`StructuredOutputs` into :class:`Guide` s over one vocabulary, LRU-cached by spec. Any
    thread: the cache is under a lock, a compile runs outside it (two threads missing the same spec at once both
    compile it; one result is kept)."""

    def __init__(self, vocab: TokenVocabulary, *, max_guides: int = 64) -> None:
        if max_guides < 1:
            raise ValueError(f"max_guides={max_guides} must be at least 1")
        self.vocab = vocab
        self.max_guides = max_guides
        self._guides: OrderedDict[StructuredOutputs, Guide] = OrderedDict()
        self._lock = threading.Lock()

    def compile(self, spec: StructuredOutputs) -> Guide:
        """The guide for ``spec``; ValueError with one line naming the field (``structured_outputs.regex: ...``)."""
        with self._lock:
            guide = self._guides.get(spec)
            if guide is not None:
                self._guides.move_to_end(spec)
                return guide
        guide = self._compile(spec)
        with self._lock:
            guide = self._guides.setdefault(spec, guide)
            self._guides.move_to_end(spec)
            if len(self._guides) > self.max_guides:
                self._guides.popitem(last=False)
        return guide

    def _compile(self, spec: StructuredOutputs) -> Guide:
        kind = spec.kind
        try:
            automaton: CharAutomaton
            if kind == "json_object":
                automaton = _JsonObject()
            else:
                if kind == "choice":
                    assert spec.choice is not None
                    pattern = "|".join(escape_literal(c) for c in spec.choice)
                elif kind == "regex":
                    assert spec.regex is not None
                    pattern = strip_anchors(spec.regex)
                else:
                    assert spec.json is not None
                    pattern = schema_to_regex(json.loads(spec.json))
                automaton = _RegexAutomaton(regex_fsm(pattern))
                if automaton.start() is None:
                    raise ValueError("no text matches it")
        except ValueError as exc:
            raise ValueError(f"structured_outputs.{kind}: {exc}") from None
        return Guide(automaton, self.vocab)
