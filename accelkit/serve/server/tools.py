"""OpenAI tool calling, done with structured outputs:

- a named function: the output is masked to that function's ``parameters`` schema and becomes the call's
  ``arguments`` as generated (as vLLM does it, no model-specific parser);
- "required": the output is masked to a JSON array (at least one item) of ``{"name": <a tool's name>,
  "parameters": <that tool's parameters>}``, one item per call, then parsed into ``tool_calls`` (as vLLM);
- "auto" (or omitted, with tools): the model writes text or calls in its own format, which the server's
  ``--tool-call-parser`` knows (:mod:`accelkit.serve.server.tool_parsers`); the output is masked with a structural
  tag so that each call the model opens is whole and valid, then the calls are read out of the text. Without a
  parser, "auto" with tools is refused (see ``ChatCompletionRequest.unsupported``);
- "none" renders the tools and generates text as usual.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import secrets
import string
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from accelkit.serve.sampling import MAX_STRUCTURES, StructuredOutputs
from accelkit.serve.server.errors import APIError
from accelkit.serve.server.tool_parsers import BARE_NAME, DECODER, CallFormat, CallScanner, dump_json, split_calls

EMPTY_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}}  # a function that takes no arguments
_DEFS_KEYS = ("$defs", "definitions")  # where "$ref"s point; lifted to the root of the "required" schema


_ALPHANUMERIC = string.ascii_letters + string.digits


def call_id(short: bool = False) -> str:
    """A new tool call's id: OpenAI's form (``call_`` and 24 hex digits), or ``short``, 9 letters and digits —
    what Mistral's chat templates require of the ids a client sends back with the calls (they raise "Tool call IDs
    should be alphanumeric strings with length 9" otherwise; vLLM's Mistral parser makes them so too)."""
    if short:
        return "".join(secrets.choice(_ALPHANUMERIC) for _ in range(9))
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass(frozen=True, slots=True)
class ToolCalling:
    """What a request's ``tools`` and ``tool_choice`` ask for. ``name``: the function a named choice forces (None
    for "required"); ``index``: its place in ``tools``; ``schema``: what the output is masked to (for "auto", the
    structural tag ``format`` makes of the tools)."""

    kind: Literal["named", "required", "auto"]
    schema: dict[str, Any]
    name: str | None = None
    index: int | None = None
    format: CallFormat | None = None  # "auto": the model's call format
    short_ids: bool = False  # the server's format is Mistral's: its templates take 9-character ids only
    # "auto" beside a JSON answer (response_format): (the field that asked for it, its schema) — the output is then
    # that answer or calls alone, no free text
    answer: tuple[str, dict[str, Any]] | None = None
    # every tool's (function name, parameters schema), in the order of tools (for error messages)
    functions: tuple[tuple[str, dict[str, Any]], ...] = ()
    # "auto" with parallel_tool_calls false: only the first call the model makes is returned (as vLLM does it:
    # nothing in a structural tag stops the model opening a second)
    single: bool = False

    @property
    def names(self) -> frozenset[str]:
        """The tools' function names ("auto": a call to another is text)."""
        return frozenset(name for name, _ in self.functions)

    def new_id(self) -> str:
        return call_id(self.short_ids)

    def with_answer(self, field: str, schema: dict[str, Any]) -> ToolCalling:
        """"auto" whose output is either one JSON document valid under ``schema`` (asked for by the request's
        ``field``) or the model's calls alone, as OpenAI serves tools beside a ``response_format``."""
        assert self.kind == "auto" and self.format is not None
        return dataclasses.replace(self, answer=(field, schema))

    def spec(self) -> StructuredOutputs:
        if self.kind == "auto":
            tag = self.schema
            if self.answer is not None:
                assert self.format is not None
                tag = {**tag, "answer": self.answer[1], "separator": self.format.between_calls}
            return StructuredOutputs(structural_tag=json.dumps(tag, separators=(",", ":")))
        return StructuredOutputs(json=json.dumps(self.schema, separators=(",", ":")))

    def error_message(self, message: str) -> str:
        """A structured-output error about ``schema`` said in terms of the request's ``tools`` (and of the field
        that asked for the answer beside them)."""
        message = message.removeprefix("structured_outputs.json: ")
        tool = self._tool_parameters
        if self.kind == "named":
            return f"{tool(self.index)}: {message}"
        if self.kind == "auto":  # (structure i is tools[i]'s call)
            message = message.removeprefix("structured_outputs.structural_tag: ")
            if self.answer is not None and (message.startswith("answer: ") or "(at answer" in message):
                message = re.sub(r"\(at answer\.", "(at ", message.removeprefix("answer: "))
                return f"{self.answer[0]}: {message.replace('(at answer)', '(at the root)')}"
            message = re.sub(r"structures\[(\d+)\]\.schema", lambda m: tool(int(m.group(1))), message)
            return f"tool_choice 'auto': {message}"
        message = re.sub(r"items\.anyOf\[(\d+)\]\.properties\.parameters", lambda m: tool(int(m.group(1))),
                         message)
        return f"tool_choice 'required': {message}"

    def _tool_parameters(self, index: int | None) -> str:
        """``tools[1] ('get_weather').function.parameters``: where a schema error is, with the function's name."""
        name = self.functions[index][0] if index is not None and index < len(self.functions) else None
        return f"{_tool(index, name)}.function.parameters"

    def each_tool(self) -> list[ToolCalling]:
        """"required" or "auto": each tool's parameters alone, as a named choice of it would constrain them — to
        find the one a compile error of them all together is about, where the error does not say."""
        if self.kind == "named":
            return []
        return [ToolCalling("named", parameters, name=name, index=i, functions=self.functions)
                for i, (name, parameters) in enumerate(self.functions)]

    def message(self, text: str) -> tuple[str | None, list[dict[str, Any]] | None]:
        """An output's (content, tool_calls): the calls, or None and the text as content where it holds none."""
        if self.kind == "auto":
            assert self.format is not None
            content, made = split_calls(self.format, self.names, text)
            made = made[:1] if self.single else made
            return content, [_call(self.new_id(), name, arguments) for name, arguments in made] or None
        calls = self.calls(text)
        return (None, calls) if calls is not None else (text, None)

    def calls(self, text: str) -> list[dict[str, Any]] | None:
        """The ``tool_calls`` of a forced call's output; None when it holds no complete list of calls ("required"
        cut short)."""
        if self.kind == "named":  # (no text: nothing was called — a reasoning model cut off while thinking)
            return [_call(self.new_id(), str(self.name), text)] if text else None
        try:
            items = DECODER.decode(text)
        except (ValueError, RecursionError):  # (not JSON; or nested past what Python's decoder takes)
            return None
        if not isinstance(items, list) or not items or \
                not all(isinstance(item, dict) and {"name", "parameters"} <= item.keys() for item in items):
            return None
        return [_call(self.new_id(), item["name"], dump_json(item["parameters"]))
                for item in items]

    def finish_reason(self, reason: str | None, *, called: bool) -> str | None:
        """OpenAI's: "tool_calls" when "required" or "auto" made calls; a named function's call ends with "stop"."""
        return "tool_calls" if called and self.kind != "named" and reason == "stop" else reason


def _tool(index: int | None, name: str | None) -> str:
    """``tools[1] ('get_weather')``: a tool in an error message, by its place and its function's name."""
    return f"tools[{index}]" + (f" ({name!r})" if name is not None else "")


def _call(id_: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": id_, "type": "function", "function": {"name": name, "arguments": arguments}}


def _whole_call_deltas(index: int, id_: str, name: str, arguments: str) -> list[dict[str, Any]]:
    """A call that is out whole, streamed: its header (empty arguments), then its arguments."""
    return [{"tool_calls": [{"index": index, **_call(id_, name, "")}]},
            {"tool_calls": [{"index": index, "function": {"arguments": arguments}}]}]


class ToolCallDeltas:
    """One streamed choice's ``delta`` objects: a named call's header with its first argument text, then the rest of its argument
    text as it is generated; "required"'s calls once the whole array is out (each: its header, then its
    arguments); "auto"'s content as it is generated and each call once it is closed. The deltas' content and
    arguments joined are the non-streamed ``content`` and ``arguments``."""

    def __init__(self, calling: ToolCalling) -> None:
        self.calling = calling
        self.text = ""
        self.called = False
        self.id = calling.new_id()
        self.num_calls = 0
        self.scanner = CallScanner(calling.format, calling.names) if calling.format is not None else None

    def step(self, new_text: str, finished: bool) -> list[dict[str, Any]]:
        if self.scanner is not None:
            return self._scanned(new_text, finished)
        if self.calling.kind == "named":
            if not new_text:  # (the header waits for the first argument text: an output that ends while a reasoning
                return []  # model thinks made no call — it was sent as soon as the output started)
            deltas = []
            if not self.called:
                self.called = True
                deltas.append({"tool_calls": [{"index": 0, **_call(self.id, str(self.calling.name), "")}]})
            deltas.append({"tool_calls": [{"index": 0, "function": {"arguments": new_text}}]})
            return deltas
        self.text += new_text
        if not finished:
            return []
        calls = self.calling.calls(self.text)
        if calls is None:  # cut short: the text as it is, as content
            return [{"content": self.text}] if self.text else []
        self.called = True
        return [delta for i, call in enumerate(calls)
                for delta in _whole_call_deltas(i, call["id"], call["function"]["name"], call["function"]["arguments"])]

    def _scanned(self, new_text: str, finished: bool) -> list[dict[str, Any]]:
        assert self.scanner is not None
        deltas: list[dict[str, Any]] = []
        for event in self.scanner.feed(new_text, finished):
            if event[0] == "content":
                deltas.append({"content": event[1]})
                continue
            _, name, arguments = event
            if self.calling.single and self.called:  # (parallel_tool_calls false: the first call only)
                continue
            self.called, i = True, self.num_calls
            self.num_calls += 1
            deltas += _whole_call_deltas(i, self.calling.new_id(), name, arguments)
        return deltas

    def finish_reason(self, reason: str | None) -> str | None:
        return self.calling.finish_reason(reason, called=self.called)


def _functions(tools: list[Any]) -> list[tuple[str, dict[str, Any]]]:
    """(name, parameters schema) of each tool, or a 400 naming the one that is malformed."""
    functions: list[tuple[str, dict[str, Any]]] = []
    for i, tool in enumerate(tools):
        if not isinstance(tool, dict) or tool.get("type", "function") != "function":
            kind = tool.get("type") if isinstance(tool, dict) else type(tool).__name__
            raise APIError(400, f"tools[{i}] is {kind!r}; only function tools ({{\"type\": \"function\", "
                           "\"function\": {\"name\": …, \"parameters\": {…}}}) are supported", param="tools")
        function = tool.get("function")
        if not isinstance(function, dict):
            raise APIError(400, f"tools[{i}].function is missing; give {{\"name\": …, \"parameters\": {{…}}}}",
                           param="tools")
        name = function.get("name")
        if name is None or name == "":
            raise APIError(400, f"tools[{i}].function.name is missing; every tool needs a function name",
                           param="tools")
        if not isinstance(name, str):
            raise APIError(400, f"tools[{i}].function.name must be a string (the function's name), not "
                           f"{json.dumps(name, default=repr)}", param="tools")
        if any(name == seen for seen, _ in functions):
            raise APIError(400, f"tools[{i}].function.name {name!r} is given twice; give each function once",
                           param="tools")
        description = function.get("description")
        if description is not None and not isinstance(description, str):
            raise APIError(400, f"{_tool(i, name)}.function.description must be a string, not "
                           f"{json.dumps(description, default=repr)}", param="tools")
        strict = function.get("strict")
        if strict is not None and not isinstance(strict, bool):  # (OpenAI's: true, false or null)
            raise APIError(400, f"{_tool(i, name)}.function.strict: Input should be a valid boolean (true or false), "
                           f"not {json.dumps(strict, default=repr)}", param="tools", code="invalid_value")
        parameters = function.get("parameters")
        if parameters is None:
            parameters = EMPTY_PARAMETERS
        if not isinstance(parameters, dict):
            raise APIError(400, f"{_tool(i, name)}.function.parameters must be a JSON schema object, not "
                           f"{type(parameters).__name__}", param="tools")
        # ({} is the usual way to declare no arguments: a call's arguments are an object all the same, as OpenAI's
        # format has them; a root $ref is left as it points — a type beside it can make a recursive one unsupported)
        if "type" not in parameters and "$ref" not in parameters:
            parameters = {**parameters, "type": "object"}
        else:
            _check_object_root(i, name, parameters)
        functions.append((name, parameters))
    return functions


def _check_object_root(i: int, name: str, parameters: dict[str, Any]) -> None:
    """A 400 unless ``parameters`` describes an object — a call's arguments are a JSON object of named arguments —:
    its own ``type``, or, for a root ``$ref`` into its ``$defs``/``definitions``, the type of what it points at (a
    ``$ref`` to a string schema was accepted, and a named call's arguments came back as a JSON string)."""
    where, schema = f"{_tool(i, name)}.function.parameters", parameters
    ref = parameters.get("$ref")
    if "type" not in parameters and isinstance(ref, str):
        key, _, def_name = ref.removeprefix("#/").partition("/")
        target = parameters.get(key, {}).get(def_name) if key in _DEFS_KEYS and def_name else None
        if not isinstance(target, dict):  # (a $ref elsewhere: left for the structured-output engine to judge)
            return
        where, schema = f"{where}.{key}.{def_name} (its $ref)", target
    said = schema.get("type", "object")
    if said not in ("object", ["object"]):
        raise APIError(400, f"{where} must have type \"object\" (a call's arguments are a JSON object of named "
                       f"arguments), not {json.dumps(said, default=repr)}; put the value in a property",
                       param="tools")


def _check_bare_names(functions: list[tuple[str, dict[str, Any]]]) -> None:
    """A 400 for a function name Mistral's v11 form cannot write bare, before its [ARGS] token."""
    for i, (name, _) in enumerate(functions):
        if not BARE_NAME.fullmatch(name):
            raise APIError(400, f"tools[{i}].function.name {name!r}: this model's tool calls (Mistral's "
                           "[TOOL_CALLS]name[ARGS]{…}) write a function's name bare; give names of 1 to 64 letters, "
                           "digits, _ or -", param="tools")


def tool_calling(tools: list[Any] | None, tool_choice: str | dict[str, Any] | None, *,
                 parallel_tool_calls: bool | None, call_format: CallFormat | None = None) -> ToolCalling | None:
    """The constraint ``tools`` and ``tool_choice`` ask for (None: generate text), or a 400 naming the field.
    ``call_format``: the server's parser, which "auto" with tools needs (without one it is refused before this);
    Mistral's also makes every call's id one its chat templates take back, whatever ``tool_choice``."""
    short_ids = call_format is not None and call_format.short_ids
    if tool_choice is None or tool_choice in ("none", "auto"):
        if not tools:
            return None
        functions = _functions(tools)
        if tool_choice == "none" or call_format is None:
            return None
        if len(functions) > MAX_STRUCTURES:  # (one structure per tool)
            raise APIError(400, f"tools has {len(functions)} functions; tool_choice 'auto' constrains at most "
                           f"{MAX_STRUCTURES} (one structure each): send fewer tools", param="tools")
        if call_format.args_marker is not None:
            _check_bare_names(functions)
        return ToolCalling("auto", call_format.structural_tag(functions), format=call_format,
                           short_ids=short_ids,
                           functions=tuple(functions), single=parallel_tool_calls is False)
    if isinstance(tool_choice, str) and tool_choice != "required":
        raise APIError(400, f"tool_choice={tool_choice!r} is not one of 'none', 'auto', 'required' or "
                       "{\"type\": \"function\", \"function\": {\"name\": …}}", param="tool_choice")
    if not tools:
        raise APIError(400, "tool_choice other than 'none' or 'auto' needs tools; give the functions in tools",
                       param="tool_choice")
    functions = _functions(tools)
    if isinstance(tool_choice, dict):
        function = tool_choice.get("function")
        name = function.get("name") if isinstance(function, dict) else None
        if tool_choice.get("type", "function") != "function" or not isinstance(name, str):
            raise APIError(400, "tool_choice as an object is {\"type\": \"function\", \"function\": {\"name\": …}}",
                           param="tool_choice")
        index = next((i for i, (n, _) in enumerate(functions) if n == name), None)
        if index is None:
            names = ", ".join(repr(n) for n, _ in functions)
            raise APIError(400, f"tool_choice names function {name!r}, which is not in tools ({names})",
                           param="tool_choice")
        return ToolCalling("named", functions[index][1], name=name, index=index, short_ids=short_ids,
                           functions=tuple(functions))
    return ToolCalling("required", _array_of_calls(functions, parallel_tool_calls is not False), short_ids=short_ids,
                       functions=tuple(functions))


def _array_of_calls(functions: list[tuple[str, dict[str, Any]]], parallel: bool) -> dict[str, Any]:
    """vLLM's schema for "required": [{"name": const, "parameters": that function's schema}, …]; each function's
    ``$defs`` lifted to the root, where its ``$ref``s ("#/$defs/…") point."""
    defs: dict[str, dict[str, Any]] = {}
    branches = []
    for i, (name, parameters) in enumerate(functions):
        parameters, tool = copy.copy(parameters), _tool(i, name)
        for key in _DEFS_KEYS:
            definitions = parameters.pop(key, None)
            if definitions and not isinstance(definitions, dict):  # (a 500 until a hunt found it)
                raise APIError(400, f"{tool}.function.parameters.{key} must be an object of named schemas "
                               f"({{\"name\": {{…}}}}), not {type(definitions).__name__}", param="tools")
            for def_name, definition in (definitions or {}).items():
                if defs.setdefault(key, {}).setdefault(def_name, definition) != definition:
                    raise APIError(400, f"{tool}.function.parameters.{key}.{def_name} differs from another "
                                   "tool's of that name; with tool_choice 'required' their definitions share one "
                                   "namespace, so give them distinct names", param="tools")
        branches.append({"type": "object", "properties": {"name": {"const": name}, "parameters": parameters},
                         "required": ["name", "parameters"], "additionalProperties": False})
    return {"type": "array", "items": {"anyOf": branches}, "minItems": 1, **({} if parallel else {"maxItems": 1}),
            **defs}
