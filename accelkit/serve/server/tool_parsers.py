"""``tool_choice`` "auto": tool calls in the model's own format, read out of its text (``--tool-call-parser``).

A model trained for tool calling writes each call between markers of its own, among ordinary text; the parser
named at start-up knows those markers. Each request's output is constrained, with a structural tag
(:class:`accelkit.serve.sampling.StructuredOutputs`), so that once the model opens a call the rest of it is
written as the format says: the call's header naming one of the request's tools, arguments valid under that tool's
``parameters``, the closing marker. The model still decides whether to call at all — the text outside calls is
free — and the calls are then read back out of the text, here.

``hermes`` is the format of Hermes 2/3, Qwen2.5, Qwen3 and QwQ (vLLM's ``hermes`` parser)::

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

``llama3_json`` is Llama 3.1–3.3's JSON tool calling (vLLM's ``llama3_json``): the call is the JSON object itself,
``{"name": "get_weather", "parameters": {"city": "Paris"}}``, several separated by ``;``.

``mistral`` is Mistral's before its v11 tokenizers (7B-Instruct-v0.3, Nemo, Small 2409, in Hugging Face form;
vLLM's ``mistral``): a special token, then a JSON array of calls,
``[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Paris"}}]``.
The token is special, so requests with tools are decoded with ``skip_special_tokens`` false (as vLLM's parser does);
the constraint makes each array the model opens one whole call (an array of several, written unconstrained, is read
too).
From its v11 tokenizers on (Small 3.1 and later, Magistral, Devstral, Ministral 3) Mistral writes a call as the
token, the function's name, a second special token and the arguments, ``[TOOL_CALLS]get_weather[ARGS]{"city":
"Paris"}``, each call opening with its own ``[TOOL_CALLS]`` (v13 puts ``[CALL_ID]`` and an id before ``[ARGS]``,
read and dropped, as vLLM does: the response's ids are ours). ``mistral`` takes this form where the model's
tokenizer has the ``[ARGS]`` token (:func:`call_format`), as vLLM's parser picks by tokenizer version.

:class:`CallScanner` reads a text, whole or as it streams, into content and calls: a complete call to a tool the
request gave becomes a call; anything else — text outside calls, a call cut short by ``max_tokens``, a call the
model wrote to an unknown tool or that is not JSON (possible only where the constraint was not in force) — stays
content, as written. The content is stripped of the whitespace around it (a model puts newlines between calls).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Collection
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast


@dataclass(frozen=True, slots=True)
class CallFormat:
    """A model family's tool-call markup. A call is ``prefix``, the JSON object ``{"name": <name>, <arguments_key>:
    <object>}`` and ``suffix``; ``start`` — the text that opens one — begins ``prefix`` or, where there is none,
    the object itself. ``end``: the marker that closes a call (Hermes' ``</tool_call>``); none where a call ends
    with its JSON object (Llama's)."""

    name: str
    start: str
    prefix: str
    suffix: str
    end: str | None
    arguments_key: str = "arguments"
    separator: str = ""  # text the model writes between calls, not content (Llama's ";")
    array: bool = False  # the calls after ``start`` are one JSON array of call objects (Mistral's)
    # ``start`` is a special token of the tokenizers that use this format (Mistral's [TOOL_CALLS]): left out of the
    # text unless a request is decoded with skip_special_tokens false, which its requests with tools then are
    special_start: bool = False
    # the marker between a call's bare name and its arguments object (Mistral's v11 [ARGS]): no JSON wraps the call
    args_marker: str | None = None
    # the format's markers are special tokens in some of its tokenizers (Hermes 2 Pro's <tool_call>), so requests
    # with tools are decoded with skip_special_tokens false, as vLLM's parser has them (``special_start`` implies it)
    markers_may_be_special: bool = False
    # the format's chat templates take back only 9-character alphanumeric call ids (Mistral's)
    short_ids: bool = False

    @property
    def between_calls(self) -> str:
        """What the model writes between two calls where nothing else may come between them (tools beside a
        ``response_format``): the separator, or a newline after an end marker (Hermes'), else nothing."""
        return self.separator or ("\n" if self.end is not None else "")

    @property
    def keeps_special_tokens(self) -> bool:
        """Whether requests with tools ("auto") are decoded with ``skip_special_tokens`` false."""
        return self.special_start or self.markers_may_be_special

    def begin(self, function: str) -> str:
        """The text a call to ``function`` starts with, up to its arguments (a structural tag's ``begin``)."""
        if self.args_marker is not None:
            return f"{self.prefix}{function}{self.args_marker}"
        name = json.dumps(function, ensure_ascii=False)
        return f'{self.prefix}{{"name": {name}, {json.dumps(self.arguments_key)}: '

    @property
    def close(self) -> str:
        """The text after a call's arguments (a structural tag's ``end``)."""
        return self.suffix if self.args_marker is not None else "}" + self.suffix

    def structural_tag(self, functions: list[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
        """The structural tag that makes every call the model opens a whole call to one of ``functions``
        ((name, parameters schema) each) with valid arguments."""
        return {"structures": [{"begin": self.begin(name), "schema": parameters, "end": self.close}
                               for name, parameters in functions],
                "triggers": [self.start]}

    def read_all(self, document: Any) -> list[tuple[str, Any]] | None:
        """The (name, arguments) of each call a call's JSON document holds (an array's elements, in an ``array``
        format), or None where one of them is not a call."""
        if not self.array:
            call = self.read(document)
            return None if call is None else [call]
        if not isinstance(document, list) or not document:
            return None
        calls = [self.read(c) for c in document]
        return None if None in calls else cast("list[tuple[str, Any]]", calls)

    def read(self, call: Any) -> tuple[str, Any] | None:
        """(name, arguments) of a call's JSON object, or None where it is not one (the arguments under
        ``arguments_key``, or under "arguments"/"parameters", as vLLM's parsers take either)."""
        if not isinstance(call, dict) or not isinstance(call.get("name"), str):
            return None
        key = next((k for k in (self.arguments_key, "arguments", "parameters") if k in call), None)
        return None if key is None else (call["name"], call[key])


class _Number:
    """A JSON number no float holds (``1e400``, which JSON allows): kept as written, so that the arguments given back
    are JSON (``json.dumps`` of the float would write ``Infinity``, which is not)."""

    __slots__ = ("text",)

    def __init__(self, text: str) -> None:
        self.text = text


def _number(text: str) -> float | _Number:
    value = float(text)
    return value if math.isfinite(value) else _Number(text)


#: what reads calls' JSON: as ``json.loads``, numbers past a float's range kept as written (:func:`dump_json`)
DECODER = json.JSONDecoder(parse_float=_number)


def dump_json(value: Any) -> str:
    """A call's arguments read by :data:`DECODER` as JSON text again (``json.dumps``' spacing, ``ensure_ascii``
    false), numbers past a float's range as the model wrote them, and a lone surrogate (``"\\ud83d"``, which JSON's
    escapes allow and the constraint lets a model write) escaped as it was written: raw, it is no UTF-8, and the
    response could not be sent."""
    return _SURROGATE.sub(lambda m: f"\\u{ord(m.group()):04x}", _dump_json(value))


_SURROGATE = re.compile("[\ud800-\udfff]")  # (only in a JSON string of the text: escaping it keeps the value)


def _dump_json(value: Any) -> str:
    try:
        return json.dumps(value, ensure_ascii=False)
    except TypeError:  # (a _Number inside: rare, so written out by hand only then)
        if isinstance(value, _Number):
            return value.text
        if isinstance(value, dict):
            return "{" + ", ".join(f"{json.dumps(k, ensure_ascii=False)}: {_dump_json(v)}"
                                   for k, v in value.items()) + "}"
        if isinstance(value, list):
            return "[" + ", ".join(map(_dump_json, value)) + "]"
        raise


#: the formats ``--tool-call-parser`` names (vLLM's parser names)
FORMATS: dict[str, CallFormat] = {
    # Hermes 2/3, Qwen2.5, Qwen3, QwQ: <tool_call>\n{"name": …, "arguments": {…}}\n</tool_call>
    "hermes": CallFormat("hermes", "<tool_call>", prefix="<tool_call>\n", suffix="\n</tool_call>",
                         end="</tool_call>", markers_may_be_special=True),
    # Llama 3.1, 3.2, 3.3 (JSON tool calling): {"name": …, "parameters": {…}}, several separated by ";" (the
    # <|python_tag|> some put first is a special token, not in the text)
    "llama3_json": CallFormat("llama3_json", '{"name": ', prefix="", suffix="", end=None,
                              arguments_key="parameters", separator=";"),
    # Mistral (v0.3 tokenizer and later in Hugging Face form): [TOOL_CALLS] [{"name": …, "arguments": {…}}, …]
    "mistral": CallFormat("mistral", "[TOOL_CALLS]", prefix="[TOOL_CALLS] [", suffix="]", end=None, array=True,
                          special_start=True, short_ids=True),
}
#: a function's name as Mistral's v11 form writes it, bare before [ARGS] (Mistral's tool names: these characters)
BARE_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: Mistral's from its v11 tokenizers on: [TOOL_CALLS]name[ARGS]{…} (what ``mistral`` means for such a tokenizer)
MISTRAL_V11 = CallFormat("mistral", "[TOOL_CALLS]", prefix="[TOOL_CALLS]", suffix="", end=None, special_start=True,
                         args_marker="[ARGS]", short_ids=True)
CALL_ID = "[CALL_ID]"  # (v13: between a call's name and [ARGS], an id of the model's)


def call_format(parser: str | None, added_tokens: Collection[str]) -> CallFormat | None:
    """The format ``--tool-call-parser`` names, for a tokenizer with these added tokens: ``mistral`` is the v11
    form where the tokenizer has ``[ARGS]``."""
    if parser is None:
        return None
    if parser == "mistral" and MISTRAL_V11.args_marker in added_tokens:
        return MISTRAL_V11
    return FORMATS[parser]


E = TypeVar("E")


class MarkerScanner(Generic[E]):
    """A model's output read into events as it streams (or whole): :meth:`feed` appends the new text to the buffer
    and lets :meth:`_step` take what it can decide, until it can take no more. A subclass (a dataclass) has the
    ``_buffer`` and ``_events`` fields and the ``_step``."""

    _buffer: str
    _events: list[E]

    def feed(self, text: str, finished: bool) -> list[E]:
        self._buffer += text
        while self._step(finished):
            pass
        events, self._events = self._events, []
        return events

    def _step(self, finished: bool) -> bool:
        """Take what can be decided from the buffer; True when the rest may hold more."""
        raise NotImplementedError

    def _take_before(self, marker: str, finished: bool) -> str:
        """The buffer's text, but for an end that may still become ``marker``'s start (kept, unless ``finished``)."""
        cut = len(self._buffer) - (0 if finished else held_back(self._buffer, marker))
        text, self._buffer = self._buffer[:cut], self._buffer[cut:]
        return text


@dataclass(slots=True)
class CallScanner(MarkerScanner[tuple[str, ...]]):
    """Reads a model's output into content and calls, fed whole or in pieces as it is generated: :meth:`feed`
    returns what is complete so far — ``("content", text)`` and ``("call", name, arguments JSON text)`` events in
    the output's order — holding back only what may still become a call's start marker or trailing whitespace."""

    fmt: CallFormat
    names: frozenset[str]
    _buffer: str = ""
    _in_call: bool = False
    _spaces: str = ""  # whitespace after the content given so far: given only when more content follows
    _started: bool = False  # some content given (whitespace before it is dropped)
    _after_call: bool = False  # a call just closed: a separator may follow
    # how far the open call's JSON is scanned: (the index scanned to, its nesting depth there, inside a string) —
    # or None once it is known never to be JSON (:meth:`_json_end`)
    _scan: tuple[int, int, bool] | None = (0, 0, False)
    _end_from: int = 0  # the open call's text holds no end marker before this (where the search for one resumes)
    _events: list[tuple[str, ...]] = field(default_factory=list)

    def _step(self, finished: bool) -> bool:
        fmt = self.fmt
        if self._after_call and fmt.separator:  # a separator after a call (and the spaces before it) is no content
            self._buffer = self._buffer.lstrip()
            if not self._buffer and not finished:
                return False
            self._buffer, self._after_call = self._buffer.removeprefix(fmt.separator), False
        if not self._in_call:
            at = self._buffer.find(fmt.start)
            if at >= 0:
                self._content(self._buffer[:at])
                self._buffer, self._in_call = self._buffer[at + len(fmt.start):], True
                self._scan, self._end_from = (0, 0, False), 0
                return True
            self._content(self._take_before(fmt.start, finished))
            return False
        whole = self._whole_call(finished)
        if whole is None:
            if finished:  # a call cut short: its text as content
                self._content(fmt.start + self._buffer)
                self._buffer = ""
            return False
        length, document = whole
        text, self._buffer, self._in_call = fmt.start + self._buffer[:length], self._buffer[length:], False
        self._after_call = True
        calls = fmt.read_all(document)
        if calls is None or any(name not in self.names for name, _ in calls):
            self._content(text)
        else:
            self._events += [("call", name, dump_json(arguments)) for name, arguments in calls]
        return True

    def _whole_call(self, finished: bool) -> tuple[int, Any] | None:
        """(the length of the call in the buffer after its start, its JSON document — None where it is not JSON)
        once the call is closed; None while it is open."""
        fmt = self.fmt
        if fmt.end is not None:  # closed by its end marker: the first that is not inside one of the call's strings
            first = at = self._buffer.find(fmt.end, self._end_from)
            while at >= 0:
                try:  # (the newlines around the JSON: JSON's spaces)
                    return at + len(fmt.end), DECODER.decode(self._buffer[:at])
                except json.JSONDecodeError as exc:
                    # whole JSON so far but for a string still open: the marker is that string's text (code, a
                    # file's content), which the constraint lets arguments hold — the call may close at a later one
                    if not exc.msg.startswith("Unterminated string"):
                        break
                except RecursionError:  # (nested past what Python's decoder takes: no call we can read)
                    break
                at = self._buffer.find(fmt.end, at + 1)
            else:
                if first < 0:  # (none yet: the next search starts where one may begin)
                    self._end_from = max(0, len(self._buffer) - len(fmt.end) + 1)
                if not finished:
                    return None
                # the output ends in the call, its end marker never written: a call all the same where the rest is
                # its whole JSON (a stop string "</tool_call>" took the marker; vLLM's parser reads such a call)
                try:
                    return len(self._buffer), DECODER.decode(self._buffer)
                except (ValueError, RecursionError):
                    if first < 0:
                        return None
            # not JSON (or never closed): the call is no call up to its first end marker, and what follows is read on
            return first + len(fmt.end), None
        if fmt.args_marker is not None:  # name[ARGS]{…}: closed where its arguments object ends
            return self._named_call(fmt.args_marker)
        # closed where its JSON ends: the array after the start (Mistral's), or the object the start begins (Llama's)
        body = self._buffer.lstrip() if fmt.array else fmt.start + self._buffer
        whole = self._decode(body)
        return None if whole is None else (whole[1] + len(self._buffer) - len(body), whole[0])

    def _decode(self, body: str) -> tuple[Any, int] | None:
        """(the JSON value ``body`` opens, its length) once it is whole; None while it is not — or never will be,
        which the end of the output shows (not JSON; or nested past what Python's decoder takes, a model repeating
        "[": never a call). An object or array is decoded once, when :meth:`_json_end` finds it closed: decoding the
        text at every piece streamed was quadratic in a call's length (seconds for a file's text as arguments)."""
        if body[:1] in ("{", "["):
            if self._json_end(body) is None:
                return None
            try:
                return DECODER.raw_decode(body)
            except (ValueError, RecursionError):
                self._scan = None  # (its text up to its last bracket is no JSON, whatever follows)
                return None
        try:  # (nothing yet, or a value of another kind, written unconstrained: rare, decoded as it comes)
            return DECODER.raw_decode(body)
        except (ValueError, RecursionError):
            return None

    def _named_call(self, marker: str) -> tuple[int, Any] | None:
        """:meth:`_whole_call` for a bare name, ``marker`` and an arguments object (``[CALL_ID]`` and an id may come
        between the name and the marker): the call as the JSON object the other formats write."""
        at = self._buffer.find(marker)
        if at < 0:
            return None
        body = self._buffer[at + len(marker):]
        stripped = body.lstrip()
        if not stripped:
            return None
        if not stripped.startswith("{"):  # arguments are an object: anything else is no call, up to the marker
            return at + len(marker), None  # (decided on its first character: streamed or whole, the same)
        decoded = self._decode(stripped)
        if decoded is None:
            return None
        arguments, length = decoded
        name = self._buffer[:at].partition(CALL_ID)[0].strip()
        return at + len(marker) + len(body) - len(stripped) + length, {"name": name, "arguments": arguments}

    def _json_end(self, body: str) -> int | None:
        """Where the object or array that opens ``body`` closes (the index after its last bracket), or None while
        it is open. ``body`` grows from one call to the next while the call is open; only what is new is scanned."""
        if self._scan is None:
            return None
        at, depth, in_string = self._scan
        while True:
            if in_string:  # (a backslash escapes the next character: scanned from it again once that is here)
                found = _IN_STRING.search(body, at)
                if found is None or (found.group() == "\\" and found.end() == len(body)):
                    at = len(body) if found is None else found.start()
                    break
                at, in_string = (found.end() + 1, True) if found.group() == "\\" else (found.end(), False)
                continue
            found = _STRUCTURE.search(body, at)
            if found is None:
                at = len(body)
                break
            mark, at = found.group(), found.end()
            if mark == '"':
                in_string = True
            else:
                depth += 1 if mark in "{[" else -1
                if depth == 0:
                    return at
        self._scan = (at, depth, in_string)
        return None

    def _content(self, text: str) -> None:
        if not self._started:
            text = text.lstrip()
        body = text.rstrip()
        if body:
            self._events.append(("content", self._spaces + body))
            self._spaces, self._started = "", True
            text = text[len(body):]
        if self._started:
            self._spaces += text


_STRUCTURE = re.compile(r'["{}\[\]]')  # (outside a JSON string: what opens one, and the brackets)
_IN_STRING = re.compile(r'["\\]')  # (inside one: what ends it, and escapes)


def held_back(text: str, marker: str) -> int:
    """The length of the longest end of ``text`` that begins ``marker`` (it may be the start of one)."""
    for n in range(min(len(text), len(marker) - 1), 0, -1):
        if marker.startswith(text[-n:]):
            return n
    return 0


def split_calls(fmt: CallFormat, names: frozenset[str], text: str) -> tuple[str | None, list[tuple[str, str]]]:
    """A whole output's content (None when there is none) and its calls, (name, arguments JSON text) each."""
    content, calls = [], []
    for event in CallScanner(fmt, names).feed(text, True):
        if event[0] == "content":
            content.append(event[1])
        else:
            calls.append((event[1], event[2]))
    return "".join(content) or None, calls
