"""tool_choice "auto" calls that the structural tag lets a model write, read back as the calls they are (found in a
hunt): a Hermes call whose arguments hold its own end marker ``</tool_call>`` (code, a file's content), and
arguments holding a lone surrogate escape (``"\\ud83d"``), which made the non-streamed response unsendable (a 500)."""

from __future__ import annotations

import json

from fastapi.responses import JSONResponse

from accelkit.serve.server.tool_parsers import FORMATS, CallScanner, split_calls
from accelkit.serve.server.tools import ToolCallDeltas, tool_calling

HERMES = FORMATS["hermes"]
TOOLS = [{"type": "function", "function": {"name": "write_file", "parameters": {
    "type": "object", "properties": {"path": {"type": "string"}, "content": {"type": "string"}}}}}]
NAMES = frozenset({"write_file"})


def hermes_call(arguments: dict[str, str]) -> str:
    return f'<tool_call>\n{json.dumps({"name": "write_file", "arguments": arguments})}\n</tool_call>'


def streamed(text: str, piece: int) -> tuple[str | None, list[tuple[str, str]]]:
    scanner, events = CallScanner(HERMES, NAMES), []
    for at in range(0, len(text), piece):
        events += scanner.feed(text[at:at + piece], finished=False)
    events += scanner.feed("", finished=True)
    content = "".join(e[1] for e in events if e[0] == "content") or None
    return content, [(e[1], e[2]) for e in events if e[0] == "call"]


def test_a_hermes_call_whose_arguments_hold_its_end_marker_is_a_call_whole_and_streamed() -> None:
    arguments = {"path": "parser.py", "content": 'END = "</tool_call>"  # then <tool_call> again </tool_call>'}
    text = f"Writing it.\n{hermes_call(arguments)}\nDone."
    expected = ("Writing it.\n\nDone.", [("write_file", json.dumps(arguments))])
    assert split_calls(HERMES, NAMES, text) == expected
    for piece in (1, 3, 7):
        assert streamed(text, piece) == expected


def test_a_malformed_hermes_call_is_content_up_to_its_first_end_marker_and_a_call_after_it_is_read() -> None:
    """A string left open (written unconstrained) spans no marker for ever: the call is text up to its first
    ``</tool_call>``, as before, and the next call is still read — whole and streamed alike."""
    bad = '<tool_call>\n{"name": "write_file", "arguments": {"path": "a</tool_call>'
    text = f"{bad}\n{hermes_call({'path': 'b'})}"
    expected = (bad, [("write_file", '{"path": "b"}')])
    assert split_calls(HERMES, NAMES, text) == expected
    assert streamed(text, 2) == expected
    cut = '<tool_call>\n{"name": "write_file", "arguments": {"path": "a</tool_call> and more'  # never closed
    assert split_calls(HERMES, NAMES, cut) == (cut, []) == streamed(cut, 4)


def test_arguments_with_a_lone_surrogate_escape_are_json_a_response_can_send() -> None:
    text = '<tool_call>\n{"name": "write_file", "arguments": {"content": "\\ud83d cut emoji, \\u00e9"}}\n</tool_call>'
    calling = tool_calling(TOOLS, "auto", parallel_tool_calls=None, call_format=HERMES)
    assert calling is not None
    content, calls = calling.message(text)
    assert content is None and calls is not None
    arguments = calls[0]["function"]["arguments"]
    assert json.loads(arguments) == {"content": "\ud83d cut emoji, é"}  # (the value the model wrote)
    assert "é" in arguments  # (non-ASCII kept as written)
    response = JSONResponse({"choices": [{"message": {"content": content, "tool_calls": calls}}]})
    assert json.loads(response.body)["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"] == arguments
    deltas = ToolCallDeltas(calling).step(text, True)  # (streamed: the same arguments)
    assert "".join(d["tool_calls"][0]["function"]["arguments"] for d in deltas) == arguments
    required = tool_calling(TOOLS, "required", parallel_tool_calls=None)
    assert required is not None
    forced = required.calls('[{"name": "write_file", "parameters": {"path": "\\udc00"}}]')
    assert forced is not None and JSONResponse(forced).body.decode().count("\\\\udc00") == 1


def test_a_call_nested_deeper_than_pythons_decoder_goes_is_content_not_a_crash() -> None:
    """A model stuck repeating ``[`` inside arguments typed as any JSON (what the constraint allows) until
    ``max_tokens``: the text is content, whole and streamed, for every format ("required" too) — it raised
    RecursionError, a 500 (a broken stream) for the whole response."""
    deep = "[" * 3000
    for parser, text in [("llama3_json", '{"name": "write_file", "parameters": {"content": ' + deep),
                         ("mistral", '[TOOL_CALLS] [{"name": "write_file", "arguments": {"content": ' + deep),
                         ("hermes", hermes_call({}).replace("{}", '{"content": ' + deep + "]" * 3000 + "}"))]:
        calling = tool_calling(TOOLS, "auto", parallel_tool_calls=None, call_format=FORMATS[parser])
        assert calling is not None
        assert calling.message(text) == (text, None), parser
        deltas = ToolCallDeltas(calling)
        out = [d for at in range(0, len(text), 500) for d in deltas.step(text[at:at + 500], False)]
        assert "".join(d["content"] for d in out + deltas.step("", True)) == text, parser
    required = tool_calling(TOOLS, "required", parallel_tool_calls=None)
    assert required is not None
    cut = '[{"name": "write_file", "parameters": {"content": ' + deep
    assert required.message(cut) == (cut, None)
