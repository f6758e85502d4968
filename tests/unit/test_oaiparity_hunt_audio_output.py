"""OpenAI's audio output (modalities with "audio", the audio parameters) is refused with a 400 naming the field, as
the server's other unsupported features are: it was an unknown field, ignored, and the 200 held text alone."""

from __future__ import annotations

import json

import pytest

from accelkit.serve.server import ServerConfig
from accelkit.serve.server.protocol import ChatCompletionRequest, parse_body


def _problem(**fields):
    raw = json.dumps({"messages": [{"role": "user", "content": "hi"}], **fields}).encode()
    body = parse_body(ChatCompletionRequest, raw, "application/json", max_model_len=256)[0]
    body.configure(ServerConfig(served_model_name="tiny"))
    return body.unsupported()


@pytest.mark.parametrize("fields, param", [
    ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}}, "modalities"),
    ({"audio": {"voice": "alloy", "format": "wav"}}, "audio"),
    ({"modalities": ["audio"]}, "modalities"),
])
def test_audio_output_is_refused_naming_the_field(fields, param):
    problem = _problem(**fields)
    assert problem is not None and problem[0] == param and "text" in problem[1]


def test_text_output_asked_for_plainly_is_accepted():
    assert _problem(modalities=["text"]) is None
    assert _problem(modalities=None, audio=None) is None
