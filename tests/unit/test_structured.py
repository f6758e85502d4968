"""Structured outputs' token-level core: token bytes read from real tokenizers (built in-process), masks from the
byte-trie walk checked against brute force, and random walks through allowed tokens that must end in text the
constraint accepts (decoded with the tokenizer's own ``decode``)."""

from __future__ import annotations

import datetime
import functools
import itertools
import json
import random
import re
import uuid

import interegular
import jsonschema
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.serve.sampling import StructuredOutputs
from accelkit.serve.structured import (
    MAX_JSON_DEPTH,
    MAX_JSON_WHITESPACE,
    Guide,
    GuideCompiler,
    TokenVocabulary,
    schema_to_regex,
)
from accelkit.serve.testing import SPECIAL_TOKENS, _structured_corpus, build_bytelevel_tokenizer, build_tokenizer

EOS = 2
VOCAB_SIZE = 520  # the model's: a few ids past the tokenizer's 512 have no text


@functools.cache
def bytelevel() -> tuple[object, TokenVocabulary]:
    tok = build_bytelevel_tokenizer(512)
    return tok, TokenVocabulary.from_tokenizer(tok, VOCAB_SIZE, [EOS])


@functools.cache
def compiler() -> GuideCompiler:
    return GuideCompiler(bytelevel()[1])


def build_sentencepiece_tokenizer(style: str = "llama2") -> object:
    """A SentencePiece-style BPE with byte fallback (Llama 2's layout: specials 0..3, ``<0x00>``..``<0xFF>`` next,
    then merges). ``llama2``: normalizer prepends/replaces ``▁`` and the decoder is Replace+ByteFallback+Fuse+Strip;
    ``metaspace``: a Metaspace pre-tokenizer and decoder."""
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    trained = Tokenizer(models.BPE())
    trained.pre_tokenizer = pre_tokenizers.Metaspace()
    trained.train_from_iterator(_structured_corpus(), trainers.BpeTrainer(vocab_size=400, show_progress=False))
    model = json.loads(trained.to_str())["model"]
    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS)}
    vocab.update({f"<0x{b:02X}>": len(SPECIAL_TOKENS) + b for b in range(256)})
    for token in sorted(model["vocab"], key=model["vocab"].get):
        vocab.setdefault(token, len(vocab))
    merges = [tuple(m.split(" ")) if isinstance(m, str) else tuple(m) for m in model["merges"]]
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges, byte_fallback=True, unk_token="<unk>"))
    if style == "llama2":
        tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
        tok.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    else:
        tok.pre_tokenizer = pre_tokenizers.Metaspace()
        tok.decoder = decoders.Metaspace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")


TEXTS = ['{"name": "Zoë", "age": 42}', "中文 café naïve", "ß€🙂 \t\n x", '{"a": [1, 2.5e-3, true, null]}', "  two"]


# ------------------------------------------------------------------------------------------------ token bytes

@pytest.mark.parametrize("kind", ["bytelevel", "llama2", "metaspace"])
def test_token_bytes_concatenate_to_what_decode_prints(kind: str) -> None:
    tok = bytelevel()[0] if kind == "bytelevel" else build_sentencepiece_tokenizer(kind)
    vocab = TokenVocabulary.from_tokenizer(tok, len(tok) + 3, [EOS])
    assert vocab.size == len(tok) + 3 and vocab.token_bytes[-1] is None
    assert all(vocab.token_bytes[i] is None for i in range(len(SPECIAL_TOKENS)))
    fallback = vocab.token_bytes[len(SPECIAL_TOKENS) + 0xE4]
    if kind == "llama2":  # with a ByteFallback decoder, byte-fallback tokens are the byte itself
        assert fallback == b"\xe4"
    elif kind == "metaspace":  # a bare Metaspace decoder prints them as they are spelled
        assert fallback == b"<0xE4>"
    rng = random.Random(0)
    sequences = [tok.encode(t, add_special_tokens=False) for t in TEXTS + _structured_corpus(20, seed=1)]
    sequences += [[rng.randrange(len(SPECIAL_TOKENS), len(tok)) for _ in range(rng.randint(1, 12))] for _ in range(300)]
    checked = 0
    for ids in sequences:
        data = b"".join(vocab.token_bytes[i] or b"" for i in ids)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            continue  # the decoder's replacement of broken bytes is not what guides produce
        if kind != "bytelevel" and text.startswith(" "):
            text = text[1:]  # the decoder strips the first space of the whole text (the engine decodes mid-text)
        assert tok.decode(ids) == text, ids
        checked += 1
    assert checked > 60


def test_token_bytes_split_multibyte_characters() -> None:
    _, vocab = bytelevel()
    partial = [b for b in vocab.token_bytes if b and not _valid_utf8(b)]
    assert partial, "the test tokenizer should have tokens that end (or start) inside a character"


def _valid_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def test_an_unsupported_decoder_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"^structured outputs need a byte-level BPE or SentencePiece tokenizer; "
                                         r"this model's decoder is WordPiece$"):
        TokenVocabulary.from_tokenizer(build_tokenizer(64), 64, [EOS])


# ----------------------------------------------------------------------------------------------- random walks

def walk_schema(schema: object, seed: int, random_steps: int) -> str:
    """The text of a finished :func:`walk` through ``schema``'s guide."""
    tok, _ = bytelevel()
    guide = compiler().compile(StructuredOutputs(json=json.dumps(schema)))
    ids, done = walk(guide, seed, random_steps=random_steps)
    assert done
    return str(tok.decode(ids))


def walk(guide: Guide, seed: int, *, random_steps: int) -> tuple[list[int], bool]:
    """Random allowed tokens (EOS now and then where allowed) for up to ``random_steps`` steps, then the shortest
    completion by single-byte tokens (breadth-first over guide states): it must exist from every state a walk
    reaches, since masks promise that an allowed token leaves a completion possible."""
    tok, vocab = bytelevel()
    rng = random.Random(seed)
    state, ids = guide.start(), []
    for _ in range(random_steps):
        mask = guide.allowed(state)
        assert mask.dtype == torch.bool and mask.shape == (vocab.size,)
        allowed = mask.nonzero().flatten().tolist()
        assert bool(mask[EOS]) == (guide.accepting(state) or allowed == [EOS])
        if allowed == [EOS]:
            break
        if guide.accepting(state) and rng.random() < 0.2:
            return ids, True
        pick = rng.choice([i for i in allowed if i != EOS])
        ids.append(pick)
        state = guide.advance(state, pick)
        hash(state)
    completion = shortest_completion(guide, state)
    assert completion is not None, f"no completion after {tok.decode(ids)!r}"
    return ids + completion, True


@functools.cache
def _char_tokens() -> tuple[frozenset[int], frozenset[int]]:
    """(tokens that are one whole character, tokens of one byte): a search over whole characters visits few
    states; single bytes are for finishing a character a random token left open."""
    _, vocab = bytelevel()
    chars = frozenset(i for i, b in enumerate(vocab.token_bytes) if b and _valid_utf8(b) and len(b.decode()) == 1)
    singles = frozenset(i for i, b in enumerate(vocab.token_bytes) if b and len(b) == 1)
    return chars, singles


def shortest_completion(guide: Guide, state: object, max_states: int = 20_000) -> list[int] | None:
    chars, singles = _char_tokens()
    paths: dict[object, list[int]] = {state: []}
    todo = [state]
    while todo and len(paths) < max_states:
        current = todo.pop(0)
        if guide.accepting(current):  # type: ignore[arg-type]
            return paths[current]
        steps = singles if current[1] else chars  # type: ignore[index]
        for i in guide.allowed(current).nonzero().flatten().tolist():  # type: ignore[arg-type]
            if i in steps:
                nxt = guide.advance(current, i)  # type: ignore[arg-type]
                if nxt not in paths:
                    paths[nxt] = [*paths[current], i]
                    todo.append(nxt)
    return None


REGEXES = [r"\d{3}-[a-z]+", r"(yes|no)!?", r"[A-Z][a-zé中]{0,5}( [0-9]+)?", r"^-?(0|[1-9][0-9]*)(\.[0-9]+)?$",
           r'"[^"]*"', r"(ab|a)*c", r"x[\s\S]{2}y", r"[^a-z\n]{1,4}"]


@settings(max_examples=40, deadline=None)
@given(index=st.integers(0, len(REGEXES) - 1), seed=st.integers(0, 2**32 - 1), random_steps=st.integers(0, 12))
def test_regex_walks_end_in_full_matches(index: int, seed: int, random_steps: int) -> None:
    tok, _ = bytelevel()
    guide = compiler().compile(StructuredOutputs(regex=REGEXES[index]))
    ids, done = walk(guide, seed, random_steps=random_steps)
    assert done
    assert re.fullmatch(REGEXES[index], tok.decode(ids)), tok.decode(ids)


@settings(max_examples=25, deadline=None)
@given(choices=st.lists(st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=8),
                        min_size=1, max_size=5, unique=True),
       seed=st.integers(0, 2**32 - 1))
def test_choice_walks_end_in_one_of_the_choices(choices: list[str], seed: int) -> None:
    tok, _ = bytelevel()
    guide = compiler().compile(StructuredOutputs(choice=tuple(choices)))
    ids, done = walk(guide, seed, random_steps=30)
    assert done
    assert tok.decode(ids) in choices


def test_a_finished_choice_allows_only_eos() -> None:
    tok, _ = bytelevel()
    guide = compiler().compile(StructuredOutputs(choice=("yes",)))
    state = guide.start()
    for i in tok.encode("yes", add_special_tokens=False):
        assert guide.allowed(state)[EOS].item() is False
        with pytest.raises(ValueError, match="EOS token 2 is not allowed"):
            guide.advance(state, EOS)
        state = guide.advance(state, i)
    assert guide.allowed(state).nonzero().flatten().tolist() == [EOS]
    assert guide.advance(state, EOS) == state
    with pytest.raises(ValueError, match="is not allowed here"):
        guide.advance(state, tok.encode("s", add_special_tokens=False)[0])
    with pytest.raises(ValueError, match="never allowed"):
        guide.advance(state, VOCAB_SIZE - 1)  # past the tokenizer: no text


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), random_steps=st.integers(0, 60))
def test_json_object_walks_end_in_json_objects(seed: int, random_steps: int) -> None:
    tok, _ = bytelevel()
    guide = compiler().compile(StructuredOutputs(json_object=True))
    ids, done = walk(guide, seed, random_steps=random_steps)
    assert done
    text = tok.decode(ids)
    assert isinstance(json.loads(text), dict), text
    assert not re.search(rf"\s{{{MAX_JSON_WHITESPACE + 1}}}", _outside_strings(text))


def _outside_strings(text: str) -> str:
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', text)


def test_json_object_bounds_depth_and_whitespace() -> None:
    guide = compiler().compile(StructuredOutputs(json_object=True))
    _, vocab = bytelevel()
    ids = {b: i for i, b in enumerate(vocab.token_bytes) if b in (b"{", b"[", b'"', b"a", b":", b" ", b"}")}
    state = guide.start()
    for token in [b"{", b'"', b"a", b'"', b":"]:
        state = guide.advance(state, ids[token])
    for _ in range(MAX_JSON_DEPTH - 1):
        state = guide.advance(state, ids[b"["])
    mask = guide.allowed(state)
    assert not mask[ids[b"["]] and not mask[ids[b"{"]] and mask[ids[b'"']]
    for _ in range(MAX_JSON_WHITESPACE):
        state = guide.advance(state, ids[b" "])
    assert not guide.allowed(state)[ids[b" "]]
    # a lone surrogate escape would make a string no UTF-8 text can hold
    for text, ok in [('"\\ud7ff"', True), ('"\\uD800"', False), ('"\\udfff"', False), ('"\\u00e9"', True)]:
        s = guide.advance(guide.start(), ids[b"{"])
        try:
            for byte in text.encode():
                s = guide.advance(s, vocab.token_bytes.index(bytes([byte])))
        except ValueError:
            assert not ok, text
        else:
            assert ok, text


SCHEMAS = [
    {"type": "object", "properties": {"name": {"type": "string", "maxLength": 6}, "age": {"type": "integer"},
                                      "score": {"type": "number"}}, "required": ["name", "age"]},
    {"type": "object", "properties": {"tags": {"type": "array", "items": {"type": "string", "minLength": 1},
                                               "minItems": 1, "maxItems": 3},
                                      "ok": {"type": "boolean"}, "note": {"type": ["string", "null"]}}},
    {"type": "object", "properties": {"when": {"type": "string", "format": "date-time"},
                                      "day": {"type": "string", "format": "date"},
                                      "at": {"type": "string", "format": "time"},
                                      "id": {"type": "string", "format": "uuid"}},
     "required": ["when", "day", "at", "id"]},
    {"$defs": {"pt": {"type": "object", "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
                      "required": ["x", "y"], "additionalProperties": False}},
     "type": "object", "properties": {"kind": {"enum": ["a", "b", 3, None]}, "c": {"const": "fixed"},
                                      "p": {"$ref": "#/$defs/pt"},
                                      "u": {"anyOf": [{"type": "integer"}, {"$ref": "#/$defs/pt"}]},
                                      "code": {"type": "string", "pattern": "^[A-Z]{2}-\\d{2}$"},
                                      "any": {}},
     "required": ["kind", "p", "u", "code"], "title": "ignored", "description": "ignored"},
    {"type": "array", "items": {"oneOf": [{"type": "null"}, {"type": "string", "pattern": "é."}]}, "maxItems": 2},
    {},
    {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a.c$"}, "t": {"pattern": "[^x]\\S"}},
     "required": ["s", "t"]},  # "." / "[^x]" / "\S" narrowed to characters a JSON string holds raw
    {"allOf": [{"type": "object", "properties": {"v": {"type": "number"}}, "required": ["v"]}]},
]


def _check_formats(value: object, schema: dict[str, object]) -> None:
    """jsonschema leaves time and date-time unchecked without extra packages; check the formats here."""
    if isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():  # type: ignore[attr-defined]
            if key in value and isinstance(sub, dict) and "format" in sub:
                text = value[key]
                if sub["format"] == "date-time":
                    datetime.datetime.fromisoformat(text.replace("Z", "+00:00"))
                elif sub["format"] == "date":
                    datetime.date.fromisoformat(text)
                elif sub["format"] == "time":
                    datetime.time.fromisoformat(text.replace("Z", "+00:00"))
                else:
                    uuid.UUID(text)


@settings(max_examples=60, deadline=None)
@given(index=st.integers(0, len(SCHEMAS) - 1), seed=st.integers(0, 2**32 - 1), random_steps=st.integers(0, 30))
def test_json_schema_walks_end_in_valid_documents(index: int, seed: int, random_steps: int) -> None:
    schema = SCHEMAS[index]
    value = json.loads(walk_schema(schema, seed, random_steps))
    validator = jsonschema.Draft202012Validator
    validator(schema, format_checker=validator.FORMAT_CHECKER).validate(value)
    _check_formats(value, schema)
    if isinstance(value, dict) and "properties" in schema:
        order = list(schema["properties"])  # type: ignore[arg-type]
        assert list(value) == sorted(value, key=order.index)


# ------------------------------------------------------------------------------------------------ exact masks

def _brute_force(guide: Guide, state: object) -> torch.Tensor:
    """Every id tried with advance, one at a time."""
    _, vocab = bytelevel()
    mask = torch.zeros(vocab.size, dtype=torch.bool)
    for i in range(vocab.size):
        if i in vocab.eos_token_ids:
            continue
        try:
            guide.advance(state, i)  # type: ignore[arg-type]
        except ValueError:
            continue
        mask[i] = True
    if not mask.any() or guide.accepting(state):  # type: ignore[arg-type]
        mask[EOS] = True
    return mask


def _live_prefix(fsm: object, text: str) -> bool:
    """Some completion of ``text`` matches: the FSM's state after it can still reach a final state."""
    state = fsm.initial  # type: ignore[attr-defined]
    for char in text:
        symbol = fsm.alphabet[char]  # type: ignore[attr-defined]
        if state not in fsm.map or symbol not in fsm.map[state]:  # type: ignore[attr-defined]
            return False
        state = fsm.map[state][symbol]  # type: ignore[attr-defined]
    seen, todo = {state}, [state]
    while todo:
        s = todo.pop()
        if s in fsm.finals:  # type: ignore[attr-defined]
            return True
        for nxt in fsm.map.get(s, {}).values():  # type: ignore[attr-defined]
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return False


def _oracle(fsm: object, data: bytes) -> bool:
    """Whether the bytes so far can still become a match: a finished text is checked directly; one that ends
    inside a character, for each character it can still become that the FSM names, and for one it does not
    (all those behave alike: interegular's anything_else)."""
    for cut in range(4):
        head, tail = data[: len(data) - cut], data[len(data) - cut :]
        if not _valid_utf8(head) or (tail and not 0xC2 <= tail[0] <= 0xF4):
            continue
        prefix = head.decode()
        if not tail:
            return _live_prefix(fsm, prefix)
        need = 2 if tail[0] < 0xE0 else 3 if tail[0] < 0xF0 else 4
        if len(tail) >= need:
            continue
        named = {c for c in fsm.alphabet if isinstance(c, str)}  # type: ignore[attr-defined]
        candidates = [c for c in named if c.encode().startswith(tail)]
        for rest in itertools.product(range(0x80, 0xC0), repeat=need - len(tail)):
            whole = tail + bytes(rest)
            if _valid_utf8(whole) and whole.decode() not in named:
                candidates.append(whole.decode())
                break
        return any(_live_prefix(fsm, prefix + c) for c in candidates)
    return False


@pytest.mark.parametrize("pattern", [r"[a-c]+x\d{2}", r"(中文|é{1,2})[^x]", r'\{"a": (true|[0-9]+)\}', r"x*"])
def test_regex_masks_equal_brute_force_and_an_independent_oracle(pattern: str) -> None:
    _, vocab = bytelevel()
    guide = compiler().compile(StructuredOutputs(regex=pattern))
    fsm = interegular.parse_pattern(pattern).to_fsm()
    rng = random.Random(0)
    states_checked = 0
    for _ in range(3):
        state, data = guide.start(), b""
        for _ in range(6):
            mask = guide.allowed(state)
            assert torch.equal(mask, _brute_force(guide, state))
            for i in range(vocab.size):
                token = vocab.token_bytes[i]
                if token:
                    assert bool(mask[i]) == _oracle(fsm, data + token), (data, token)
            states_checked += 1
            choices = [i for i in mask.nonzero().flatten().tolist() if i != EOS]
            if not choices:
                break
            pick = rng.choice(choices)
            state, data = guide.advance(state, pick), data + (vocab.token_bytes[pick] or b"")
    assert states_checked >= 6


def test_json_masks_equal_brute_force() -> None:
    rng = random.Random(1)
    for spec in [StructuredOutputs(json_object=True), StructuredOutputs(json=json.dumps(SCHEMAS[0]))]:
        guide = compiler().compile(spec)
        state = guide.start()
        for _ in range(12):
            mask = guide.allowed(state)
            assert torch.equal(mask, _brute_force(guide, state))
            choices = [i for i in mask.nonzero().flatten().tolist() if i != EOS]
            if not choices:
                break
            state = guide.advance(state, rng.choice(choices))


def test_json_object_masks_at_known_places() -> None:
    _, vocab = bytelevel()
    guide = compiler().compile(StructuredOutputs(json_object=True))
    by_bytes = {b: i for i, b in enumerate(vocab.token_bytes) if b}

    def allowed_after(text: str) -> set[bytes]:
        state = guide.start()
        for byte in text.encode():
            state = guide.advance(state, by_bytes[bytes([byte])])
        return {vocab.token_bytes[i] for i in guide.allowed(state).nonzero().flatten().tolist()  # type: ignore[misc]
                if i != EOS}

    start = allowed_after("")
    assert b"{" in start and all(b.startswith(b"{") for b in start) and b"{" + b"{" not in start
    after_brace = allowed_after("{")
    assert b"}" in after_brace and b'"' in after_brace and b"]" not in after_brace and b"1" not in after_brace
    in_array = allowed_after('{"a":[')
    assert {b"]", b"1", b"-", b"[", b"t"} <= in_array and b"}" not in in_array and b"+" not in in_array
    assert b"\xe4" in allowed_after('{"') and b"\xe4" not in allowed_after("{")  # a character split across tokens
    assert allowed_after('{"a":1}') == set()  # done: EOS only


# ------------------------------------------------------------------------------------------------------ errors

@pytest.mark.parametrize(("schema", "message"), [
    ({"type": "object", "properties": {"age": {"type": "integer", "minimum": 1e30}}},
     "minimum=1e+30 (at properties.age) is beyond"),
    ({"type": "array", "uniqueItems": True}, "keyword 'uniqueItems' (at the root) is not supported"),
    ({"type": "object", "patternProperties": {"a": {}}}, "keyword 'patternProperties' (at the root) is not supported"),
    ({"not": {"type": "string"}}, "keyword 'not' (at the root) is not supported"),
    ({"if": {}, "then": {}}, "keyword 'if' (at the root) is not supported"),
    ({"type": "object", "properties": {"a": {}}, "minProperties": 1},
     "minProperties beside properties (at the root) is not supported"),
    ({"type": "string", "format": "email"}, "format 'email' (at the root) is not supported"),
    ({"$defs": {"n": {"type": "array", "items": {"$ref": "#/$defs/n"}}}, "$ref": "#/$defs/n"},
     "$ref '#/$defs/n' (at $defs.n.items) is recursive"),
    ({"$ref": "#/$defs/missing"}, "points at nothing"),
    ({"type": "array", "items": {"anyOf": [{"type": "integer", "multipleOf": 2}]}},
     "keyword 'multipleOf' (at items.anyOf[0]) is not supported"),
    ({"type": "integer", "enum": ["a"]}, "no value of enum/const"),
    ({"type": "string", "pattern": 'a"'}, "can match a"),
    ({"type": "strin"}, "type (at the root) must be one of"),
    ({"type": "array", "maxItems": 1000}, "maxItems=1000 (at the root) is above"),
])
def test_unsupported_schemas_are_refused_by_name(schema: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError) as info:
        compiler().compile(StructuredOutputs(json=json.dumps(schema)))
    text = str(info.value)
    assert text.startswith("structured_outputs.json: ") and "\n" not in text
    assert message in text


@pytest.mark.parametrize(("pattern", "message"), [
    (r"(a)\1", "unsupported construct"),
    (r"(?=a)a", "lookarounds"),
    (r"a(?<!b)", "lookarounds"),
    (r"\bword", "unsupported construct"),
    (r"(unclosed", "not a valid regular expression"),
    (r"[^\s\S]", "no text matches it"),
])
def test_bad_regexes_are_refused(pattern: str, message: str) -> None:
    with pytest.raises(ValueError, match=r"^structured_outputs\.regex: ") as info:
        compiler().compile(StructuredOutputs(regex=pattern))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_regex_anchors_and_unicode_escapes() -> None:
    tok, _ = bytelevel()
    for pattern, text in [(r"^ab$", "ab"), (r"\u00e9\u4e2d", "é中"), (r"a\$", "a$"), (r"\\u0041", "\\u0041")]:
        guide = compiler().compile(StructuredOutputs(regex=pattern))
        state = guide.start()
        for i in tok.encode(text, add_special_tokens=False):
            state = guide.advance(state, i)
        assert guide.accepting(state), (pattern, text)


# --------------------------------------------------------------------------------------------------- compiler

def test_compiler_caches_guides_by_spec_and_evicts_the_oldest() -> None:
    small = GuideCompiler(bytelevel()[1], max_guides=2)
    a = small.compile(StructuredOutputs(regex="a+"))
    assert small.compile(StructuredOutputs(regex="a+")) is a
    small.compile(StructuredOutputs(regex="b+"))
    small.compile(StructuredOutputs(regex="c+"))
    assert small.compile(StructuredOutputs(regex="a+")) is not a
    with pytest.raises(ValueError, match="max_guides=0"):
        GuideCompiler(bytelevel()[1], max_guides=0)


def test_masks_are_cached_per_state() -> None:
    guide = compiler().compile(StructuredOutputs(regex="[0-9]+"))
    assert guide.allowed(guide.start()) is guide.allowed(guide.start())


def test_schema_regex_matches_what_python_accepts() -> None:
    pattern = schema_to_regex(SCHEMAS[0])
    assert re.fullmatch(pattern, '{"name": "Zoë", "age": 3}')
    assert re.fullmatch(pattern, '{\n "name":"x",\n "age":-1, "score":2.5e3}')
    assert not re.fullmatch(pattern, '{"age": 3, "name": "x"}')  # declared order
    assert not re.fullmatch(pattern, '{"name": "x"}')  # age is required
    assert not re.fullmatch(pattern, '{"name": "toolongname", "age": 3}')
    assert not re.fullmatch(pattern, '{"name":   "x", "age": 3}')  # three spaces
