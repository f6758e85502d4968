"""tool_choice "required" lifts each tool's ``$defs``/``definitions`` to the array's root: one that is not an object
of named schemas (a string, a list, a number) was an AttributeError — a 500 — instead of a 400 naming it (found in a
hunt)."""

from __future__ import annotations

import pytest

from accelkit.serve.server.errors import APIError
from accelkit.serve.server.tools import tool_calling


@pytest.mark.parametrize(("key", "value", "kind"), [("$defs", "x", "str"), ("$defs", [1], "list"),
                                                     ("definitions", 5, "int")])
def test_required_with_defs_that_are_not_an_object_is_a_400_naming_them(key, value, kind) -> None:
    tools = [{"type": "function", "function": {"name": "ok", "parameters": {"type": "object"}}},
             {"type": "function", "function": {"name": "f", "parameters": {"type": "object", key: value}}}]
    with pytest.raises(APIError) as err:
        tool_calling(tools, "required", parallel_tool_calls=None)
    assert err.value.status == 400 and err.value.param == "tools"
    assert f"tools[1] ('f').function.parameters.{key} must be an object" in err.value.message and kind in err.value.message


def test_required_with_object_or_empty_defs_still_lifts_them_to_the_root() -> None:
    tools = [{"type": "function", "function": {"name": "f", "parameters": {
        "type": "object", "$defs": {"c": {"type": "string"}}, "properties": {"x": {"$ref": "#/$defs/c"}}}}},
             {"type": "function", "function": {"name": "g", "parameters": {"type": "object", "$defs": {}}}}]
    calling = tool_calling(tools, "required", parallel_tool_calls=None)
    assert calling is not None and calling.schema["$defs"] == {"c": {"type": "string"}}
