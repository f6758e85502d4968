"""Structured outputs on llguidance, below the engine: masks and matchers over a real byte-level BPE (built
in-process), random walks through allowed tokens that must end in text the constraint accepts (decoded by the
tokenizer itself, checked by ``re``, ``jsonschema`` and pydantic), the hostile specs of issue #28 (each compiles or
is refused, never a crash), and the compiler's limits: time, size, bounded cache, one compile per spec."""

from __future__ import annotations

import asyncio
import datetime
import functools
import json
import os
import random
import re
import sys
import threading
import uuid
from typing import Annotated, Any, Literal

import jsonschema
import pytest
import torch
from openai.lib._pydantic import to_strict_json_schema
from pydantic import BaseModel, Field

from accelkit.serve.sampling import MAX_SPEC_CHARS, StructuredOutputs
from accelkit.serve.structured import (
    COMPILE_NICE,
    GrammarCompiler,
    allocated_bytes,
    apply_token_bitmask_,
    run_here,
    unpack_bits,
)
from accelkit.serve.structured_llguidance import LLGuidanceBackend
from accelkit.serve.testing import HOSTILE_SPECS, build_bytelevel_tokenizer, build_tokenizer, nested_properties

EOS = 2
VOCAB_SIZE = 520  # the model's: a few ids past the tokenizer's 512 have no text


@functools.cache
def tokenizer() -> Any:
    return build_bytelevel_tokenizer(512)


@functools.cache
def backend() -> LLGuidanceBackend:
    return LLGuidanceBackend(tokenizer(), VOCAB_SIZE, [EOS])


def allowed_ids(row: torch.Tensor) -> list[int]:
    """The ids whose bit is set in one packed mask row (the test's own reading of the layout)."""
    words = row.tolist()
    return [t for t in range(32 * len(words)) if (words[t // 32] >> (t % 32)) & 1]


@functools.cache
def closers() -> frozenset[int]:
    """Tokens of one structural character: a walk that picks them half the time ends in a few hundred steps."""
    tok = tokenizer()
    return frozenset(i for i in range(512) if tok.decode([i]) in set('"}],:0123456789tfnl'))


def walk(spec: StructuredOutputs, seed: int, max_steps: int = 600, using: Any = None,
         eos_after: int = 0) -> tuple[str, bool]:
    """A random walk through the allowed tokens of ``using``'s masks (llguidance's by default): (its text, whether
    it ended with EOS allowed and taken; EOS is taken only after ``eos_after`` tokens unless nothing else is
    allowed)."""
    rng = random.Random(seed)
    engine = backend() if using is None else using
    grammar = engine.compile(spec)
    matcher = grammar.matcher()
    bitmask = torch.zeros(1, (VOCAB_SIZE + 31) // 32, dtype=torch.int32)
    ids: list[int] = []
    for _ in range(max_steps):
        engine.fill_bitmasks([(matcher, 0)], bitmask)
        allowed = allowed_ids(bitmask[0])
        assert allowed, f"nothing allowed after {tokenizer().decode(ids)!r}"
        assert all(t < 512 for t in allowed)  # the ids past the tokenizer's have no text
        if EOS in allowed and (allowed == [EOS] or (len(ids) >= eos_after and rng.random() < 0.3)):
            assert matcher.accept_tokens([EOS]) and matcher.is_terminated()
            return tokenizer().decode(ids), True
        others = [t for t in allowed if t != EOS]
        short = [t for t in others if t in closers()]
        pick = rng.choice(short if short and rng.random() < 0.6 else others)
        assert matcher.accept_tokens([pick])
        ids.append(pick)
    return tokenizer().decode(ids), False


REGEXES = [r"\d{3}-[a-z]+", r"(yes|no)!?", r"[A-Z][a-zé中]{0,5}( [0-9]+)?", r"-?(0|[1-9][0-9]*)(\.[0-9]+)?",
           r'"[^"]*"', r"(ab|a)*c", r"x[\s\S]{2}y", r"[^a-z\n]{1,4}"]


def check_regex_walks(pattern: str, seeds: int, using: Any = None) -> None:
    """Each of ``seeds`` walks ends, in a full match of ``pattern`` (``using``: the backend, llguidance's default)."""
    for seed in range(seeds):
        text, ended = walk(StructuredOutputs(regex=pattern), seed, using=using)
        assert ended and re.fullmatch(pattern, text), (pattern, text)


def check_choice_walks(choices: list[str], seeds: int, min_seen: int, using: Any = None) -> None:
    """Each walk ends in one of ``choices``, and more than ``min_seen`` of them come out."""
    seen = set()
    for seed in range(seeds):
        text, ended = walk(StructuredOutputs(choice=choices), seed, using=using)
        assert ended and text in choices, text
        seen.add(text)
    assert len(seen) > min_seen


def check_json_object_walks(using: Any = None) -> None:
    """A walk that ends is a JSON object, one cut short began as one; at least one of 6 ends."""
    ended_count = 0
    for seed in range(6):
        text, ended = walk(StructuredOutputs(json_object=True), seed, using=using)
        if ended:
            ended_count += 1
            assert isinstance(json.loads(text), dict), text
        else:
            assert text.lstrip().startswith("{")
    assert ended_count


# a structural tag whose trigger is a closer, so that walks write it often
CALL = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
TAG = {"structures": [{"begin": "t=", "schema": CALL, "end": ";"}], "triggers": ["t"]}


def split_calls(text: str, trigger: str, begin: str, end: str, cut_short: bool) -> tuple[list[Any], str]:
    """(the documents of the calls in a structural tag's output, its text outside them), asserting that every
    ``trigger`` in ``text`` begins a whole call (``begin``, a JSON document, ``end``); an output ``cut_short`` may stop
    inside its last call."""
    docs, outside, last, pos = [], "", 0, text.find(trigger)
    while pos >= 0:
        outside += text[last:pos]
        rest = text[pos:]
        if end not in rest and cut_short:
            assert begin.startswith(rest) or rest.startswith(begin), text
            return docs, outside
        assert rest.startswith(begin) and end in rest, text
        args = rest[len(begin):].split(end, 1)[0]
        docs.append(json.loads(args))
        last = pos + len(begin) + len(args) + len(end)
        pos = text.find(trigger, last)
    return docs, outside + text[last:]


def check_structural_tag_walks(seeds: int = 6, using: Any = None) -> None:
    """Walks through a structural tag's free text: every trigger written begins a whole call (begin, a document the
    schema accepts, end), a walk cut short may stop inside one; some walks hold calls, and some text is outside."""
    calls, outside = 0, ""
    for seed in range(seeds):
        text, ended = walk(StructuredOutputs(structural_tag=TAG), seed, max_steps=200, using=using, eos_after=40)
        docs, free = split_calls(text, "t", "t=", ";", cut_short=not ended)
        assert all(jsonschema.Draft202012Validator(CALL).is_valid(doc) for doc in docs), text
        calls, outside = calls + len(docs), outside + free
    assert calls >= 2 and outside, (calls, outside)


ANSWER = {"type": "object", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]}


def check_answer_tag_walks(seeds: int = 12, using: Any = None) -> None:
    """A structural tag with an answer (accelkit's extension: tools beside a response_format): every walk that ends
    is one JSON document the answer's schema accepts, or calls alone — whole, valid, the separator between them,
    no other text; both come out."""
    tag = json.dumps({**TAG, "answer": ANSWER, "separator": "|"})
    answers = call_walks = 0
    for seed in range(seeds):
        text, ended = walk(StructuredOutputs(structural_tag=tag), seed, max_steps=200, using=using, eos_after=2)
        if not ended:
            continue
        if text.startswith("t="):
            docs = [json.loads(part[2:-1]) for part in text.split("|")]
            assert all(part.startswith("t=") and part.endswith(";") for part in text.split("|")), text
            assert all(jsonschema.Draft202012Validator(CALL).is_valid(doc) for doc in docs), text
            call_walks += 1
        else:
            jsonschema.validate(json.loads(text), ANSWER)
            answers += 1
    assert answers and call_walks, (answers, call_walks)
    with pytest.raises(ValueError, match=r"structural_tag.answer is \[1\]; give a JSON schema object"):
        StructuredOutputs(structural_tag=json.dumps({**TAG, "answer": [1]})).validate()


def test_a_tags_answer_gives_that_answer_or_calls_alone() -> None:
    check_answer_tag_walks()


@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_walks_end_in_full_matches(pattern: str) -> None:
    check_regex_walks(pattern, 4)


def test_structural_tag_walks_write_a_whole_valid_call_after_each_trigger() -> None:
    check_structural_tag_walks()


def with_added_tokens(special: bool, *texts: str) -> Any:
    """The test tokenizer with ``texts`` as added tokens (ids 512, …): Qwen marks its <tool_call> and </tool_call>
    ``special=False``, Mistral its [TOOL_CALLS] ``special=True``; llguidance matches either kind as a token."""
    from tokenizers import AddedToken

    tok = build_bytelevel_tokenizer(512)
    tok.add_tokens([AddedToken(t, special=special, normalized=False) for t in texts], special_tokens=special)
    return tok


def test_a_structural_tag_refers_to_the_tokenizers_added_tokens_as_tokens_wherever_they_are() -> None:
    """A trigger, begin or end holding an added token's text is that token, as the model writes it (Qwen's call
    closes with its </tool_call> token); other text is text; a trigger holding such a token among other text is a
    400. Without the added tokens the same tag is all text."""
    qwen = {"structures": [{"begin": '<tool_call>\n{"name": "f", "arguments": ', "schema": CALL, "end": "}\n</tool_call>"},
                           {"begin": "<fn>", "schema": CALL, "end": "</fn>"}],
            "triggers": ["<tool_call>", "<fn>"]}
    call = '\n{"name": "f", "arguments": {"n": 1}}\n'
    plain = backend().compile(StructuredOutputs(structural_tag=qwen)).matcher()
    assert plain.accept_tokens(tokenizer().encode(f"hi <tool_call>{call}</tool_call> <fn>{{\"n\": 2}}</fn> bye"))
    tok = with_added_tokens(False, "<tool_call>", "</tool_call>")
    opened, closed = tok.convert_tokens_to_ids(["<tool_call>", "</tool_call>"])
    engine = LLGuidanceBackend(tok, VOCAB_SIZE, [EOS])
    matcher = engine.compile(StructuredOutputs(structural_tag=qwen)).matcher()
    assert matcher.accept_tokens([*tok.encode("hi "), opened, *tok.encode(call)])
    bitmask = torch.zeros(1, (VOCAB_SIZE + 31) // 32, dtype=torch.int32)
    engine.fill_bitmasks([(matcher, 0)], bitmask)
    assert allowed_ids(bitmask[0]) == [closed]  # the call's end is the token, and it is accepted
    assert matcher.accept_tokens([closed, *tok.encode(' then <fn>{"n": 2}</fn>')])
    mistral = with_added_tokens(True, "[TOOL_CALLS]")
    tag = {"structures": [{"begin": "[TOOL_CALLS]", "schema": CALL, "end": ""}], "triggers": ["[TOOL_CALLS]"]}
    engine = LLGuidanceBackend(mistral, VOCAB_SIZE, [EOS])
    matcher = engine.compile(StructuredOutputs(structural_tag=tag)).matcher()
    assert matcher.accept_tokens([*mistral.encode("ok "), mistral.convert_tokens_to_ids("[TOOL_CALLS]")])
    engine.fill_bitmasks([(matcher, 0)], bitmask)
    texts = [mistral.decode([t]).strip() for t in allowed_ids(bitmask[0])]
    assert texts and all(t.startswith("{") for t in texts if t), texts  # after the trigger: the document
    inside = {"structures": [{"begin": "go[TOOL_CALLS]", "schema": CALL, "end": ""}], "triggers": ["go[TOOL_CALLS]"]}
    with pytest.raises(ValueError, match="holds the special token '\\[TOOL_CALLS\\]' among other text"):
        engine.compile(StructuredOutputs(structural_tag=inside))


def test_a_compile_past_the_lexer_limits_is_refused_naming_them_once() -> None:
    """50 choices under a backend whose lexer may start with little: refused, the error one line that names the
    limits once (the message passes through two layers that each could add them)."""
    import llguidance

    engine = LLGuidanceBackend(tokenizer(), VOCAB_SIZE, [EOS])
    engine.limits = llguidance.LLParserLimits(initial_lexer_fuel=50, verbose_errors=False)
    with pytest.raises(ValueError, match="too big") as caught:
        engine.compile(StructuredOutputs(choice=[f"choice{i}" for i in range(50)]))
    message = str(caught.value)
    assert message.count("(the compile limits:") == 1 and "\n" not in message, message


def test_a_structural_tag_of_the_most_structures_served_compiles_and_runs() -> None:
    """256 structures with 256 triggers (the cap: past ~1,000 llguidance's limits would stop a request after its
    compile) compile, and request after request of the compiled grammar writes a call."""
    pattern = {"type": "object", "properties": {"a": {"type": "string", "pattern": "(a|b)*a(a|b){12}"}}}
    tag = {"structures": [{"begin": f"<fn{i}>", "schema": pattern, "end": ")"} for i in range(256)],
           "triggers": [f"<fn{i}>" for i in range(256)]}
    grammar = backend().compile(StructuredOutputs(structural_tag=tag))
    for i in (7, 200, 7):
        assert grammar.matcher().accept_tokens(tokenizer().encode(f'hi <fn{i}>{{"a": "abba'))


@pytest.mark.parametrize(("tag", "words"), [
    ({"structures": [], "triggers": ["t"]}, "non-empty list of structures"),
    ({"structures": [{"begin": "x=", "schema": CALL, "end": ";"}], "triggers": ["t"]}, "starts with none of the triggers"),
    ({"structures": [{"begin": "t=", "schema": "{}", "end": ";"}], "triggers": ["t"]}, "structures[0] is"),
    ({"structures": [{"begin": "t=", "schema": CALL, "end": ";"}], "triggers": [""]}, "give non-empty strings"),
    ('{"structures": [{"begin": "t", "schema": {"const": NaN}, "end": ""}], "triggers": ["t"]}', "holds NaN"),
    ("{not json", "is not valid JSON"),
    ({"type": "structural_tag", "format": {"type": "triggered_tags"}}, "form (xgrammar's newer one) is not served"),
    ({"structures": [{"begin": "t=", "schema": CALL, "end": ";"}] * 257, "triggers": ["t"]}, "give at most 256"),
    ({"structures": [{"begin": "<f>", "schema": CALL, "end": ""}, {"begin": "<fun>", "schema": CALL, "end": ""}],
      "triggers": ["<fun", "<f"]}, "'<f' begins '<fun', which could then never be written"),
])
def test_a_malformed_structural_tag_is_refused_naming_what_is_wrong(tag: Any, words: str) -> None:
    with pytest.raises(ValueError, match=re.escape(words)):
        StructuredOutputs(structural_tag=tag)


def test_choice_walks_end_in_one_of_the_choices() -> None:
    check_choice_walks(["yes", "no", "maybe so", "日本", "no way"], 12, min_seen=1)


def test_json_object_walks_end_in_json_objects() -> None:
    check_json_object_walks()


class Address(BaseModel):
    street: str = Field(max_length=24)
    city: str = Field(min_length=1, max_length=12)
    zip: str | None = Field(None, pattern=r"^[0-9]{5}$")


class Cat(BaseModel):
    kind: Literal["cat"]
    lives: int = Field(ge=0, le=9)


class Dog(BaseModel):
    kind: Literal["dog"]
    good: bool = True


class Person(BaseModel):
    name: str = Field(max_length=16)
    age: int = Field(ge=0, le=130)
    score: float = Field(ge=0, le=1)
    mood: Literal["calm", "busy"] = "calm"
    tags: list[str] = Field(default=[], max_length=3)
    counts: dict[str, Annotated[int, Field(ge=0)]] = {}
    home: Address
    pet: Cat | Dog = Field(discriminator="kind")
    born: datetime.date
    id: uuid.UUID
    even: int = Field(default=0, multiple_of=2)  # multipleOf: enforced by llguidance (accelkit's own engine refused it)


SCHEMAS = {"person": Person.model_json_schema(), "person-strict": to_strict_json_schema(Person)}


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_pydantic_schemas_give_documents_pydantic_and_jsonschema_accept(name: str) -> None:
    check_pydantic_walks(SCHEMAS[name], 6)


def check_pydantic_walks(schema: dict[str, Any], seeds: int, using: Any = None) -> None:
    """Each walk of ``schema`` (a Person's) that ends is a document jsonschema and pydantic accept; 3 or more end."""
    ended_count = 0
    for seed in range(seeds):
        text, ended = walk(StructuredOutputs(json=schema), seed, max_steps=1500, using=using)
        if ended:
            ended_count += 1
            doc = json.loads(text)
            jsonschema.validate(doc, schema, format_checker=jsonschema.FormatChecker())
            Person.model_validate(doc)
    assert ended_count >= 3


def test_properties_come_out_in_the_schemas_order_and_no_others() -> None:
    schema = {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "boolean"},
                                               "m": {"enum": ["x", "y"]}}, "required": ["z", "a", "m"]}
    for seed in range(4):
        text, ended = walk(StructuredOutputs(json=schema), seed)
        assert ended and list(json.loads(text)) == ["z", "a", "m"], text


# objects whose keys something beside their own properties extends: closing each part to its declared keys would
# leave no valid document (found in review: each was a 400 "Unsatisfiable schema")
EXTENDED = {
    "allOf": {"allOf": [{"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]},
                        {"type": "object", "properties": {"b": {"type": "boolean"}}, "required": ["b"]}]},
    "ref beside properties": {"$defs": {"B": {"type": "object", "properties": {"id": {"type": "integer"}},
                                              "required": ["id"]}},
                              "$ref": "#/$defs/B", "properties": {"ok": {"type": "boolean"}}, "required": ["ok"]},
    "anyOf beside properties": {"type": "object", "properties": {"kind": {"const": "k"}}, "required": ["kind"],
                                "anyOf": [{"properties": {"x": {"type": "integer"}}, "required": ["x"]},
                                          {"properties": {"y": {"type": "boolean"}}, "required": ["y"]}]},
}


@pytest.mark.parametrize("name", list(EXTENDED))
def test_objects_whose_keys_something_else_extends_compile_and_their_walks_are_valid(name: str) -> None:
    schema = EXTENDED[name]
    ended = 0
    for seed in range(10):
        text, done = walk(StructuredOutputs(json=json.dumps(schema)), seed, max_steps=300, eos_after=4)
        if done:
            ended += 1
            jsonschema.validate(json.loads(text), schema)
    assert ended >= 3, name


def test_objects_are_closed_to_their_declared_keys_only_where_those_alone_can_satisfy_them() -> None:
    from accelkit.serve.structured_schema import close_objects

    def obj(*keys: str) -> dict[str, Any]:
        return {"type": "object", "properties": {k: {"type": "integer"} for k in keys}, "required": list(keys)}

    closed = {"additionalProperties": False}
    union = close_objects({"anyOf": [obj("a"), obj("b")]})  # (a pydantic Union: whole alternatives)
    assert union["anyOf"] == [obj("a") | closed, obj("b") | closed]
    referred = close_objects({"$defs": {"P": obj("p")}, "type": "object", "properties": {"q": {"$ref": "#/$defs/P"}}})
    assert referred["$defs"]["P"] == obj("p") | closed and referred["additionalProperties"] is False
    nested = close_objects({"type": "array", "items": {"type": "object", "properties": {"n": obj("m")}}})
    assert nested["items"]["additionalProperties"] is False and nested["items"]["properties"]["n"] == obj("m") | closed
    intersected = close_objects(EXTENDED["allOf"])
    assert intersected == EXTENDED["allOf"]
    beside = close_objects(EXTENDED["ref beside properties"])
    assert beside == EXTENDED["ref beside properties"]  # (the node and the definition its $ref reaches: open)
    assert close_objects(EXTENDED["anyOf beside properties"]) == EXTENDED["anyOf beside properties"]
    inner = close_objects({"allOf": [{"properties": {"d": obj("e")}}, obj("f")]})
    assert inner["allOf"][0]["properties"]["d"] == obj("e") | closed  # (a property's own object: still closed)
    chain = {"$defs": {"A": {"$ref": "#/$defs/B"}, "B": obj("b")}, "allOf": [{"$ref": "#/$defs/A"}, obj("c")]}
    assert close_objects(chain) == chain  # (what an open definition refers to stays open too)
    odd = {"type": "object", "properties": {"a": {}}, "required": [["a"]]}  # (not a schema: the engine says so)
    assert close_objects(odd) == odd


def test_boolean_schemas_and_format_keys_inside_values() -> None:
    """``true`` is the empty schema (any JSON); ``false`` matches nothing (a 400 saying so); an unknown format is
    dropped where it is a keyword only — not from a ``const`` value holding a "format" key."""
    text, ended = walk(StructuredOutputs(json="true"), 0, eos_after=2)
    assert not ended or json.loads(text) is not None
    with pytest.raises(ValueError, match="structured_outputs.json: no text matches it"):
        backend().compile(StructuredOutputs(json="false"))
    schema = {"type": "object", "properties": {"c": {"const": {"format": "url", "z": 1}}, "u": {"format": "url",
              "type": "string", "maxLength": 3}}, "required": ["c", "u"]}
    for seed in range(4):
        text, ended = walk(StructuredOutputs(json=json.dumps(schema)), seed)
        assert ended and json.loads(text)["c"] == {"format": "url", "z": 1}, text


def test_a_terminated_matcher_allows_only_eos_and_rollback_reopens_it() -> None:
    grammar = backend().compile(StructuredOutputs(choice=["no"]))
    matcher = grammar.matcher()
    ids = tokenizer().encode("no")
    bitmask = torch.zeros(1, (VOCAB_SIZE + 31) // 32, dtype=torch.int32)
    assert matcher.accept_tokens(ids)
    backend().fill_bitmasks([(matcher, 0)], bitmask)
    assert allowed_ids(bitmask[0]) == [EOS]
    assert matcher.accept_tokens([EOS]) and matcher.is_terminated()
    backend().fill_bitmasks([(matcher, 0)], bitmask)
    assert allowed_ids(bitmask[0]) == [EOS]
    matcher.rollback(1 + len(ids))
    assert not matcher.is_terminated()
    backend().fill_bitmasks([(matcher, 0)], bitmask)
    assert EOS not in allowed_ids(bitmask[0]) and ids[0] in allowed_ids(bitmask[0])


def llguidance_mask(matcher: Any) -> torch.Tensor:
    """The mask llguidance itself computes for ``matcher``'s state (not the copy kept at compile)."""
    row = torch.zeros((VOCAB_SIZE + 31) // 32, dtype=torch.int32)
    matcher.matcher.unsafe_compute_mask_ptr(row.data_ptr(), row.numel() * 4)
    return row


@pytest.mark.parametrize("spec", [StructuredOutputs(regex="[0-9]+x"), StructuredOutputs(choice=["yes", "no"]),
                                  StructuredOutputs(json_object=True),
                                  StructuredOutputs(json=json.dumps({"type": "object", "properties": {
                                      "n": {"type": "integer"}}, "required": ["n"]}))],
                         ids=["regex", "choice", "json_object", "json"])
def test_a_request_at_its_start_gets_the_mask_computed_at_compile(spec: StructuredOutputs) -> None:
    """A start state can be a grammar's costliest (``a{100000}``'s, below); it is computed once at compile and
    copied into each request's first step — the same bits llguidance computes, before any token and again after a
    rollback to the start; after a token the mask is computed."""
    grammar = backend().compile(spec)
    first, other = grammar.matcher(), grammar.matcher()
    width = (VOCAB_SIZE + 31) // 32
    bitmask = torch.zeros(2, width, dtype=torch.int32)
    assert first.at_start() and first.start_mask is other.start_mask  # (one copy, shared by the grammar's requests)
    backend().fill_bitmasks([(first, 0), (other, 1)], bitmask)
    assert torch.equal(bitmask[0], llguidance_mask(first)) and torch.equal(bitmask[1], bitmask[0])
    token = allowed_ids(bitmask[0])[0]
    assert first.accept_tokens([token]) and not first.at_start()
    bitmask.zero_()
    backend().fill_bitmasks([(first, 0)], bitmask)
    assert torch.equal(bitmask[0], llguidance_mask(first))
    first.rollback(1)
    assert first.at_start()
    bitmask.zero_()
    backend().fill_bitmasks([(first, 0)], bitmask)
    assert torch.equal(bitmask[0], llguidance_mask(first)) and torch.equal(bitmask[0], torch.from_numpy(other.start_mask))
    assert not first.start_mask.flags.writeable


def test_a_counted_repetitions_start_mask_is_llguidances() -> None:
    """``a{100000}``: its start mask walks every token made of a's, each time llguidance computes it; the copy kept
    at compile has the same bits."""
    matcher = backend().compile(StructuredOutputs(regex="a{100000}")).matcher()
    bitmask = torch.zeros(1, (VOCAB_SIZE + 31) // 32, dtype=torch.int32)
    backend().fill_bitmasks([(matcher, 0)], bitmask)
    a = tokenizer().encode("a")
    assert torch.equal(bitmask[0], llguidance_mask(matcher)) and set(a) <= set(allowed_ids(bitmask[0]))


def test_bitmask_rows_are_filled_in_one_pass_and_applied_exactly() -> None:
    specs = [StructuredOutputs(regex="[0-9]+"), StructuredOutputs(choice=["yes", "no"]), StructuredOutputs(json_object=True)]
    matchers = [backend().compile(s).matcher() for s in specs]
    bitmask = torch.full((4, (VOCAB_SIZE + 31) // 32), -1, dtype=torch.int32)
    backend().fill_bitmasks([(m, i) for i, m in zip([0, 2, 3], matchers, strict=True)], bitmask)
    assert allowed_ids(bitmask[1]) == list(range(32 * bitmask.shape[1]))  # a row no matcher was given keeps all
    digits = {t for t in range(512) if tokenizer().decode([t]).isdigit() and tokenizer().decode([t]).isascii()}
    assert set(allowed_ids(bitmask[0])) == digits
    width = 32 * bitmask.shape[1] + 5
    logits = torch.randn(4, width)  # (wider than the mask: the ids past it are masked too)
    masked = logits.clone()
    apply_token_bitmask_(masked, bitmask)
    # the accelerator's unpacking (shifts, run here on the CPU) reads the same bits as numpy's
    assert torch.equal(unpack_bits(bitmask, width - 5),
                       torch.tensor([[t in set(allowed_ids(bitmask[r])) for t in range(width - 5)] for r in range(4)]))
    for row in range(4):
        keep = set(allowed_ids(bitmask[row]))
        for t in range(width):
            assert (masked[row, t].item() == float("-inf")) == (t not in keep), (row, t)
            if t in keep:
                assert masked[row, t] == logits[row, t]



def test_one_row_is_filled_as_in_a_batch_and_every_logits_dtype_is_masked_alike() -> None:
    specs = [StructuredOutputs(regex="[0-9]+"), StructuredOutputs(json_object=True)]
    matchers = [backend().compile(s).matcher() for s in specs]
    width = (VOCAB_SIZE + 31) // 32
    batch = torch.full((3, width), -1, dtype=torch.int32)
    backend().fill_bitmasks([(matchers[0], 0), (matchers[1], 2)], batch)
    for m, row in ((matchers[0], 0), (matchers[1], 2)):  # one guided row: filled on the calling thread
        alone = torch.full((3, width), -1, dtype=torch.int32)
        backend().fill_bitmasks([(m, row)], alone)
        assert torch.equal(alone[row], batch[row]) and bool((alone[1] == -1).all())
    logits = torch.randn(3, VOCAB_SIZE)
    expected = logits.clone()
    apply_token_bitmask_(expected, batch)
    assert 0 < int(torch.isinf(expected[0]).sum()) < VOCAB_SIZE and not torch.isinf(expected[1]).any()
    for dtype in (torch.float16, torch.bfloat16, torch.float64):
        other = logits.to(dtype)
        apply_token_bitmask_(other, batch)
        assert torch.equal(torch.isinf(other), torch.isinf(expected)), dtype
        assert torch.equal(other[~torch.isinf(other)], logits.to(dtype)[~torch.isinf(expected)]), dtype
    strided = torch.randn(VOCAB_SIZE, 3).t()  # (a non-contiguous view: written through, not copied)
    reference = strided.contiguous()
    apply_token_bitmask_(strided, batch)
    apply_token_bitmask_(reference, batch)
    assert torch.equal(strided, reference)

@pytest.mark.parametrize("parallel", [True, False])
def test_a_steps_rows_get_the_same_masks_on_the_pool_as_one_after_another(parallel: bool) -> None:
    """``parallel_fill`` (from 4 usable cores up) hands a step's rows to llguidance's pool, else fills them in turn
    on the calling thread: every row's mask is the one its matcher computes alone, whichever way."""
    specs = [StructuredOutputs(json_object=True), StructuredOutputs(regex="[a-z ]{1,40}[.]"),
             StructuredOutputs(choice=["alpha", "beta", "gamma"])]
    matchers = [backend().compile(specs[i % 3]).matcher() for i in range(9)]
    rng = random.Random(3)
    width = (VOCAB_SIZE + 31) // 32
    local = LLGuidanceBackend(tokenizer(), VOCAB_SIZE, [EOS])
    local.parallel_fill = parallel
    for _ in range(12):  # rows at different depths of their grammars, some past their start mask
        batch = torch.zeros((len(matchers) + 1, width), dtype=torch.int32)
        local.fill_bitmasks([(m, i + 1) for i, m in enumerate(matchers)], batch)
        for i, m in enumerate(matchers):
            assert torch.equal(batch[i + 1], llguidance_mask(m)), (parallel, i)
            allowed = [t for t in allowed_ids(batch[i + 1]) if t != EOS]
            if allowed:
                assert m.accept_tokens([rng.choice(allowed)])
        assert not batch[0].any()  # (a row no matcher was given is left as it was)


def test_masks_are_filled_on_the_pool_only_with_cores_to_spare(monkeypatch: pytest.MonkeyPatch) -> None:
    import accelkit.serve.structured as module

    for cores, parallel in ((2, False), (3, False), (4, True), (64, True)):
        monkeypatch.setattr(module, "usable_cores", lambda cores=cores: cores)
        assert LLGuidanceBackend(tokenizer(), VOCAB_SIZE, [EOS]).parallel_fill is parallel, cores


# ---- refusals: one line naming the keyword, the construct or the limit --------------------------------------------

@pytest.mark.parametrize(("fields", "words"), [
    ({"json": {"type": "array", "uniqueItems": True}}, "keyword uniqueItems (at the root) cannot be enforced"),
    ({"json": {"type": "object", "properties": {"s": {"type": "array", "items": {"type": "integer"},
                                                      "uniqueItems": True}}}}, "(at properties.s)"),
    ({"json": {"$ref": "#/$defs/missing"}}, "missing"),
    # (a required entry that is not a name: a 500 TypeError in the rewrite before the engine saw it — review)
    ({"json": {"type": "object", "properties": {"a": {}}, "required": [["a"]]}}, "Expected string for 'required'"),
    ({"regex": "(?<=a)b"}, "look-around"),
    # (llguidance's own words named its parser's enum: "lookarounds not supported yet; WordUnicode in regex /\bab/")
    ({"regex": "\\bab"}, "regex: the word boundary \\b is a look-around, which the llguidance engine cannot"),
    ({"regex": "a\\Bb"}, "regex: the non-boundary \\B is a look-around"),
    ({"regex": "(a"}, "unclosed group"),
    ({"regex": "[^\\x00-\\U0010ffff]"}, "no text matches it"),
    ({"grammar": "start: x"}, "structured_outputs.grammar"),
])
def test_what_cannot_be_enforced_is_refused_in_one_line(fields: dict[str, Any], words: str) -> None:
    with pytest.raises(ValueError) as info:
        backend().compile(StructuredOutputs(**fields))
    message = str(info.value)
    assert words in message and "\n" not in message and message.startswith("structured_outputs."), message


def test_keys_a_validator_ignores_are_ignored() -> None:
    schema = {"id": "http://example.com/s", "type": "object", "self": {"href": "x"}, "links": [], "_format": "x",
              "properties": {"a": {"type": "integer", "readonly": True, "x-extra": 1}}, "required": ["a"]}
    text, ended = walk(StructuredOutputs(json=schema), 0)
    assert ended and isinstance(json.loads(text)["a"], int)
    # a format llguidance does not know is ignored as jsonschema ignores it; the ones it knows still hold
    schema = {"type": "object", "properties": {"u": {"type": "string", "format": "url", "maxLength": 8},
                                               "d": {"type": "string", "format": "date"}}, "required": ["u", "d"]}
    for seed in range(3):
        text, ended = walk(StructuredOutputs(json=schema), seed)
        assert ended, text
        jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())
        datetime.date.fromisoformat(json.loads(text)["d"])


def test_non_finite_numbers_and_oversized_specs_are_refused_before_compiling() -> None:
    with pytest.raises(ValueError, match="NaN"):
        StructuredOutputs(json='{"enum": [NaN, Infinity]}')
    with pytest.raises(ValueError, match=f"size limit is {MAX_SPEC_CHARS:,}"):
        StructuredOutputs(regex="a" * (MAX_SPEC_CHARS + 1))
    with pytest.raises(ValueError, match="size limit"):
        StructuredOutputs(choice=[f"{i}" + "x" * 2000 for i in range(200)])


def test_a_schema_nested_past_the_compilers_depth_is_refused_saying_so() -> None:
    compiler = GrammarCompiler(backend)
    assert compiler.compile(StructuredOutputs(json=nested_properties(40)))
    with pytest.raises(ValueError, match=r"^structured_outputs.json: it nests deeper than .* flatten it$"):
        compiler.compile(StructuredOutputs(json=nested_properties(100)))


@pytest.mark.parametrize("name", sorted(HOSTILE_SPECS))
def test_each_hostile_spec_compiles_or_is_refused_by_the_compiler(name: str) -> None:
    compiler = GrammarCompiler(backend)
    spec = StructuredOutputs(**HOSTILE_SPECS[name])
    try:
        grammar = compiler.compile(spec)
    except ValueError as exc:  # refused: one line naming the field (never another exception)
        assert str(exc).startswith("structured_outputs.") and "\n" not in str(exc), exc
    else:
        bitmask = torch.zeros(1, (VOCAB_SIZE + 31) // 32, dtype=torch.int32)
        backend().fill_bitmasks([(grammar.matcher(), 0)], bitmask)
        assert allowed_ids(bitmask[0])


# ---- the compiler: one compile per spec, limits, a bounded cache ------------------------------------------------

class GatedBackend:
    """The real backend, whose compiles wait for a gate: lets a test hold compiles in flight."""

    def __init__(self) -> None:
        self.gate = threading.Event()
        self.started = threading.Semaphore(0)
        self.compiles: list[StructuredOutputs] = []
        self.name, self.vocab_size = "gated", VOCAB_SIZE

    def prepare(self, spec: StructuredOutputs) -> Any:
        return backend().prepare(spec)

    def compile(self, spec: StructuredOutputs, prepared: Any = None, *, native: Any = run_here) -> Any:
        self.compiles.append(spec)
        self.started.release()
        self.gate.wait()
        return backend().compile(spec, prepared, native=native)

    def fill_bitmasks(self, rows: Any, bitmask: torch.Tensor) -> None:
        backend().fill_bitmasks(rows, bitmask)


def test_requests_bringing_one_spec_at_once_share_one_compile() -> None:
    gated = GatedBackend()
    compiler = GrammarCompiler(lambda: gated)
    spec = StructuredOutputs(regex="[a-z]{3}")
    results: list[Any] = []
    threads = [threading.Thread(target=lambda: results.append(compiler.compile(spec))) for _ in range(8)]
    for t in threads:
        t.start()
    assert gated.started.acquire(timeout=30)
    gated.gate.set()
    for t in threads:
        t.join()
    assert len(gated.compiles) == 1 and compiler.num_compiles == 1
    assert len(results) == 8 and all(r is results[0] for r in results)
    compiler.compile(spec)  # cached: no compile
    assert compiler.num_compiles == 1


def test_a_compile_past_the_time_limit_is_refused_naming_it_and_queued_ones_are_cancelled() -> None:
    gated = GatedBackend()
    compiler = GrammarCompiler(lambda: gated, timeout_s=0.2, max_workers=1)
    with pytest.raises(ValueError, match=r"structured_outputs.regex: did not compile within the 0.2 s compile limit"):
        compiler.compile(StructuredOutputs(regex="a+"))
    with pytest.raises(ValueError, match="compile limit"):  # queued behind it, never started: cancelled
        compiler.compile(StructuredOutputs(regex="b+"))
    gated.gate.set()
    assert [s.regex for s in gated.compiles] == ["a+"]
    compiler.timeout_s = 30
    assert compiler.compile(StructuredOutputs(regex="a+")) is not None  # the running one finished and was cached
    assert [s.regex for s in gated.compiles] == ["a+"]


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="per-thread nice values are Linux's")
def test_only_the_grammar_engines_own_work_runs_nicer_than_the_server_threads() -> None:
    """llguidance's compile (the interpreter lock released) runs niced; everything that holds the lock — the spec's
    rewrite, the compile's own Python, freeing an evicted grammar — at the server's priority: a niced thread that
    holds the lock on a busy machine is scheduled rarely and keeps every other thread waiting for it."""
    def nice() -> int:
        return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())

    class Recorded:  # a compiled grammar that notes the thread it is freed on
        def __init__(self, grammar: Any) -> None:
            self.grammar, self.num_bytes = grammar, grammar.num_bytes

        def __del__(self) -> None:
            recorder.dropped_nice.append(nice())

    class NiceRecorder(GatedBackend):
        def __init__(self) -> None:
            super().__init__()
            self.gate.set()
            self.native_nice: list[int] = []
            self.dropped_nice: list[int] = []

        def prepare(self, spec: StructuredOutputs) -> Any:
            self.prepare_nice = nice()
            return backend().prepare(spec)

        def compile(self, spec: StructuredOutputs, prepared: Any = None, *, native: Any = run_here) -> Any:
            self.compile_nice = nice()
            assert prepared is not None  # (the Python-side work was done before)

            def recorded(fn: Any, /, *args: Any, **kwargs: Any) -> Any:
                self.native_nice.append(native(nice))
                return native(fn, *args, **kwargs)

            return Recorded(backend().compile(spec, prepared, native=recorded))  # (freed when the cache evicts it)

    recorder = NiceRecorder()
    compiler = GrammarCompiler(lambda: recorder, max_cache_bytes=1 << 20)
    compiler.compile(StructuredOutputs(json='{"type": "object"}'))
    main = os.getpriority(os.PRIO_PROCESS, os.getpid())
    assert recorder.native_nice and set(recorder.native_nice) == {min(19, main + COMPILE_NICE)}
    assert recorder.prepare_nice == main and recorder.compile_nice == main
    for n in range(1, 40):  # past the cache's bytes: the first grammars are evicted, and freed
        compiler.compile(StructuredOutputs(regex=f"[a-z]{{{n}}}"))
    assert recorder.dropped_nice and set(recorder.dropped_nice) == {main}
    assert nice() == main  # the caller's thread is untouched


def test_the_cache_is_bounded_by_bytes_and_errors_are_remembered() -> None:
    compiler = GrammarCompiler(backend, max_cache_bytes=300_000)
    grammars = [compiler.compile(StructuredOutputs(regex=f"[a-z]{{{n}}}")) for n in range(1, 9)]
    assert compiler.cached_bytes <= 300_000
    assert sum(g.num_bytes for g in grammars) > 300_000  # some were evicted
    compiles = compiler.num_compiles
    compiler.compile(StructuredOutputs(regex="[a-z]{8}"))  # the newest stays
    assert compiler.num_compiles == compiles
    for _ in range(2):
        with pytest.raises(ValueError, match="look-around"):
            compiler.compile(StructuredOutputs(regex="(?<=a)b"))
    assert compiler.num_compiles == compiles + 1


@pytest.mark.skipif(allocated_bytes() is None, reason="needs glibc's mallinfo2 (what the weights are read from)")
def test_grammars_are_weighed_by_the_memory_they_hold_not_their_text() -> None:
    """``a{100000}`` is 9 characters and holds ~16 MiB of lexer tables in llguidance: a cache weighing it by its text
    would keep thousands of them (a client sending variants grew a server by 36 MB a round of requests)."""
    limit = 40 << 20
    compiler = GrammarCompiler(backend, max_cache_bytes=limit)
    before = allocated_bytes()
    for i in range(6):  # the same constraint, new text each time: six compiles
        compiler.compile(StructuredOutputs(regex="(?:)" * i + "a{100000}"))
    assert compiler.num_compiles == 6
    assert 8 << 20 <= compiler.cached_bytes <= limit  # weighed at megabytes each, so some were evicted
    held = allocated_bytes() - before
    assert held <= limit + (8 << 20), f"{held >> 20} MiB still allocated"  # and what was evicted was freed


def test_a_word_level_tokenizer_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="byte-level BPE or SentencePiece"):
        LLGuidanceBackend(build_tokenizer(), 64, [EOS])


def check_allows_agrees_with_the_mask(engine: Any, seeds: int = 3) -> None:
    """``matcher.allows(t)`` (the check of a token drawn before its mask) says what the mask's bit says, for every id,
    at every step of random walks through a JSON object — EOS, the ended grammar and the ids past the tokenizer's
    included — and checking does not move the matcher."""
    bitmask = torch.zeros(1, (VOCAB_SIZE + 31) // 32, dtype=torch.int32)
    grammar = engine.compile(StructuredOutputs(json=json.dumps({"type": "object", "properties": {
        "n": {"type": "integer"}, "s": {"type": "string", "maxLength": 3}}, "required": ["n", "s"]})))
    for seed in range(seeds):
        rng, matcher, ended = random.Random(seed), grammar.matcher(), False
        for _ in range(60):
            engine.fill_bitmasks([(matcher, 0)], bitmask)
            allowed = allowed_ids(bitmask[0])
            assert [t for t in range(VOCAB_SIZE) if matcher.allows(t)] == allowed
            engine.fill_bitmasks([(matcher, 0)], bitmask)
            assert allowed_ids(bitmask[0]) == allowed  # (not moved by the checks)
            if ended:
                break
            short = [t for t in allowed if t in closers() or t == EOS]
            token = rng.choice(short if short and rng.random() < 0.6 else allowed)
            assert matcher.accept_tokens([token])
            ended = token == EOS
        assert ended, "the walk did not end"


def test_a_matchers_check_of_one_token_agrees_with_its_mask() -> None:
    check_allows_agrees_with_the_mask(backend())


def guided_rows(spec: StructuredOutputs, params: list[Any], using: Any = None) -> list[Any]:
    """Real engine sequences (a one-token prompt) carrying guides over ``spec``, one per params, each as after a mask
    that cost enough to draw before the next one (RequestGuide.samples_first)."""
    from accelkit.serve.sequence import Sequence
    from accelkit.serve.structured import SAMPLE_FIRST_MIN_MASK_NS, RequestGuide

    engine = backend() if using is None else using
    grammar = engine.compile(spec)
    seqs = []
    for i, p in enumerate(params):
        seq = Sequence(f"r{i}", [1], p.replace(structured_outputs=spec))
        seq.guide = RequestGuide(engine, grammar.matcher(), grammar)
        seq.guide.matcher.mask_ns = SAMPLE_FIRST_MIN_MASK_NS
        seqs.append(seq)
    return seqs


def start_allowed(spec: StructuredOutputs) -> list[int]:
    bitmask = torch.zeros(1, (VOCAB_SIZE + 31) // 32, dtype=torch.int32)
    backend().fill_bitmasks([(backend().compile(spec).matcher(), 0)], bitmask)
    return allowed_ids(bitmask[0])


def test_a_token_drawn_before_its_mask_comes_from_the_masked_distribution() -> None:
    """A guided row drawn before its mask keeps its draw when the grammar allows it and draws again from the masked
    logits when not: each allowed token comes out with its masked probability, p(t) / P(allowed) — 10,000 rows,
    each frequency within 4 standard errors — nothing else comes out, and about 1 - P(allowed) of the draws are
    refused."""
    from accelkit.serve.sampler import Sampler
    from accelkit.serve.sampling import SamplingParams

    spec = StructuredOutputs(regex="[a-c]x")
    allowed = start_allowed(spec)
    assert 2 <= len(allowed) <= 8, allowed
    logits = torch.full((VOCAB_SIZE,), -2.0)
    logits[allowed] = torch.linspace(1.0, -1.0, len(allowed))
    logits[EOS + 1] = 1.5  # (a disallowed token the model likes most)
    probs = (logits / 0.7).softmax(-1).double()  # (at temperature 0.7)
    p_allowed = float(probs[allowed].sum())
    n = 10_000
    params = [SamplingParams(temperature=0.7, max_tokens=4)] * n
    seqs = guided_rows(spec, params)
    sampler = Sampler(torch.device("cpu"), seed=0)
    tokens = sampler(logits.repeat(n, 1), [s.params for s in seqs], [s.seq_id for s in seqs], seqs)
    assert set(tokens) <= set(allowed)
    freq = torch.bincount(torch.tensor(tokens), minlength=VOCAB_SIZE).double()[allowed] / n
    masked = probs[allowed] / p_allowed
    assert ((freq - masked).abs() <= 4 * (masked * (1 - masked) / n).sqrt()).all(), (freq, masked)
    assert sampler.first_draws_allowed + sampler.first_draws_refused == n
    refused_share = sampler.first_draws_refused / n
    assert abs(refused_share - (1 - p_allowed)) <= 4 * (p_allowed * (1 - p_allowed) / n) ** 0.5, refused_share


def drawn_both_ways(spec: StructuredOutputs, params: list[Any], logits: torch.Tensor
                    ) -> tuple[dict[bool, list[int]], dict[bool, tuple[int, int]]]:
    """The tokens fresh guided rows over ``spec`` draw from ``logits`` with the sampler drawing before the mask
    (True) and masking first (False), and each way's (first draws allowed, refused)."""
    from accelkit.serve.sampler import Sampler

    tokens, draws = {}, {}
    for first in (True, False):
        sampler = Sampler(torch.device("cpu"), seed=0)
        sampler.draw_first = first
        seqs = guided_rows(spec, params)
        tokens[first] = sampler(logits, params, [s.seq_id for s in seqs], seqs)
        draws[first] = (sampler.first_draws_allowed, sampler.first_draws_refused)
    return tokens, draws


def test_a_greedy_row_drawn_first_takes_the_masked_argmax_and_cut_rows_are_masked_first() -> None:
    """Greedy: the argmax kept when the grammar allows it, the best allowed token when not — the tokens of masking
    first. Rows with top_k, top_p or min_p are masked first (those cuts depend on which tokens the mask leaves)."""
    from accelkit.serve.sampler import Sampler
    from accelkit.serve.sampling import SamplingParams

    spec = StructuredOutputs(regex="[a-c]x")
    allowed = start_allowed(spec)
    logits = torch.zeros(2, VOCAB_SIZE)
    logits[0, allowed[1]] = 5.0  # an allowed argmax
    logits[1, EOS + 1], logits[1, allowed[-1]] = 9.0, 3.0  # a refused argmax, then the best allowed one
    greedy = [SamplingParams.greedy(max_tokens=4)] * 2
    tokens, draws = drawn_both_ways(spec, greedy, logits)
    assert draws == {True: (1, 1), False: (0, 0)}
    assert tokens[True] == tokens[False] == [allowed[1], allowed[-1]]
    cut = [SamplingParams(temperature=1.0, top_k=3), SamplingParams(temperature=1.0, top_p=0.5),
           SamplingParams(temperature=1.0, min_p=0.2)]
    sampler = Sampler(torch.device("cpu"), seed=0)
    seqs = guided_rows(spec, cut)
    assert set(sampler(logits[[1, 1, 1]], [s.params for s in seqs], [s.seq_id for s in seqs], seqs)) <= set(allowed)
    assert sampler.first_draws_allowed == sampler.first_draws_refused == 0


def test_a_seeded_row_that_samples_is_masked_first_so_its_tokens_do_not_depend_on_timing() -> None:
    """Drawing first keeps the distribution, not the tokens: a refused draw takes a second number from the row's
    generator, and whether a row draws first depends on how long its masks took. A seeded row that samples is
    therefore always masked first: the same seed gives the same tokens whether the sampler would draw first or
    not (a greedy row still draws first: its token is the masked argmax either way)."""
    from accelkit.serve.sampler import Sampler
    from accelkit.serve.sampling import SamplingParams

    spec = StructuredOutputs(regex="[a-c]x")
    allowed = start_allowed(spec)
    logits = torch.zeros(64, VOCAB_SIZE)
    logits[:, EOS + 1] = 3.0  # (a disallowed token the model likes: first draws would often be refused)
    seeded = [SamplingParams(temperature=1.0, seed=i, max_tokens=4) for i in range(64)]
    tokens, draws = drawn_both_ways(spec, seeded, logits)
    assert draws == {True: (0, 0), False: (0, 0)}
    assert tokens[True] == tokens[False] and set(tokens[True]) <= set(allowed) and len(set(tokens[True])) > 1
    greedy = [SamplingParams.greedy(max_tokens=4, seed=7)]
    sampler = Sampler(torch.device("cpu"), seed=0)
    seqs = guided_rows(spec, greedy)
    sampler(logits[:1], greedy, [s.seq_id for s in seqs], seqs)
    assert sampler.first_draws_refused == 1


def test_a_guide_draws_first_where_masks_cost_while_its_draws_are_allowed() -> None:
    """Never where its last mask was cheap; where it cost, drawing first while draws are kept (every
    SAMPLE_FIRST_RETRY-th step masked, to measure a mask again), and after refusals only every
    SAMPLE_FIRST_RETRY-th step (a retry)."""
    from accelkit.serve.structured import SAMPLE_FIRST_MIN_MASK_NS, SAMPLE_FIRST_RETRY, RequestGuide

    grammar = backend().compile(StructuredOutputs(regex="a+"))
    guide = RequestGuide(backend(), grammar.matcher(), grammar)
    assert not any(guide.samples_first() for _ in range(2 * SAMPLE_FIRST_RETRY))  # (no mask measured yet)
    guide.matcher.mask_ns = SAMPLE_FIRST_MIN_MASK_NS - 1
    assert not any(guide.samples_first() for _ in range(2 * SAMPLE_FIRST_RETRY))  # (cheap masks)
    guide.matcher.mask_ns = SAMPLE_FIRST_MIN_MASK_NS
    drawing = [guide.samples_first() for _ in range(SAMPLE_FIRST_RETRY)]
    assert drawing.count(False) == 1  # (one step in SAMPLE_FIRST_RETRY masked)
    for _ in range(3):
        guide.record_first(False)
    retrying = [guide.samples_first() for _ in range(SAMPLE_FIRST_RETRY)]
    assert retrying.count(True) == 1


def test_a_request_starts_from_what_its_grammars_earlier_requests_drew() -> None:
    """A grammar whose earlier requests' first draws were refused starts the next request masking (a choice's
    requests, a few tokens long, each paid for a refused draw before their own share said stop); one whose draws were
    kept starts it drawing; each first draw moves the request's share and, more slowly, its grammar's."""
    from accelkit.serve.structured import (
        SAMPLE_FIRST_GRAMMAR_WEIGHT,
        SAMPLE_FIRST_MIN,
        SAMPLE_FIRST_MIN_MASK_NS,
        SAMPLE_FIRST_WEIGHT,
        RequestGuide,
    )

    def guide_over(grammar):
        guide = RequestGuide(backend(), grammar.matcher(), grammar)
        guide.matcher.mask_ns = SAMPLE_FIRST_MIN_MASK_NS  # (its masks cost)
        return guide

    refused, kept = (backend().compile(StructuredOutputs(regex=r)) for r in ("b+", "c+"))
    assert refused.first_draw_share == kept.first_draw_share == SAMPLE_FIRST_MIN
    assert guide_over(refused).samples_first()  # (a grammar nothing is known of: its first request draws first)
    earlier = guide_over(refused)
    earlier.record_first(False)
    assert earlier.allowed_share == pytest.approx(SAMPLE_FIRST_MIN * (1 - SAMPLE_FIRST_WEIGHT))
    assert refused.first_draw_share == pytest.approx(SAMPLE_FIRST_MIN * (1 - SAMPLE_FIRST_GRAMMAR_WEIGHT))
    assert not guide_over(refused).samples_first()
    for _ in range(3):
        guide_over(kept).record_first(True)
    assert kept.first_draw_share > SAMPLE_FIRST_MIN and guide_over(kept).samples_first()
    assert backend().compile(StructuredOutputs(regex="d+")).first_draw_share == SAMPLE_FIRST_MIN  # (its own share)


def test_a_mask_filled_row_by_row_records_what_it_cost() -> None:
    grammar = backend().compile(StructuredOutputs(regex="[a-z]+x"))
    matcher = grammar.matcher()
    assert matcher.accept_tokens(tokenizer().encode("ab")) and matcher.mask_ns == 0
    backend().fill_bitmasks([(matcher, 0)], torch.zeros(1, (VOCAB_SIZE + 31) // 32, dtype=torch.int32))
    assert matcher.mask_ns > 0


def test_a_refused_row_whose_allowed_logits_are_all_minus_inf_still_gets_an_allowed_token() -> None:
    """Drawn again over its allowed ids alone: a row whose model gives every allowed token -inf (only a refused token
    is finite) takes the first allowed id, greedy or not — never the refused token, never an id off the grammar."""
    from accelkit.serve.sampler import Sampler
    from accelkit.serve.sampling import SamplingParams

    spec = StructuredOutputs(regex="[a-c]x")
    allowed = start_allowed(spec)
    logits = torch.full((2, VOCAB_SIZE), float("-inf"))
    logits[:, EOS + 1] = 0.0  # (the only finite logit: a token the grammar refuses)
    params = [SamplingParams(temperature=1.0, max_tokens=4), SamplingParams.greedy(max_tokens=4)]
    seqs = guided_rows(spec, params)
    sampler = Sampler(torch.device("cpu"), seed=0)
    assert sampler(logits, params, [s.seq_id for s in seqs], seqs) == [allowed[0]] * 2
    assert sampler.first_draws_refused == 2


@pytest.mark.parametrize(("schema", "said"), [
    ({"type": "integer", "minimum": 5, "maximum": 1}, "structured_outputs.structural_tag: structures[1].schema: "
     "failed to compile JSON schema: Unsatisfiable schema: minimum (5) is greater than maximum (1)"),
    ({"type": "object", "properties": {"n": {"type": "array", "uniqueItems": True}}},
     "the JSON Schema keyword uniqueItems (at structures[1].schema.properties.n) cannot be enforced"),
    ({"$ref": "#/nope"}, "structured_outputs.structural_tag: structures[1].schema: failed to compile JSON schema"),
])
def test_a_structural_tags_schema_error_names_its_structure(schema: Any, said: str) -> None:
    """It named a line of the Lark accelkit writes (``at 8(8): …``), or nothing, instead of the structure."""
    tag = {"structures": [{"begin": "<a>", "schema": CALL, "end": "}"}, {"begin": "<a>x", "schema": schema, "end": "}"}],
           "triggers": ["<a>"]}
    with pytest.raises(ValueError) as caught:
        backend().compile(StructuredOutputs(structural_tag=tag))
    assert said in str(caught.value) and "\n" not in str(caught.value), caught.value


def test_the_free_text_of_a_structural_tag_takes_the_added_tokens_but_its_triggers() -> None:
    """llguidance matches an added token as a token, never as text: the free text refused every one, so a Qwen3 model
    given tools could never write its </think> and close its thinking. A trigger token still opens a call."""
    qwen = {"structures": [{"begin": '<tool_call>\n{"name": "f", "arguments": ', "schema": CALL, "end": "}\n</tool_call>"}],
            "triggers": ["<tool_call>"]}
    tok = with_added_tokens(False, "<tool_call>", "</tool_call>", "<think>", "</think>")
    opened, closed, think, thought = tok.convert_tokens_to_ids(["<tool_call>", "</tool_call>", "<think>", "</think>"])
    grammar = LLGuidanceBackend(tok, VOCAB_SIZE, [EOS]).compile(StructuredOutputs(structural_tag=qwen))
    assert grammar.matcher().accept_tokens([think, *tok.encode("hmm"), thought, *tok.encode(" ok "), opened,
                                            *tok.encode('\n{"name": "f", "arguments": {"n": 1}}\n'), closed, EOS])
    assert not grammar.matcher().accept_tokens([thought, opened, *tok.encode("free text")])


def test_a_guides_opener_is_allowed_as_its_first_token_only_drawn_first_or_masked() -> None:
    check_opener(backend())


def check_opener(using: Any) -> None:
    """RequestGuide.opener (a hybrid reasoning model's <think>): the first token may be it besides what the grammar
    allows — a greedy row whose argmax it is keeps it, drawn before its mask or after — and once a token is out it
    is a token like any other (refused here)."""
    from accelkit.serve.sampler import Sampler
    from accelkit.serve.sampling import SamplingParams

    spec = StructuredOutputs(regex="[a-c]x")
    allowed = start_allowed(spec)
    opener = EOS + 1
    assert opener not in allowed
    logits = torch.zeros(1, VOCAB_SIZE)
    logits[0, opener], logits[0, allowed[0]] = 9.0, 3.0
    greedy = [SamplingParams.greedy(max_tokens=4)]
    for first in (True, False):
        sampler = Sampler(torch.device("cpu"), seed=0)
        sampler.draw_first = first
        (seq,) = guided_rows(spec, greedy, using)
        guide: Any = seq.guide
        guide.opener = opener
        assert guide.allows(opener) and not guide.allows(EOS + 2)
        assert sampler(logits, greedy, [seq.seq_id], [seq]) == [opener]
        (seq,) = guided_rows(spec, greedy, using)  # one token in: the grammar alone
        seq.guide.opener = opener  # type: ignore[attr-defined]
        seq.token_ids.append(allowed[0])
        assert sampler(logits, greedy, [seq.seq_id], [seq]) != [opener]
        assert not seq.guide.allows(opener)  # type: ignore[attr-defined]


def test_an_async_compile_of_a_cached_or_refused_spec_ends_without_suspending() -> None:
    compiler = GrammarCompiler(backend)
    spec, bad = StructuredOutputs(regex="[a-z]{3}"), StructuredOutputs(regex="(?=a)b")
    grammar = compiler.compile(spec)
    with pytest.raises(ValueError):
        compiler.compile(bad)
    # one send of the coroutine: it returns (StopIteration) or raises, never yields to a loop
    coroutine = compiler.compile_async(spec)
    with pytest.raises(StopIteration) as stopped:
        coroutine.send(None)
    assert stopped.value.value is grammar
    with pytest.raises(ValueError, match="structured_outputs.regex"):
        compiler.compile_async(bad).send(None)
    assert compiler.num_compiles == 2
    # a spec not compiled yet still awaits its compile
    assert asyncio.run(compiler.compile_async(StructuredOutputs(regex="[0-9]+"))) is not None
    assert compiler.num_compiles == 3


# ---- the whitespace between a JSON output's tokens ----------------------------------------------------------------

NO_STRINGS = json.dumps({"type": "object", "properties": {"a": {"type": "integer"},
                                                         "b": {"type": "array", "items": {"type": "boolean"}}},
                         "required": ["a", "b"]})


def check_whitespace_walks(using: Any = None, seeds: int = 12) -> None:
    """Compact JSON (disable_any_whitespace) has no whitespace at all where the default has some (a schema without
    free strings: every whitespace character is one between tokens); every walk is a valid document."""
    def texts(**whitespace: Any) -> list[str]:
        out = []
        for seed in range(seeds):
            text, ended = walk(StructuredOutputs(json=NO_STRINGS, **whitespace), seed, using=using, eos_after=4)
            assert ended, text
            jsonschema.validate(json.loads(text), json.loads(NO_STRINGS))
            out.append(text)
        return out

    assert any(c in text for text in texts() for c in " \n")  # (the default lets the walks write some)
    assert not any(c in text for text in texts(disable_any_whitespace=True) for c in " \t\n\r")


def test_disable_any_whitespace_writes_compact_json_and_a_pattern_bounds_the_whitespace() -> None:
    check_whitespace_walks()
    newlines = [walk(StructuredOutputs(json=NO_STRINGS, whitespace_pattern=r"\n?"), seed, eos_after=4)[0]
                for seed in range(12)]
    assert any("\n" in t for t in newlines) and not any(c in t for t in newlines for c in " \t\r")
    assert not any("\n\n" in t for t in newlines)


@pytest.mark.parametrize(("fields", "message"), [
    ({"regex": "a+", "disable_any_whitespace": True}, "applies to JSON outputs (json, json_object), not to regex"),
    ({"json_object": True, "whitespace_pattern": "x"}, r"'x' at character 0 may match more than JSON's whitespace"),
    ({"json_object": True, "whitespace_pattern": r"\s*"}, "may match more than JSON's whitespace"),
    ({"json_object": True, "whitespace_pattern": "[^a]"}, "may match more than JSON's whitespace"),
    ({"json_object": True, "whitespace_pattern": "[\\t-\\r]"}, "may match more than JSON's whitespace"),
    ({"json_object": True, "whitespace_pattern": " " * 300}, "has 300 characters; give a regular expression of 1 to"),
    ({"json_object": True, "whitespace_pattern": " ", "disable_any_whitespace": True}, "sets both"),
    ({"json_object": True, "whitespace_pattern": "[][ ]"}, "may match more than JSON's whitespace"),
    ({"json_object": True, "whitespace_pattern": " {0,4294967295}"}, "may match more than JSON's whitespace"),
    ({"json_object": True, "whitespace_pattern": " {\u0663}"}, "may match more than JSON's whitespace"),
])
def test_a_whitespace_setting_that_cannot_hold_is_refused_naming_it(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message) if "(" in message else message):
        StructuredOutputs(**fields)


def test_a_whitespace_pattern_that_is_no_regular_expression_is_refused_naming_it() -> None:
    for pattern in ("( ", "[ ", " )", " {2,1}"):
        with pytest.raises(ValueError, match=r"^structured_outputs\.whitespace_pattern .* is not a regular expression"):
            StructuredOutputs(json_object=True, whitespace_pattern=pattern)


def test_the_compilers_observer_hears_how_each_spec_was_settled() -> None:
    events: list[tuple[str, float | None]] = []
    gated = GatedBackend()
    compiler = GrammarCompiler(lambda: gated, timeout_s=30)
    compiler.observer = lambda event, seconds: events.append((event, seconds))
    gated.gate.set()
    spec, bad = StructuredOutputs(regex="[a-z]{2}"), StructuredOutputs(regex="(?=a)b")
    asyncio.run(compiler.compile_async(spec))
    asyncio.run(compiler.compile_async(spec))
    compiler.compile(spec)  # (make_request's look-up, after the server's: not a request of its own)
    with pytest.raises(ValueError):
        compiler.compile(bad)
    with pytest.raises(ValueError):
        asyncio.run(compiler.compile_async(bad))
    assert [e for e, _ in events] == ["compiled", "hit", "refused", "hit"]
    assert all(s is not None and 0 <= s < 30 for e, s in events if e in ("compiled", "refused"))
    # a compile in flight joined, then a wait given up at the limit
    events.clear()
    gated.gate.clear()
    while gated.started.acquire(blocking=False):  # (the compiles above each released it once)
        pass
    slow = StructuredOutputs(regex="[0-9]{4}")
    future, _, how = compiler._submit(slow)  # a compile started, held at the gate, no waiter's limit on it
    assert how == "new"
    assert gated.started.acquire(timeout=30)
    compiler.timeout_s = 0.1
    with pytest.raises(ValueError, match="compile limit"):
        asyncio.run(compiler.compile_async(slow))
    gated.gate.set()
    future.result(timeout=30)
    assert [e for e, _ in events] == ["shared", "timeout", "compiled"]


def test_a_schemas_own_llguidance_options_are_ignored() -> None:
    """llguidance reads options at a schema's root (x-guidance): a client's would override the server's whitespace
    and separators, and "lenient" would let keywords through unenforced. It is dropped, as a validator ignores x-
    keys: the keyword is refused all the same, and compact output stays compact."""
    with pytest.raises(ValueError, match="uniqueItems"):
        GrammarCompiler(backend).compile(StructuredOutputs(json=json.dumps(
            {"type": "array", "uniqueItems": True, "x-guidance": {"lenient": True}})))
    schema = json.loads(NO_STRINGS)
    schema["x-guidance"] = {"whitespace_pattern": "x+", "item_separator": "X"}
    for seed in range(6):
        text, ended = walk(StructuredOutputs(json=json.dumps(schema), disable_any_whitespace=True), seed, eos_after=4)
        assert ended and "x" not in text and "X" not in text, text
        jsonschema.validate(json.loads(text), json.loads(NO_STRINGS))
