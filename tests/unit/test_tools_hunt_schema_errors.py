"""A tool's bad ``function.parameters`` or ``function.strict`` is a 400 that names the tool — its place and its
function's name — under every tool_choice (found in a hunt: with several tools, "auto" and "required" said
``tools[1].function.parameters`` or, for a compile error of them all together, no tool at all; a non-object schema
and a ``strict`` of "yes" were accepted, where OpenAI refuses both)."""

from __future__ import annotations

import functools

import pytest

from accelkit.serve.server.errors import APIError
from accelkit.serve.server.serving_chat import tool_at_fault
from accelkit.serve.server.tool_parsers import FORMATS
from accelkit.serve.server.tools import tool_calling
from accelkit.serve.structured import GrammarCompiler
from accelkit.serve.structured_backends import make_backend
from accelkit.serve.testing import build_bytelevel_tokenizer, build_tokenizer
from tests.unit.serving_util import run

HERMES = FORMATS["hermes"]
OK = {"type": "function", "function": {"name": "get_time", "parameters": {"type": "object"}}}
CHOICES = ["auto", "required", {"type": "function", "function": {"name": "get_weather"}}]


def weather(**function) -> dict:
    return {"type": "function", "function": {"name": "get_weather", **function}}


def refused(tools: list, tool_choice) -> APIError:
    with pytest.raises(APIError) as err:
        tool_calling(tools, tool_choice, parallel_tool_calls=None, call_format=HERMES)
    assert err.value.status == 400 and err.value.param == "tools", err.value.message
    return err.value


AT = "tools[1] ('get_weather').function.parameters"


@pytest.mark.parametrize(("tool_choice", "error", "said"), [
    ("auto", "structural_tag: the keyword k (at structures[1].schema.properties.n) cannot be enforced",
     f"tool_choice 'auto': the keyword k (at {AT}.properties.n) cannot be enforced"),
    ("required", "json: the keyword k (at items.anyOf[1].properties.parameters.properties.n) cannot be enforced",
     f"tool_choice 'required': the keyword k (at {AT}.properties.n) cannot be enforced"),
    (CHOICES[2], "json: the keyword k (at properties.n) cannot be enforced",
     f"{AT}: the keyword k (at properties.n) cannot be enforced"),
])
def test_a_compile_error_names_the_tool_it_is_about(tool_choice, error, said) -> None:
    calling = tool_calling([OK, weather()], tool_choice, parallel_tool_calls=None, call_format=HERMES)
    assert calling is not None and calling.error_message(f"structured_outputs.{error}") == said


@pytest.mark.parametrize("tool_choice", [*CHOICES, "none"])
@pytest.mark.parametrize(("parameters", "said"), [({"type": "string"}, '"string"'), ({"type": "array"}, '"array"'),
                                                  ({"type": ["object", "null"]}, '["object", "null"]')])
def test_a_schema_that_is_not_an_object_is_refused_naming_the_tool(tool_choice, parameters, said) -> None:
    message = refused([OK, weather(parameters=parameters)], tool_choice).message
    assert message.startswith("tools[1] ('get_weather').function.parameters must have type \"object\" "), message
    assert f"not {said}" in message


@pytest.mark.parametrize("tool_choice", [*CHOICES, "none"])
@pytest.mark.parametrize(("strict", "said"), [("yes", '"yes"'), (1, "1"), (0, "0"), ({}, "{}")])
def test_a_strict_that_is_not_a_boolean_is_refused(tool_choice, strict, said) -> None:
    error = refused([OK, weather(strict=strict)], tool_choice)
    assert error.code == "invalid_value"
    assert error.message == (f"tools[1] ('get_weather').function.strict: Input should be a valid boolean (true or "
                             f"false), not {said}")


@pytest.mark.parametrize("tool_choice", [*CHOICES, "none"])
@pytest.mark.parametrize(("key", "said"), [("$defs", '"string"'), ("definitions", '"integer"')])
def test_a_root_ref_to_a_schema_that_is_not_an_object_is_refused_naming_it(tool_choice, key, said) -> None:
    parameters = {"$ref": f"#/{key}/A", key: {"A": {"type": said.strip('"')}}}
    message = refused([OK, weather(parameters=parameters)], tool_choice).message
    assert message.startswith(f"tools[1] ('get_weather').function.parameters.{key}.A (its $ref) must have type "
                              '"object" '), message
    assert f"not {said}" in message


@pytest.mark.parametrize("strict", [True, False, None])
def test_a_boolean_or_null_strict_and_an_object_schema_are_taken(strict) -> None:
    for parameters in ({"type": "object"}, {"type": ["object"]}, {}, None, {"$ref": "#/$defs/A", "$defs": {"A": {
            "type": "object", "properties": {"n": {"type": "integer"}}}}}, {"$ref": "#/$defs/A", "$defs": {"A": {}}}):
        tools = [OK, weather(strict=strict, parameters=parameters)]
        assert tool_calling(tools, "required", parallel_tool_calls=None, call_format=HERMES) is not None


def compiler(tokenizer) -> GrammarCompiler:
    return GrammarCompiler(lambda: make_backend("llguidance", tokenizer, 512, [3]))


@functools.cache
def guidable() -> GrammarCompiler:
    return compiler(build_bytelevel_tokenizer(512))


@pytest.mark.parametrize("tool_choice", ["required", "auto"])
def test_an_error_of_the_tools_together_that_names_none_is_said_of_the_one_at_fault(tool_choice) -> None:
    # (the engine's error for a bad "type" keyword names no path: it was "tool_choice 'required': Invalid type: …")
    tools = [OK, weather(parameters={"type": "object", "properties": {"x": {"type": "nonsense"}}})]
    calling = tool_calling(tools, tool_choice, parallel_tool_calls=None, call_format=HERMES)
    assert calling is not None
    message = run(tool_at_fault(calling, guidable().compile_async))
    assert message is not None
    assert message.startswith(f"tool_choice {tool_choice!r}: tools[1] ('get_weather').function.parameters: ")
    assert "nonsense" in message
    good = tool_calling([OK, weather()], tool_choice, parallel_tool_calls=None, call_format=HERMES)
    assert good is not None and run(tool_at_fault(good, guidable().compile_async)) is None


def test_an_error_that_is_not_about_the_tools_is_said_of_none() -> None:
    calling = tool_calling([OK, weather()], "required", parallel_tool_calls=None, call_format=HERMES)
    assert calling is not None  # (a word-level tokenizer: no structured output compiles)
    assert run(tool_at_fault(calling, compiler(build_tokenizer()).compile_async)) is None


@pytest.mark.parametrize(("function", "said"), [
    ({"name": 5}, "tools[1].function.name must be a string (the function's name), not 5"),
    ({"name": ["f"]}, 'tools[1].function.name must be a string (the function\'s name), not ["f"]'),
    ({"name": ""}, "tools[1].function.name is missing; every tool needs a function name"),
    ({"name": "f", "description": 5}, "tools[1] ('f').function.description must be a string, not 5"),
])
def test_a_name_or_description_that_is_not_a_string_is_refused_as_such(function, said) -> None:
    # (a number for a name was "… is missing"; a number for a description reached the chat template)
    assert refused([OK, {"type": "function", "function": function}], "required").message == said
