"""Refusals that named the field but not the fix (found in a hunt: "echo is not supported by accelkit serve for
chat", "suffix is not supported by accelkit serve" — the client was left to guess what to send instead)."""

from __future__ import annotations

from accelkit.serve.server.protocol import ChatCompletionRequest, CompletionRequest


def test_chat_echo_says_what_to_send_instead() -> None:
    field, message = ChatCompletionRequest(messages=[{"role": "user", "content": "hi"}], echo=True).unsupported()
    assert field == "echo" and "omit it or send false" in message and "continue_final_message" in message


def test_suffix_says_what_to_send_instead() -> None:
    field, message = CompletionRequest(prompt="hi", suffix="").unsupported()
    assert field == "suffix" and "omit it or send null" in message
