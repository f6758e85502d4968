"""tool_choice "required" with several tools, one of whose parameters schema no call can satisfy (or that the grammar
engine refuses alone): a 400 naming that tool, before any generation (found in a hunt: the tools' schemas compiled
together — the calls' ``anyOf`` keeps the branches that can match and drops the others without a word — so the
request was a 200 whose model could never call that tool; with the tool alone it was already a 400)."""

from __future__ import annotations

import functools

import pytest

from accelkit.serve.server.serving_chat import tool_never_called
from accelkit.serve.server.tools import tool_calling
from accelkit.serve.structured import GrammarCompiler
from accelkit.serve.structured_backends import make_backend
from accelkit.serve.testing import build_bytelevel_tokenizer
from tests.unit.serving_util import run

OK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
UNSATISFIABLE = {"type": "object", "properties": {"a": {"type": "integer", "minimum": 5, "maximum": 2}},
                 "required": ["a"]}


def weather(parameters: dict) -> dict:
    return {"type": "function", "function": {"name": "get_weather", "parameters": parameters}}


@functools.cache
def guidable() -> GrammarCompiler:
    return GrammarCompiler(lambda: make_backend("llguidance", build_bytelevel_tokenizer(512), 512, [3]))


@pytest.mark.parametrize("parameters", [UNSATISFIABLE, {"type": "object", "properties": {"a": False},
                                                        "required": ["a"]}])
def test_a_tool_no_call_can_satisfy_is_named_though_the_tools_compile_together(parameters) -> None:
    calling = tool_calling([OK, weather(parameters)], "required", parallel_tool_calls=None)
    assert calling is not None
    run(guidable().compile_async(calling.spec()))  # (together they compile: the bug's 200)
    message = run(tool_never_called(calling, guidable().compile_async))
    assert message is not None
    assert message.startswith("tool_choice 'required': tools[1] ('get_weather').function.parameters: "), message
    assert "nsatisfiable" in message and "leave the tool out" in message


def test_tools_each_callable_and_other_tool_choices_pass() -> None:
    tools = [OK, weather({"type": "object", "properties": {"city": {"type": "string"}}})]
    calling = tool_calling(tools, "required", parallel_tool_calls=None)
    assert calling is not None and run(tool_never_called(calling, guidable().compile_async)) is None
    named = tool_calling([OK, weather(UNSATISFIABLE)], {"type": "function", "function": {"name": "get_time"}},
                         parallel_tool_calls=None)
    assert named is not None and run(tool_never_called(named, guidable().compile_async)) is None  # (its own path)
