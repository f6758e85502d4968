"""Structured outputs on xgrammar (``--structured-outputs-backend xgrammar``), below the engine and through it: the
same tiny byte-level BPE, random walks and checks as the llguidance backend's tests (tests/unit/test_structured.py,
whose helpers are used here), the keywords xgrammar would drop refused in one line, the hostile specs of issue #28
under the compiler's time limit, and the choice of backend (config, CLI, a real server guiding with it)."""

from __future__ import annotations

import datetime
import functools
import json
import random
import re
import sys
from typing import Any

import jsonschema
import pytest
import torch

from accelkit.serve.config import EngineConfig
from accelkit.serve.sampling import StructuredOutputs
from accelkit.serve.structured import GrammarCompiler
from accelkit.serve.structured_schema import MAX_SCHEMA_DEPTH
from accelkit.serve.structured_xgrammar import XGrammarBackend, choice_grammar, is_ebnf
from accelkit.serve.testing import HOSTILE_SPECS, nested_properties
from tests.unit.test_structured import (
    EOS,
    REGEXES,
    SCHEMAS,
    VOCAB_SIZE,
    allowed_ids,
    check_allows_agrees_with_the_mask,
    check_answer_tag_walks,
    check_choice_walks,
    check_json_object_walks,
    check_opener,
    check_pydantic_walks,
    check_regex_walks,
    check_structural_tag_walks,
    check_whitespace_walks,
    guided_rows,
    tokenizer,
    walk,
    with_added_tokens,
)

WIDTH = (VOCAB_SIZE + 31) // 32


@functools.cache
def backend() -> XGrammarBackend:
    return XGrammarBackend(tokenizer(), VOCAB_SIZE, [EOS])


def xgrammar_allowed(matcher: Any) -> list[int]:
    """The ids xgrammar itself allows in ``matcher``'s state (not the mask kept at compile; xgrammar also sets the
    bits past the vocabulary in the last word, which the backend clears)."""
    row = torch.zeros(1, WIDTH, dtype=torch.int32)
    matcher.matcher.fill_next_token_bitmask(row, 0)
    return [t for t in allowed_ids(row[0]) if t < VOCAB_SIZE]


# ---- random walks: every text that ends is one the constraint accepts ---------------------------------------------

@pytest.mark.parametrize("pattern", REGEXES)
def test_regex_walks_end_in_full_matches(pattern: str) -> None:
    check_regex_walks(pattern, 3, using=backend())


def test_choice_walks_end_in_one_of_the_choices_whatever_characters_they_hold() -> None:
    # (a control character before a hex digit: written \\x0a then "b…", xgrammar read the escape on into the
    # letters and a choice came out as text no choice has — found in review)
    choices = ["yes", "no", 'say "hi"', "back\\slash", "two\nlines", "日本", "[a-z]*", "no\nbye", "\tdone\x7fe"]
    check_choice_walks(choices, 18, min_seen=2, using=backend())


def test_json_object_walks_end_in_json_objects() -> None:
    check_json_object_walks(using=backend())


def test_structural_tag_walks_write_a_whole_valid_call_after_each_trigger() -> None:
    check_structural_tag_walks(using=backend())


def test_a_tags_answer_gives_that_answer_or_calls_alone_on_xgrammar_too() -> None:
    check_answer_tag_walks(using=backend())


def test_a_structural_tag_triggered_by_a_special_token_is_refused_naming_the_other_backend() -> None:
    """xgrammar matches a trigger as text and refuses a special token's id: a model that writes <tool_call> as its
    one special token could never call, so the spec is a 400 pointing to llguidance (which matches it)."""
    engine = XGrammarBackend(with_added_tokens(True, "<tool_call>"), VOCAB_SIZE, [EOS])
    tag = {"structures": [{"begin": "<tool_call>", "schema": {"type": "object"}, "end": "</tool_call>"}],
           "triggers": ["<tool_call>"]}
    with pytest.raises(ValueError, match="special tokens of this model's tokenizer.*llguidance"):
        engine.compile(StructuredOutputs(structural_tag=tag))
    assert backend().compile(StructuredOutputs(structural_tag=tag)).matcher().accept_tokens(  # (text where not)
        tokenizer().encode('hi <tool_call>{"n": 1}</tool_call>'))


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_pydantic_schemas_give_documents_pydantic_and_jsonschema_accept(name: str) -> None:
    check_pydantic_walks(SCHEMAS[name], 5, using=backend())


@pytest.mark.parametrize(("fmt", "parse"), [("date", datetime.date.fromisoformat),
                                            ("date-time", datetime.datetime.fromisoformat)])
def test_date_formats_give_real_dates(fmt: str, parse: Any) -> None:
    """xgrammar's own ``date`` lets February 31 out; the backend's pattern allows each month's days only."""
    for seed in range(8):
        text, ended = walk(StructuredOutputs(json={"type": "string", "format": fmt}), seed, using=backend())
        assert ended, text
        parse(json.loads(text))


def test_length_bounded_strings_hold_no_raw_control_characters() -> None:
    """xgrammar's own rule for a length-bounded string lets raw control characters in (no JSON parser reads that);
    the backend's pattern keeps the bounds and the JSON."""
    schema = {"type": "object", "properties": {"s": {"type": "string", "minLength": 2, "maxLength": 24}},
              "required": ["s"]}
    for seed in range(12):
        text, ended = walk(StructuredOutputs(json=schema), seed, using=backend())
        assert ended, text
        assert 2 <= len(json.loads(text)["s"]) <= 24, text  # (json.loads refuses a raw control character)


def test_properties_named_like_keywords_are_properties() -> None:
    """The rewrite reads keywords at schema positions only: properties named ``format``, ``maxLength`` or
    ``pattern`` (a JSONSchemaBench schema has one named ``format``) are properties, rewritten as schemas."""
    schema = {"type": "object", "properties": {"format": {"type": "string", "maxLength": 5},
                                               "maxLength": {"type": "integer"},
                                               "pattern": {"type": "string", "format": "date"}},
              "required": ["format", "maxLength", "pattern"]}
    for seed in range(6):
        text, ended = walk(StructuredOutputs(json=schema), seed, max_steps=1500, using=backend())
        assert ended, text
        doc = json.loads(text)
        jsonschema.validate(doc, schema, format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER)
        assert len(doc["format"]) <= 5 and datetime.date.fromisoformat(doc["pattern"]), text


def test_declared_properties_come_out_in_order_and_no_others() -> None:
    """As with llguidance: an object's declared properties only (``additionalProperties: false`` added where the
    schema stays satisfiable), in the schema's order."""
    schema = {"type": "object", "properties": {"z": {"type": "integer"}, "a": {"type": "boolean"},
                                               "m": {"enum": ["x", "y"], "type": "string"}}, "required": ["z", "a", "m"]}
    for seed in range(4):
        text, ended = walk(StructuredOutputs(json=schema), seed, using=backend())
        assert ended and list(json.loads(text)) == ["z", "a", "m"], text


def test_a_grammar_is_read_as_ebnf_or_lark() -> None:
    ebnf = 'root ::= "n=" num\nnum ::= [0-9]+'
    lark = 'start: "n=" NUM\nNUM: /[0-9]+/'
    assert is_ebnf(ebnf) and not is_ebnf(lark) and is_ebnf(choice_grammar(["a"]))
    for grammar in (ebnf, lark):
        for seed in range(3):
            text, ended = walk(StructuredOutputs(grammar=grammar), seed, using=backend())
            assert ended and re.fullmatch("n=[0-9]+", text), (grammar, text)


# ---- the matcher: termination, rollback, the start mask, a step's rows ---------------------------------------------

def test_a_terminated_matcher_allows_only_eos_and_rollback_reopens_it() -> None:
    matcher = backend().compile(StructuredOutputs(choice=["no"])).matcher()
    ids = tokenizer().encode("no")
    bitmask = torch.zeros(1, WIDTH, dtype=torch.int32)
    assert matcher.accept_tokens(ids)
    backend().fill_bitmasks([(matcher, 0)], bitmask)
    assert allowed_ids(bitmask[0]) == [EOS]
    assert matcher.accept_tokens([EOS]) and matcher.is_terminated()
    backend().fill_bitmasks([(matcher, 0)], bitmask)  # (xgrammar itself fills no mask past EOS)
    assert allowed_ids(bitmask[0]) == [EOS]
    matcher.rollback(1 + len(ids))
    assert not matcher.is_terminated() and matcher.at_start()
    backend().fill_bitmasks([(matcher, 0)], bitmask)
    assert EOS not in allowed_ids(bitmask[0]) and ids[0] in allowed_ids(bitmask[0])


def test_a_refused_token_ends_the_request_with_eos_only() -> None:
    matcher = backend().compile(StructuredOutputs(regex="[0-9]+")).matcher()
    letter = tokenizer().encode("x")[0]
    assert not matcher.accept_tokens([letter]) and matcher.is_terminated()
    bitmask = torch.zeros(1, WIDTH, dtype=torch.int32)
    backend().fill_bitmasks([(matcher, 0)], bitmask)
    assert allowed_ids(bitmask[0]) == [EOS]


@pytest.mark.parametrize("spec", [StructuredOutputs(regex="[0-9]+x"), StructuredOutputs(choice=["yes", "no"]),
                                  StructuredOutputs(json_object=True), StructuredOutputs(regex="a{100000}")],
                         ids=["regex", "choice", "json_object", "counted-100k"])
def test_a_request_at_its_start_gets_the_mask_computed_at_compile(spec: StructuredOutputs) -> None:
    grammar = backend().compile(spec)
    first, other = grammar.matcher(), grammar.matcher()
    assert first.start_mask is other.start_mask and not first.start_mask.flags.writeable
    bitmask = torch.zeros(2, WIDTH, dtype=torch.int32)
    backend().fill_bitmasks([(first, 0), (other, 1)], bitmask)
    assert allowed_ids(bitmask[0]) == xgrammar_allowed(first) and torch.equal(bitmask[1], bitmask[0])
    assert first.accept_tokens([allowed_ids(bitmask[0])[0]]) and not first.at_start()
    bitmask.zero_()
    backend().fill_bitmasks([(first, 0)], bitmask)
    assert allowed_ids(bitmask[0]) == xgrammar_allowed(first)
    first.rollback(1)
    assert first.at_start() and xgrammar_allowed(first) == allowed_ids(torch.tensor(other.start_mask))


@pytest.mark.parametrize("parallel", [True, False])
def test_a_steps_rows_get_the_same_masks_batched_as_one_after_another(parallel: bool) -> None:
    specs = [StructuredOutputs(json_object=True), StructuredOutputs(regex="[a-z ]{1,40}[.]"),
             StructuredOutputs(choice=["alpha", "beta", "gamma"])]
    local = XGrammarBackend(tokenizer(), VOCAB_SIZE, [EOS])
    if parallel:  # (xgrammar's batch fill, used from 4 usable cores up)
        import xgrammar as xgr

        local._batch = xgr.BatchGrammarMatcher(max_threads=2)
    else:
        local._batch = None
    matchers = [local.compile(specs[i % 3]).matcher() for i in range(9)]
    rng = random.Random(3)
    for _ in range(10):
        batch = torch.zeros((len(matchers) + 1, WIDTH), dtype=torch.int32)
        local.fill_bitmasks([(m, i + 1) for i, m in enumerate(matchers)], batch)
        for i, m in enumerate(matchers):
            if not m.is_terminated():
                assert allowed_ids(batch[i + 1]) == xgrammar_allowed(m), (parallel, i)
            allowed = [t for t in allowed_ids(batch[i + 1]) if t != EOS]
            if allowed:
                assert m.accept_tokens([rng.choice(allowed)])
        assert not batch[0].any()  # (a row no matcher was given is left as it was)


# ---- refusals: one line naming the field, the keyword (and where) or the construct ---------------------------------

@pytest.mark.parametrize(("fields", "words"), [
    ({"json": {"type": "array", "uniqueItems": True}}, "keyword uniqueItems (at the root) cannot be enforced by the "
                                                      "xgrammar engine"),
    ({"json": {"type": "object", "properties": {"s": {"type": "string", "pattern": "^a+$", "maxLength": 3}}}},
     "keyword maxLength (at properties.s)"),
    ({"json": {"allOf": [{"type": "integer"}, {"minimum": 3}]}}, "keyword allOf (at the root)"),
    ({"json": {"type": "string", "anyOf": [{"maxLength": 3}, {"pattern": "^x"}]}}, "keyword type (at the root)"),
    ({"json": {"$defs": {"s": {"type": "string"}}, "$ref": "#/$defs/s", "maxLength": 2}}, "keyword maxLength"),
    ({"json": {"enum": ["a", 1], "type": "string"}}, "keyword type"),
    ({"json": {"type": "number", "multipleOf": 0.5}}, "keyword multipleOf"),
    ({"json": {"type": "object", "if": {"required": ["a"]}, "then": {"required": ["b"]}}}, "keyword if"),
    ({"json": {"$ref": "#/$defs/missing"}}, "missing"),
    # (found in review: xgrammar dropped these and let documents out that the schema rejects)
    ({"json": {"type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a", "b"]}},
     "keyword required (at the root)"),
    ({"json": {"type": "object", "required": ["a"]}}, "keyword required"),
    ({"json": {"$defs": {"s": {"$anchor": "small", "type": "integer", "maximum": 5}},
               "type": "object", "properties": {"a": {"$ref": "#small"}}}}, "keyword $ref (at properties.a)"),
    ({"json": {"type": "object", "properties": {"a": {"$ref": "http://example.com/s.json"}}}}, "keyword $ref"),
    ({"json": nested_properties(MAX_SCHEMA_DEPTH)}, "nests deeper than"),
    ({"regex": "(?<=a)b"}, "Lookbehind is not supported"),
    ({"regex": "(a"}, "parenthesis is not closed"),
    ({"regex": "a{4294967295}"}, "past the xgrammar engine's limit"),
    ({"regex": "a\x00b"}, "must not contain null characters"),
    ({"choice": ["yes", "x\ud800"]}, "not valid Unicode text"),
    ({"regex": "[^\\x00-\\U0010ffff]"}, "no text matches it"),
    ({"grammar": "start: x"}, "reads GBNF/EBNF"),
    ({"grammar": 'root ::= "a" | b'}, 'Rule "b" is not defined'),
])
def test_what_cannot_be_enforced_is_refused_in_one_line(fields: dict[str, Any], words: str) -> None:
    spec = StructuredOutputs(**fields)
    with pytest.raises(ValueError) as info:
        backend().compile(spec)
    message = str(info.value)
    assert words in message and "\n" not in message and message.startswith(f"structured_outputs.{spec.kind}: "), message


def test_what_it_enforces_beside_a_combinator_compiles_and_keys_a_validator_ignores_are_ignored() -> None:
    schema = {"id": "http://example.com/s", "title": "t", "type": "object", "x-extra": {"type": "string"},
              "properties": {"a": {"type": "integer", "readonly": True, "multipleOf": 3},
                             "e": {"enum": ["p", "q"], "type": "string", "description": "d"},
                             "u": {"type": "string", "format": "url"}},  # (a format it does not know: an annotation)
              "required": ["a", "e", "u"]}
    for seed in range(3):
        text, ended = walk(StructuredOutputs(json=schema), seed, using=backend())
        assert ended, text
        jsonschema.validate(json.loads(text), schema, format_checker=jsonschema.FormatChecker())


@pytest.mark.parametrize("name", sorted(HOSTILE_SPECS))
def test_each_hostile_spec_compiles_or_is_refused_by_the_compiler(name: str) -> None:
    """Under the server's own compiler (its wall-clock limit: a compile past it is a 400, never a hang here)."""
    compiler = GrammarCompiler(backend)
    try:
        grammar = compiler.compile(StructuredOutputs(**HOSTILE_SPECS[name]))
    except ValueError as exc:
        assert str(exc).startswith("structured_outputs.") and "\n" not in str(exc), exc
        assert "compile limit" not in str(exc), exc  # (refused for what it is, not for taking too long)
    else:
        bitmask = torch.zeros(1, WIDTH, dtype=torch.int32)
        backend().fill_bitmasks([(grammar.matcher(), 0)], bitmask)
        assert allowed_ids(bitmask[0])
    finally:
        compiler.shutdown()


def test_grammars_are_weighed_by_xgrammars_memory_size() -> None:
    small = backend().compile(StructuredOutputs(regex="a"))
    large = backend().compile(StructuredOutputs(regex="(x{1,1000}){1,1000}"))
    assert small.num_bytes < large.num_bytes
    assert large.num_bytes >= large._compiled.memory_size_bytes > 0


# ---- choosing the backend --------------------------------------------------------------------------------------

def test_the_backend_is_a_config_field_checked_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    assert EngineConfig(model="m").structured_outputs_backend == "llguidance"
    assert EngineConfig(model="m", structured_outputs_backend="xgrammar").structured_outputs_backend == "xgrammar"
    with pytest.raises(ValueError, match="structured_outputs_backend='outlines'.*'llguidance', 'xgrammar'"):
        EngineConfig(model="m", structured_outputs_backend="outlines")
    monkeypatch.setitem(sys.modules, "xgrammar", None)  # (as if it were not installed: find_spec finds nothing)
    with pytest.raises(ValueError, match=r"needs the xgrammar package, which is not installed; "
                                         r"pip install 'accelkit\[xgrammar\]'") as info:
        EngineConfig(model="m", structured_outputs_backend="xgrammar")
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match=r"pip install 'accelkit\[xgrammar\]'"):
        XGrammarBackend(tokenizer(), VOCAB_SIZE, [EOS])


def test_serve_refuses_an_unknown_or_missing_backend_in_one_line(tmp_path, capsys, monkeypatch) -> None:
    from tests.conftest import main_in_process

    (tmp_path / "config.json").write_text("{}")
    code, _, err = main_in_process(capsys, "serve", "--model", str(tmp_path), "--structured-outputs-backend", "outlines")
    assert code == 2 and "outlines" in err and "xgrammar" in err, err
    monkeypatch.setitem(sys.modules, "xgrammar", None)
    code, _, err = main_in_process(capsys, "serve", "--model", str(tmp_path), "--structured-outputs-backend", "xgrammar")
    lines = [line for line in err.splitlines() if "xgrammar" in line]
    assert code == 2 and len(lines) == 1, err
    assert "--structured-outputs-backend 'xgrammar'" in lines[0] and "pip install 'accelkit[xgrammar]'" in lines[0], err


def test_the_server_guides_with_the_xgrammar_backend_and_refuses_with_a_400(tmp_path) -> None:
    """Through the real engine and HTTP server on 127.0.0.1: vLLM's fields guided by xgrammar, a keyword it would
    drop refused as the llguidance backend refuses one (an OpenAI-style 400 naming it)."""
    import httpx

    from accelkit.serve.testing import save_bytelevel_model
    from tests.integration.serve_server_util import running_server

    model = save_bytelevel_model(tmp_path / "m", seed=3)
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 8}, "n": {"type": "integer"}},
              "required": ["name", "n"]}
    with running_server(str(model), max_model_len=256, structured_outputs_backend="xgrammar") as (url, state):
        def post(path: str, body: dict[str, Any]) -> httpx.Response:
            return httpx.post(f"{url}/v1/{path}", json={"model": "tiny", **body}, timeout=120)

        choices = ["yes", "no", "maybe so"]
        r = post("completions", {"prompt": "pick:", "max_tokens": 16, "guided_choice": choices, "n": 4, "seed": 2})
        assert r.status_code == 200, r.text
        assert all(c["text"] in choices and c["finish_reason"] == "stop" for c in r.json()["choices"]), r.json()
        r = post("chat/completions", {"messages": [{"role": "user", "content": "a person"}], "max_tokens": 96,
                                      "seed": 1, "n": 3, "response_format": {
                                          "type": "json_schema", "json_schema": {"name": "p", "schema": schema}}})
        assert r.status_code == 200, r.text
        done = [c["message"]["content"] for c in r.json()["choices"] if c["finish_reason"] == "stop"]
        assert done, r.json()  # (a random model: max_tokens may cut one off inside a long number)
        for content in done:
            jsonschema.validate(json.loads(content), schema)
        r = post("completions", {"prompt": "x", "max_tokens": 8,
                                 "guided_json": {"type": "array", "items": {"type": "integer"}, "uniqueItems": True}})
        assert r.status_code == 400 and "uniqueItems" in r.json()["error"]["message"], r.text
        assert state.engine.structured_compiler.backend().name == "xgrammar"


def test_a_matchers_check_of_one_token_agrees_with_its_mask() -> None:
    check_allows_agrees_with_the_mask(backend())


def test_xgrammar_rows_are_masked_first() -> None:
    """xgrammar's masks come mostly from its per-state cache and its check is an accept and a rollback: its rows are
    not drawn before their mask (drawing first was slower on 4 of 5 kinds, benchmarks/structured_outputs.py)."""
    from accelkit.serve.sampler import Sampler
    from accelkit.serve.sampling import SamplingParams

    params = [SamplingParams(temperature=1.0, max_tokens=4)] * 4
    seqs = guided_rows(StructuredOutputs(regex="[a-c]x"), params, using=backend())
    sampler = Sampler(torch.device("cpu"), seed=0)
    tokens = sampler(torch.zeros(4, VOCAB_SIZE), params, [s.seq_id for s in seqs], seqs)
    assert all(re.fullmatch("[a-c]x?", tokenizer().decode([t])) for t in tokens), tokens
    assert sampler.first_draws_allowed == sampler.first_draws_refused == 0


def test_a_guides_opener_works_on_xgrammar_as_on_llguidance() -> None:
    """The opener (a hybrid reasoning model's <think>) is the sampler's, whichever engine fills the mask."""
    check_opener(backend())


def test_compact_json_on_xgrammar_too_and_its_refusal_of_a_whitespace_pattern() -> None:
    check_whitespace_walks(using=backend())
    with pytest.raises(ValueError, match=r"^structured_outputs.whitespace_pattern: the xgrammar engine takes no "
                                         r"whitespace pattern; .* --structured-outputs-backend llguidance$"):
        GrammarCompiler(backend).compile(StructuredOutputs(json_object=True, whitespace_pattern=" ?"))
