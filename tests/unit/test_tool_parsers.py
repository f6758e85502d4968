"""tool_choice "auto": reading calls in a model's own format out of its text (``tool_parsers``), whole and as it
streams, and the 400s of a request whose tools the constraint cannot take; a reasoning model's thinking split from
its answer (``reasoning``)."""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.serve.sampling import structural_tags
from accelkit.serve.server.errors import APIError
from accelkit.serve.server.reasoning import REASONING_FORMATS, ReasoningSplitter, split_reasoning, thinks_first
from accelkit.serve.server.tool_parsers import (
    FORMATS,
    MISTRAL_V11,
    CallScanner,
    MarkerScanner,
    call_format,
    split_calls,
)
from accelkit.serve.server.tools import ToolCallDeltas, tool_calling

HERMES = FORMATS["hermes"]
NAMES = frozenset({"get_weather", "add"})


def call(name: str, arguments: object) -> str:
    return f'<tool_call>\n{json.dumps({"name": name, "arguments": arguments})}\n</tool_call>'


def test_calls_are_read_out_of_the_text_and_the_rest_is_the_content() -> None:
    text = f"  Let me check.\n{call('get_weather', {'city': 'Paris'})}\n{call('add', {'a': 1, 'b': 2})}\n"
    content, calls = split_calls(HERMES, NAMES, text)
    assert content == "Let me check."
    assert calls == [("get_weather", '{"city": "Paris"}'), ("add", '{"a": 1, "b": 2}')]
    assert split_calls(HERMES, NAMES, call("add", {}) + "\n ") == (None, [("add", "{}")])
    assert split_calls(HERMES, NAMES, "no calls,\n just text ") == ("no calls,\n just text", [])
    assert split_calls(HERMES, NAMES, "") == (None, [])


@pytest.mark.parametrize("bad", [
    call("mul", {"a": 1}),  # a tool the request does not have
    '<tool_call>\n{"name": "add", "arguments": {"a": 1\n</tool_call>',  # not JSON
    '<tool_call>\n{"name": "add"}\n</tool_call>',  # no arguments
    '<tool_call>\n["add"]\n</tool_call>',
    '<tool_call>\n{"name": "add", "arguments": {"a"',  # cut short by max_tokens
])
def test_what_is_not_a_whole_call_to_a_given_tool_stays_in_the_content_as_written(bad: str) -> None:
    content, calls = split_calls(HERMES, NAMES, f"before {call('add', {'a': 1})} {bad}")
    assert calls == [("add", '{"a": 1}')] and content == f"before  {bad}"


def test_a_call_the_model_writes_verbatim_gives_its_arguments_back_as_json_text() -> None:
    """Non-ASCII stays as written (ensure_ascii off), as vLLM's hermes parser returns it."""
    _, calls = split_calls(HERMES, NAMES, call("get_weather", {"city": "Zürich"}))
    assert calls == [("get_weather", '{"city": "Zürich"}')]


LLAMA, MISTRAL = FORMATS["llama3_json"], FORMATS["mistral"]
PIECES = ["<tool_call>", "</tool_call>", "<tool", "_call>", "<", "/", ">", "\n", " ", "hi", "{", "}", '"name"', ": ",
          '"add"', ", ", '"arguments"', '{"a": 1}', '{"name": "add", "arguments": {"a": 1}}', "é", ";", '{"name": ',
          "[TOOL_CALLS]", "[TOOL", "_CALLS]", "[", "]", ' [{"name": "add", "arguments": {"b": 2}}]',
          call("add", {"a": 1}), call("get_weather", {"city": " <tool"}), call("mul", {}),
          '{"name": "add", "parameters": {"a": "}"}}', '{"name": "get_weather", "parameters": {}}; ',
          "[ARGS]", "[CALL_ID]", "add", "get_weather", "x9Kq2", '{"city": "Oslo"}', "[TOOL_CALLS]add[ARGS]{}"]


def fed_in_pieces(scanner: MarkerScanner[Any], text: str, cuts: list[int]) -> list[Any]:
    """Every event of ``text`` fed to ``scanner`` in pieces of the lengths ``cuts`` (in turn), then finished."""
    events, at, k = [], 0, 0
    while at < len(text):
        events += scanner.feed(text[at:at + cuts[k % len(cuts)]], finished=False)
        at, k = at + cuts[k % len(cuts)], k + 1
    return events + scanner.feed("", finished=True)


@pytest.mark.parametrize("fmt", [HERMES, LLAMA, MISTRAL, MISTRAL_V11],
                         ids=lambda f: f.name + ("_v11" if f.args_marker else ""))
@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.sampled_from(PIECES), max_size=40),
       cuts=st.lists(st.integers(1, 12), min_size=1, max_size=40))
def test_the_streamed_events_join_to_the_whole_texts(fmt, pieces: list[str], cuts: list[int]) -> None:
    """Fed in any pieces, the scanner gives the same content and calls as the whole text: it holds back what may
    still be the start of a marker or an open call, and whitespace that may still end the content."""
    text = "".join(pieces)
    content, calls = "", []
    for event in fed_in_pieces(CallScanner(fmt, NAMES), text, cuts):
        if event[0] == "content":
            content += event[1]
        else:
            calls.append((event[1], event[2]))
    whole = split_calls(fmt, NAMES, text)
    assert (content or None, calls) == whole, text


def test_llama_calls_are_json_objects_separated_by_semicolons() -> None:
    """Llama 3.1-3.3 write the call's JSON object itself (the <|python_tag|> before it is special: not in the
    text); the call ends where the object does — a "}" inside a string does not end it."""
    text = ' {"name": "add", "parameters": {"a": "}"}}; {"name": "get_weather", "parameters": {"city": "Oslo"}}'
    assert split_calls(LLAMA, NAMES, text) == (None, [("add", '{"a": "}"}'), ("get_weather", '{"city": "Oslo"}')])
    assert split_calls(LLAMA, NAMES, 'I will call {"name": "add", "arguments": {"a": 1}} now.') == (
        "I will call now.", [("add", '{"a": 1}')])  # ("arguments" read too, as vLLM's parser does)
    cut = '{"name": "add", "parameters": {"a"'
    assert split_calls(LLAMA, NAMES, f"x; {cut}") == (f"x; {cut}", [])
    assert LLAMA.structural_tag([("add", {"type": "object"})]) == {
        "structures": [{"begin": '{"name": "add", "parameters": ', "schema": {"type": "object"}, "end": "}"}],
        "triggers": ['{"name": ']}


def test_mistral_calls_are_a_json_array_after_its_special_token() -> None:
    """Mistral writes [TOOL_CALLS] (a special token: in the text only where special tokens are kept), then one
    JSON array of calls; every element must be a call to a given tool, or the whole array stays content."""
    two = '[TOOL_CALLS] [{"name": "add", "arguments": {"a": 1}}, {"name": "get_weather", "arguments": {"city": "]"}}]'
    assert split_calls(MISTRAL, NAMES, "Sure. " + two) == ("Sure.", [("add", '{"a": 1}'),
                                                                    ("get_weather", '{"city": "]"}')])
    unknown = '[TOOL_CALLS] [{"name": "add", "arguments": {}}, {"name": "rm", "arguments": {}}]'
    for text in (unknown, "[TOOL_CALLS] []", '[TOOL_CALLS] {"name": "add", "arguments": {}}',
                 '[TOOL_CALLS] [{"name": "add", "arguments"'):
        assert split_calls(MISTRAL, NAMES, text) == (text, []), text
    assert MISTRAL.structural_tag([("add", {"type": "object"})]) == {
        "structures": [{"begin": '[TOOL_CALLS] [{"name": "add", "arguments": ', "schema": {"type": "object"},
                        "end": "}]"}],
        "triggers": ["[TOOL_CALLS]"]}


def test_mistral_v11_calls_are_a_name_and_arguments_after_each_special_token() -> None:
    """From v11 on, each call is [TOOL_CALLS], the bare name, [ARGS] and the arguments object (v13 may put [CALL_ID]
    and an id before [ARGS]: read and dropped); a call to an unknown tool, or cut short, stays content."""
    two = '[TOOL_CALLS]add[ARGS]{"a": 1}[TOOL_CALLS]get_weather[CALL_ID]x9Kq2mN0p[ARGS] {"city": "}"}'
    assert split_calls(MISTRAL_V11, NAMES, "Sure. " + two) == ("Sure.", [("add", '{"a": 1}'),
                                                                        ("get_weather", '{"city": "}"}')])
    for text in ('[TOOL_CALLS]rm[ARGS]{"a": 1}', "[TOOL_CALLS]add", '[TOOL_CALLS]add[ARGS]{"a": 1',
                 "[TOOL_CALLS]add[ARGS]"):
        assert split_calls(MISTRAL_V11, NAMES, text) == (text, []), text
    assert MISTRAL_V11.structural_tag([("add", {"type": "object"})]) == {
        "structures": [{"begin": "[TOOL_CALLS]add[ARGS]", "schema": {"type": "object"}, "end": ""}],
        "triggers": ["[TOOL_CALLS]"]}


def test_mistral_v11_arguments_are_an_object_and_names_are_bare() -> None:
    """What follows [ARGS] is a call only as an object (decided on its first character, so streamed and whole
    agree), and a name that cannot stand bare before [ARGS] is a 400."""
    for text in ("[TOOL_CALLS]add[ARGS]12", "[TOOL_CALLS]add[ARGS] null"):
        assert split_calls(MISTRAL_V11, NAMES, text) == (text, []), text
    assert split_calls(MISTRAL_V11, NAMES, '[TOOL_CALLS]add[ARGS]1[TOOL_CALLS]add[ARGS]{"a": 1}') == (
        "[TOOL_CALLS]add[ARGS]1", [("add", '{"a": 1}')])
    spaced = [{"type": "function", "function": {"name": "get weather"}}]
    with pytest.raises(APIError, match=r"tools\[0\].function.name 'get weather': .* write a function's name bare"):
        tool_calling(spaced, "auto", parallel_tool_calls=None, call_format=MISTRAL_V11)
    assert tool_calling(spaced, "auto", parallel_tool_calls=None, call_format=HERMES) is not None


def test_numbers_past_a_floats_range_stay_as_written_so_the_arguments_are_json() -> None:
    """JSON has no range limit and a grammar lets ``1e400`` through; read into a float and written again it would be
    ``Infinity``, which is not JSON: such numbers are given back as the model wrote them, in every path."""
    def strict(text: str) -> Any:
        return json.loads(text, parse_constant=lambda c: pytest.fail(f"{c} in {text}"))

    arguments = '{"x": 1e400, "y": [2.5, -1E+999, {"z": 1e-999}]}'
    written = '{"x": 1e400, "y": [2.5, -1E+999, {"z": 0.0}]}'  # (an underflow is a float: written as one)
    _, made = split_calls(HERMES, NAMES, f'<tool_call>\n{{"name": "add", "arguments": {arguments}}}\n</tool_call>')
    assert made == [("add", written)] and strict(made[0][1])["y"][2] == {"z": 0.0}
    _, made = split_calls(MISTRAL_V11, NAMES, f"[TOOL_CALLS]add[ARGS]{arguments}")
    assert made == [("add", written)]
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    required = tool_calling(tools, "required", parallel_tool_calls=None)
    assert required is not None
    calls = required.calls(f'[{{"name": "add", "parameters": {arguments}}}]')
    assert calls is not None and calls[0]["function"]["arguments"] == written


@pytest.mark.parametrize("fmt", [None, HERMES, LLAMA, MISTRAL, MISTRAL_V11])
def test_arguments_are_an_object_where_a_tools_parameters_name_no_type(fmt) -> None:
    """``"parameters": {}`` (the usual way to declare no arguments) and a schema without a type still give an
    object — a call's arguments are one in OpenAI's format — for every tool_choice and every format."""
    tools = [{"type": "function", "function": {"name": "add", "parameters": {}}},
             {"type": "function", "function": {"name": "mul", "parameters": {"properties": {"a": {}}}}},
             {"type": "function", "function": {"name": "neg", "parameters": {"type": "object", "properties": {}}}}]
    want = [{"type": "object"}, {"properties": {"a": {}}, "type": "object"}, {"type": "object", "properties": {}}]
    if fmt is not None:
        tag = tool_calling(tools, "auto", parallel_tool_calls=None, call_format=fmt)
        assert tag is not None and [s["schema"] for s in tag.schema["structures"]] == want
    named = tool_calling(tools, {"type": "function", "function": {"name": "add"}}, parallel_tool_calls=None,
                         call_format=fmt)
    assert named is not None and named.schema == want[0]
    required = tool_calling(tools, "required", parallel_tool_calls=None, call_format=fmt)
    assert required is not None
    branches = required.schema["items"]["anyOf"]
    assert [b["properties"]["parameters"] for b in branches] == want


@pytest.mark.parametrize("choice", ["auto", "required", {"type": "function", "function": {"name": "add"}}])
def test_call_ids_are_the_nine_characters_mistral_templates_take_back_with_its_parser(choice) -> None:
    """Mistral's chat templates raise on a call id that is not 9 letters and digits when the conversation comes
    back with the call: with its parser every call's id is one (vLLM's Mistral parser's form); OpenAI's
    ``call_…`` otherwise."""
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    texts = {"auto": '[TOOL_CALLS] [{"name": "add", "arguments": {}}]', "required": '[{"name": "add", "parameters": {}}]'}
    text = texts.get(choice, "{}") if isinstance(choice, str) else "{}"
    for fmt, pattern in ((MISTRAL, r"[A-Za-z0-9]{9}"), (HERMES, r"call_[0-9a-f]{24}")):
        if choice == "auto" and fmt is HERMES:
            text = '<tool_call>\n{"name": "add", "arguments": {}}\n</tool_call>'
        calling = tool_calling(tools, choice, parallel_tool_calls=None, call_format=fmt)
        assert calling is not None
        _, calls = calling.message(text)
        assert calls is not None and len(calls) == 1 and re.fullmatch(pattern, calls[0]["id"]), (fmt.name, calls)
        deltas = ToolCallDeltas(calling)
        streamed = deltas.step(text, finished=True)
        ids = [c["id"] for d in streamed for c in d.get("tool_calls", []) if "id" in c]
        assert len(ids) == 1 and re.fullmatch(pattern, ids[0]), (fmt.name, streamed)
    assert len({tool_calling(tools, choice, parallel_tool_calls=None, call_format=MISTRAL).new_id()
                for _ in range(50)}) == 50  # (random, not a counter that two servers would repeat)


def test_mistral_is_the_v11_form_where_the_tokenizer_has_its_args_token() -> None:
    assert call_format("mistral", {"[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"}) is MISTRAL_V11
    assert call_format("mistral", {"[TOOL_CALLS]"}) is MISTRAL
    assert call_format("hermes", {"[ARGS]"}) is HERMES and call_format(None, {"[ARGS]"}) is None


TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {
            "type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
         {"type": "function", "function": {"name": "add"}}]


def test_auto_with_a_parser_constrains_each_call_to_a_given_tool() -> None:
    """The structural tag: one structure per tool, in the model's format, opened by its call marker; a tool without
    parameters takes an empty object."""
    calling = tool_calling(TOOLS, None, parallel_tool_calls=None, call_format=HERMES)
    assert calling is not None and calling.kind == "auto" and calling.names == NAMES
    assert calling.spec().structural_tag is not None
    structures = structural_tags(json.loads(calling.spec().structural_tag))
    assert structures == [
        ("<tool_call>", '<tool_call>\n{"name": "get_weather", "arguments": ', TOOLS[0]["function"]["parameters"],
         "}\n</tool_call>"),
        ("<tool_call>", '<tool_call>\n{"name": "add", "arguments": ', {"type": "object", "properties": {}},
         "}\n</tool_call>")]
    assert tool_calling(TOOLS, "none", parallel_tool_calls=None, call_format=HERMES) is None
    assert tool_calling(None, "auto", parallel_tool_calls=None, call_format=HERMES) is None
    many = [{"type": "function", "function": {"name": f"f{i}"}} for i in range(257)]
    with pytest.raises(APIError, match=r"^tools has 257 functions; tool_choice 'auto' constrains at most 256"):
        tool_calling(many, "auto", parallel_tool_calls=None, call_format=HERMES)
    assert tool_calling(many[:256], "auto", parallel_tool_calls=None, call_format=HERMES) is not None
    with pytest.raises(APIError, match=r"tools\[1\]\.function\.name"):
        tool_calling([TOOLS[0], {"type": "function", "function": {}}], "auto", parallel_tool_calls=None,
                     call_format=HERMES)


def test_a_constraint_error_names_the_tool() -> None:
    calling = tool_calling(TOOLS, "auto", parallel_tool_calls=None, call_format=HERMES)
    assert calling is not None
    message = ("structured_outputs.structural_tag: the JSON Schema keyword uniqueItems (at "
               "structures[1].schema.properties.n) cannot be enforced")
    assert calling.error_message(message) == ("tool_choice 'auto': the JSON Schema keyword uniqueItems (at "
                                              "tools[1] ('add').function.parameters.properties.n) cannot be enforced")


def test_streamed_deltas_give_content_then_each_call_with_its_own_index() -> None:
    calling = tool_calling(TOOLS, "auto", parallel_tool_calls=None, call_format=HERMES)
    assert calling is not None
    deltas = ToolCallDeltas(calling)
    text = f"Sure. {call('add', {'a': 1})}{call('get_weather', {'city': 'Oslo'})}"
    out = [d for i in range(0, len(text), 5) for d in deltas.step(text[i:i + 5], False)] + deltas.step("", True)
    assert "".join(d.get("content", "") for d in out) == "Sure."
    headers = [d["tool_calls"][0] for d in out if "id" in d.get("tool_calls", [{}])[0]]
    assert [(h["index"], h["function"]["name"]) for h in headers] == [(0, "add"), (1, "get_weather")]
    assert len({h["id"] for h in headers}) == 2
    arguments = [d["tool_calls"][0]["function"]["arguments"] for d in out if "tool_calls" in d]
    assert "".join(arguments) == '{"a": 1}{"city": "Oslo"}'
    assert deltas.finish_reason("stop") == "tool_calls" and deltas.finish_reason("length") == "length"


# ---- reasoning (--reasoning-parser) ------------------------------------------------------------------------------

R1, QWEN3 = REASONING_FORMATS["deepseek_r1"], REASONING_FORMATS["qwen3"]


@pytest.mark.parametrize(("fmt", "text", "split"), [
    (R1, "<think>\nhmm</think>\n\nHello", ("\nhmm", "Hello")),
    (R1, "hmm, let me see</think>Hello </think> x", ("hmm, let me see", "Hello </think> x")),  # (<think> in the prompt)
    (R1, "still thinking when max_tokens cut it", ("still thinking when max_tokens cut it", "")),
    (R1, "</think>  \n", (None, "")),
    (QWEN3, "  <think>hmm</think>\n\nHello", ("hmm", "Hello")),
    (QWEN3, "Hello</think>", (None, "Hello</think>")),  # (thinking off: no <think>, all content)
    (QWEN3, "<think>cut short", ("cut short", "")),
    (QWEN3, "", (None, "")),
])
def test_reasoning_is_split_from_the_answer(fmt, text: str, split: tuple[str | None, str]) -> None:
    assert split_reasoning(fmt, text) == split


RPIECES = ["<think>", "</think>", "<th", "ink>", "</", "think>", " ", "\n", "hm", "é", "<", "/", ">", "ok"]


@pytest.mark.parametrize("fmt", [R1, QWEN3], ids=lambda f: f.name)
@settings(max_examples=200, deadline=None)
@given(pieces=st.lists(st.sampled_from(RPIECES), max_size=30),
       cuts=st.lists(st.integers(1, 9), min_size=1, max_size=30))
def test_streamed_reasoning_and_content_join_to_the_whole_split(fmt, pieces: list[str], cuts: list[int]) -> None:
    text = "".join(pieces)
    parts = {"reasoning": "", "content": ""}
    for kind, part in fed_in_pieces(ReasoningSplitter(fmt), text, cuts):
        parts[kind] += part
    assert (parts["reasoning"] or None, parts["content"]) == split_reasoning(fmt, text), text


@pytest.mark.parametrize(("generation_prompt", "r1", "qwen3"), [
    ("<|Assistant|><think>\n", True, True),  # the template opened <think> (DeepSeek-R1, QwQ, Qwen3-Thinking-2507)
    ("<|im_start|>assistant\n<think>\n\n</think>\n\n", False, False),  # Qwen3 with enable_thinking false
    ("<|im_start|>assistant\n", True, None),  # neither: deepseek_r1 takes it that the model thinks; qwen3's decides
    (None, True, None),  # none known (continue_final_message): the same
    ("</think>x<think>", True, True),  # closed, then opened again
])
def test_whether_the_output_begins_with_thinking_is_read_from_the_generation_prompt(
        generation_prompt, r1: bool, qwen3: bool | None) -> None:
    """Only what the template adds for the model's turn counts: an earlier turn's thinking, kept in the messages,
    says nothing about this output (it is not in the generation prompt)."""
    assert thinks_first(R1, generation_prompt) is r1 and thinks_first(QWEN3, generation_prompt) is qwen3


@pytest.mark.parametrize(("fmt", "opens", "text", "split"), [
    (QWEN3, False, "  {\"a\": 1}", (None, "  {\"a\": 1}")),  # closed in the prompt: all answer, as written
    (R1, False, "<think>x</think>y", (None, "<think>x</think>y")),
    (QWEN3, True, "still thinking</think> answer", ("still thinking", "answer")),  # opened: inside it from the start
    (QWEN3, None, " 42", (None, " 42")),  # thinking off, no tag: as written (no </think>, so no space dropped)
])
def test_the_split_starts_where_the_prompt_leaves_the_thinking(fmt, opens, text: str, split) -> None:
    fmt = dataclasses.replace(fmt, prompt_opens=opens)
    assert split_reasoning(fmt, text) == split
    splitter, parts = ReasoningSplitter(fmt), {"reasoning": "", "content": ""}
    for i, ch in enumerate(text):  # (streamed a character at a time: the same split)
        for kind, part in splitter.feed(ch, i == len(text) - 1):
            parts[kind] += part
    assert (parts["reasoning"] or None, parts["content"]) == split
