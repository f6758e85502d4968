"""tool_choice "auto" with the hermes parser: an output that ends inside a call whose JSON is whole — its
``</tool_call>`` taken by a stop string (``"stop": ["</tool_call>"]``, which agent frameworks send) — is that call,
as vLLM's hermes parser reads it (``<tool_call>(.*)`` at the end of the output), whole and streamed at every split;
it was returned as content, the call lost (found in a hunt)."""

from __future__ import annotations

from typing import Any

from accelkit.serve.server.tool_parsers import FORMATS, split_calls
from accelkit.serve.server.tools import ToolCallDeltas, tool_calling

HERMES = FORMATS["hermes"]
TOOLS = [{"type": "function", "function": {"name": "add", "parameters": {
    "type": "object", "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}}}}}]
NAMES = frozenset({"add"})
# (what the server gives with stop ["</tool_call>"]: the output up to the stop string, which is left out)
STOPPED = 'Adding.\n<tool_call>\n{"name": "add", "arguments": {"a": 27, "b": "</tool_call>"}}\n'


def streamed(pieces: list[str]) -> tuple[str | None, list[tuple[str, str]], str | None]:
    calling = tool_calling(TOOLS, "auto", parallel_tool_calls=None, call_format=HERMES)
    assert calling is not None
    deltas, stream = [], ToolCallDeltas(calling)
    for i, piece in enumerate(pieces):
        deltas += stream.step(piece, i == len(pieces) - 1)
    content = "".join(d.get("content", "") for d in deltas) or None
    calls: dict[int, list[str]] = {}
    for delta in deltas:
        for call in delta.get("tool_calls", []):
            function: dict[str, Any] = call["function"]
            entry = calls.setdefault(call["index"], ["", ""])
            entry[0] += function.get("name", "")
            entry[1] += function["arguments"]
    return content, [(name, arguments) for name, arguments in calls.values()], stream.finish_reason("stop")


def test_a_call_whose_end_marker_a_stop_string_took_is_a_call_whole_and_streamed_at_every_split() -> None:
    expected = ("Adding.", [("add", '{"a": 27, "b": "</tool_call>"}')])
    assert split_calls(HERMES, NAMES, STOPPED) == expected
    for at in range(len(STOPPED) + 1):
        assert streamed([STOPPED[:at], STOPPED[at:]]) == (*expected, "tool_calls"), at


def test_an_output_cut_inside_a_call_whose_json_is_not_whole_stays_content() -> None:
    for cut in (STOPPED[:-3], STOPPED + "</tool_", STOPPED.replace('"add"', '"other"')):
        assert split_calls(HERMES, NAMES, cut) == (cut.strip(), [])
        assert streamed([cut[:20], cut[20:]]) == (cut.strip(), [], "stop")
