"""An assistant turn's tool calls in a conversation's history: each must carry its function (its name), as a call
came back from the API — one without was accepted and the chat template skipped it, so the model never saw it."""

import pytest
from pydantic import ValidationError

from accelkit.serve.server.protocol import ChatMessage


@pytest.mark.parametrize("call", [
    {"id": "c1", "type": "function"},
    {"id": "c1", "type": "function", "function": "lookup"},
    {"id": "c1", "type": "function", "function": {"arguments": "{}"}},
    {"id": "c1", "type": "function", "function": {"name": 5, "arguments": "{}"}},
])
def test_a_history_call_without_its_function_name_is_refused_naming_the_call(call):
    good = {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": "{}"}}
    with pytest.raises(ValidationError, match=r"tool call 1 has no function name; send each call as it came back"):
        ChatMessage.model_validate({"role": "assistant", "tool_calls": [good, call]})


def test_a_whole_history_call_still_reaches_the_template_with_its_arguments_read():
    message = ChatMessage.model_validate({"role": "assistant", "tool_calls": [
        {"id": "c0", "type": "function", "function": {"name": "lookup", "arguments": '{"n": 4}'}}]})
    assert message.for_template()["tool_calls"][0]["function"] == {"name": "lookup", "arguments": {"n": 4}}
