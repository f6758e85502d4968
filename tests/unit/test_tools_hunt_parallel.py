"""``parallel_tool_calls: false`` under tool_choice "auto": only the model's first call is returned, streamed or
not, as vLLM does it (found in a hunt: it was ignored, a response held every call the model opened — 5 in one)."""

from __future__ import annotations

import json

import pytest

from accelkit.serve.server.tool_parsers import FORMATS
from accelkit.serve.server.tools import ToolCallDeltas, tool_calling

TOOLS = [{"type": "function", "function": {"name": "get_weather"}}, {"type": "function", "function": {"name": "add"}}]


def call(name: str, arguments: dict) -> str:
    return f'<tool_call>\n{{"name": "{name}", "arguments": {json.dumps(arguments)}}}\n</tool_call>'


TEXT = f"Sure. {call('add', {'a': 1})}{call('get_weather', {'city': 'Oslo'})}{call('add', {'a': 2})}"


@pytest.mark.parametrize(("parallel", "expected"), [
    (False, [("add", '{"a": 1}')]),
    (None, [("add", '{"a": 1}'), ("get_weather", '{"city": "Oslo"}'), ("add", '{"a": 2}')]),
    (True, [("add", '{"a": 1}'), ("get_weather", '{"city": "Oslo"}'), ("add", '{"a": 2}')]),
])
def test_auto_without_parallel_calls_returns_the_first_call_only(parallel, expected) -> None:
    calling = tool_calling(TOOLS, "auto", parallel_tool_calls=parallel, call_format=FORMATS["hermes"])
    assert calling is not None
    content, calls = calling.message(TEXT)
    assert content == "Sure." and calls is not None
    assert [(c["function"]["name"], c["function"]["arguments"]) for c in calls] == expected
    deltas = ToolCallDeltas(calling)
    out = [d for i in range(0, len(TEXT), 7) for d in deltas.step(TEXT[i:i + 7], False)] + deltas.step("", True)
    headers = [d["tool_calls"][0] for d in out if "id" in d.get("tool_calls", [{}])[0]]
    assert [(h["index"], h["function"]["name"]) for h in headers] == [(i, n) for i, (n, _) in enumerate(expected)]
    assert "".join(d["tool_calls"][0]["function"]["arguments"] for d in out if "tool_calls" in d) == \
        "".join(a for _, a in expected)
    assert "".join(d.get("content", "") for d in out) == "Sure."
    assert deltas.finish_reason("stop") == "tool_calls"
