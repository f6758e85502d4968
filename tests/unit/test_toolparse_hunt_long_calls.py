"""tool_choice "auto", streamed: a call whose arguments are long (a file's text, written by a coding agent) is read
in time linear in its length. Each piece streamed decoded the call's JSON text from its start again (llama3_json,
mistral) or searched it again for ``</tool_call>`` (hermes): quadratic — a 75 KB call took about 1.5 s of the
server's event loop, a 580 KB one about two minutes (found in a hunt). Each call's text is now scanned once, and
decoded once it closes; what is read, whole or at any split, is what it was."""

from __future__ import annotations

import json

import pytest

from accelkit.serve.server import tool_parsers
from accelkit.serve.server.tool_parsers import FORMATS, MISTRAL_V11, CallFormat, CallScanner, split_calls

NAMES = frozenset({"write_file"})
LINE = 'x = {"k": [1]}  # \\ "}]"\n'  # (brackets in the arguments' strings)
FORMS = {"hermes": (FORMATS["hermes"], '<tool_call>\n{{"name": "write_file", "arguments": {}}}\n</tool_call>'),
         "llama3_json": (FORMATS["llama3_json"], '{{"name": "write_file", "parameters": {}}}'),
         "mistral": (FORMATS["mistral"], '[TOOL_CALLS] [{{"name": "write_file", "arguments": {}}}]'),
         "mistral_v11": (MISTRAL_V11, "[TOOL_CALLS]write_file[ARGS]{}")}


def streamed(fmt: CallFormat, text: str, pieces: list[int]) -> tuple[str | None, list[tuple[str, str]]]:
    """The content and calls of ``text`` fed to a scanner cut at ``pieces``."""
    scanner, events = CallScanner(fmt, NAMES), []
    for start, end in zip([0, *pieces], [*pieces, len(text)], strict=True):
        events += scanner.feed(text[start:end], finished=False)
    events += scanner.feed("", finished=True)
    return "".join(e[1] for e in events if e[0] == "content") or None, [(e[1], e[2]) for e in events if e[0] == "call"]


class CountingDecoder(json.JSONDecoder):
    """The parsers' JSON decoder, counting the characters it is handed (``decode`` goes through ``raw_decode``)."""

    def __init__(self) -> None:
        super().__init__()
        self.chars = 0

    def raw_decode(self, s: str, idx: int = 0) -> tuple[object, int]:
        self.chars += len(s) - idx
        return super().raw_decode(s, idx)


@pytest.mark.parametrize("form", FORMS)
def test_a_long_call_streamed_in_small_pieces_is_decoded_once(form: str, monkeypatch) -> None:
    """The work is counted, not timed: the characters handed to the JSON decoder stay within a small multiple of
    the call's length (decoding from the start at every piece handed it about length² / 8)."""
    decoder = CountingDecoder()
    monkeypatch.setattr(tool_parsers, "DECODER", decoder)
    fmt, template = FORMS[form]
    arguments = {"path": "a.py", "content": LINE * 400}  # (~10 KB)
    text = "Writing it. " + template.format(json.dumps(arguments))
    read = streamed(fmt, text, list(range(4, len(text), 4)))  # (about a token's worth of text each)
    assert read == ("Writing it.", [("write_file", json.dumps(arguments))])
    assert decoder.chars <= 3 * len(text), f"{form}: {decoder.chars:,} characters decoded for a {len(text):,} one"


@pytest.mark.parametrize("form", FORMS)
def test_brackets_quotes_and_escapes_in_strings_at_every_split(form: str) -> None:
    fmt, template = FORMS[form]
    arguments = json.dumps({"c": 'a\\"}]\\', "d": ["}", "\\\\", '"{[']})
    text = template.format(arguments) + " then"
    expected = ("then", [("write_file", arguments)])
    assert split_calls(fmt, NAMES, text) == expected
    for at in range(len(text) + 1):
        assert streamed(fmt, text, [at]) == expected, at
        assert streamed(fmt, text, [at, min(at + 1, len(text))]) == expected, at


@pytest.mark.parametrize("form", ["llama3_json", "mistral", "mistral_v11"])
def test_a_call_whose_brackets_do_not_match_is_content_at_every_split(form: str) -> None:
    fmt, template = FORMS[form]
    text = template.format('{"a": [1}') + " then"
    assert split_calls(fmt, NAMES, text) == (text, [])
    for at in range(len(text) + 1):
        assert streamed(fmt, text, [at]) == (text, []), at
