"""The OpenAI request bodies the server accepts (a faithful subset, plus vLLM's extensions), validated by pydantic.

- A JSON ``null`` in any field means "the default", as OpenAI documents its fields ("number or null") and as
  vLLM accepts: the official client sends ``None`` as ``null``.
- Fields OpenAI or vLLM define but the engine does not implement are accepted only at their neutral values
  (no beam search, no tool_choice 'auto' with tools …); anything else is a 400 naming the field
  (:meth:`unsupported`), never a silent change of meaning.
- Unknown fields are ignored, as vLLM does (OpenAI's own server answers 400 "Unrecognized request argument"),
  and the server logs one warning per request naming them (:meth:`ignored_fields`).
- Integer fields take whole floats (``"max_tokens": 4.0``), as vLLM does; never strings or booleans.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import threading
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from functools import cached_property
from typing import Annotated, Any, Literal, TypeVar

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    StrictBool,
    StrictStr,
    ValidationError,
    field_validator,
    model_validator,
)

from accelkit.core.json_ints import max_int_digits, overlong_int
from accelkit.serve.config import ServerConfig
from accelkit.serve.sampling import StructuredOutputs
from accelkit.serve.server.errors import APIError, prompt_too_long, validation_message
from accelkit.serve.server.reasoning import REASONING_FORMATS, ReasoningFormat
from accelkit.serve.server.tool_parsers import FORMATS, CallFormat, call_format
from accelkit.serve.server.tools import ToolCalling, tool_calling


def _whole_float(value: Any) -> Any:
    # up to 2**53, where every whole float is the integer it reads as: past it (`"n": 1e300`) the value stays a float,
    # refused as one is (the 400 quoted all 301 digits of the integer it became, twice)
    return int(value) if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53 else value


Int = Annotated[int, Field(strict=True), BeforeValidator(_whole_float)]
Float = Annotated[float, Field(strict=True)]  # strict: an int is a number, a string or a boolean is not
Bool = StrictBool
Str = StrictStr


def _nullable_in_schema(schema: dict[str, Any], cls: type[BaseModel]) -> None:
    """The OpenAPI schema says what :meth:`_Body._null_is_default` does: every optional field also takes null."""
    for name, prop in schema.get("properties", {}).items():
        field = cls.model_fields.get(name)
        if field is None or field.is_required() or field.default is None:
            continue  # a None default already makes pydantic write the field as nullable
        inner = {k: prop.pop(k) for k in list(prop) if k not in ("title", "default", "description")}
        prop["anyOf"] = [*inner["anyOf"], {"type": "null"}] if list(inner) == ["anyOf"] else [inner, {"type": "null"}]


class _Body(BaseModel):
    """A JSON object of a request: null = default, unknown keys kept aside so that they can be named."""

    model_config = ConfigDict(extra="allow", json_schema_extra=_nullable_in_schema)

    _num_bytes: int = PrivateAttr(0)  # the body's size as received (set by parse_body)

    @property
    def num_bytes(self) -> int:
        """The size of the body this was parsed from, in bytes: what bounds the work of anything made from it
        (0 for one built in code)."""
        return self._num_bytes

    @model_validator(mode="before")
    @classmethod
    def _null_is_default(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        fields = cls.model_fields
        return {k: v for k, v in data.items()
                if v is not None or k not in fields or fields[k].is_required() or fields[k].default is None}

    def configure(self, config: ServerConfig, added_tokens: Collection[str] = ()) -> None:
        """Learn what the request needs to know of the server's settings (and of the tokenizer's added tokens,
        which pick a parser's form), before it is checked (nothing, but for chat)."""

    def unsupported(self) -> tuple[str, str] | None:
        """(field, message) for a feature asked for that the engine does not implement; None when there is none."""
        return None

    def ignored_fields(self, prefix: str = "") -> list[str]:
        """The unknown keys of this object and of the objects inside it, as paths (``messages[1].tool_calls``)."""
        names = [f"{prefix}{key}" for key in self.model_extra or ()]
        for name in type(self).model_fields:
            value = getattr(self, name)
            if isinstance(value, _Body):
                names += value.ignored_fields(f"{prefix}{name}.")
            elif isinstance(value, list):
                for i, item in enumerate(value):
                    if isinstance(item, _Body):
                        names += item.ignored_fields(f"{prefix}{name}[{i}].")
        return names


class _Request(_Body):
    """A whole request body: each names the model it is for."""

    model: Str | None = None


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class StreamOptions(_Body):
    include_usage: Bool = False
    continuous_usage_stats: Bool = Field(False, description="vLLM extension: with include_usage, the usage so far "
                                         "on every chunk too.")


class JSONSchemaFormat(_Body):
    """OpenAI's ``response_format.json_schema``."""

    name: Str | None = None
    description: Str | None = None
    # (pydantic's BaseModel has a `schema` method: the field is schema_, read and written as "schema")
    schema_: dict[str, Any] | None = Field(None, alias="schema", description="The JSON schema the output follows.")
    strict: Bool | None = Field(None, description="Accepted; the schema is always enforced (masked), never a hint.")


class ResponseFormat(_Body):
    type: Str = Field(description="'text' (the default), 'json_object' (the output is one JSON object), "
                      "'json_schema' (the output is valid under json_schema.schema) or 'structural_tag' (vLLM's: free "
                      "text with structures and triggers, see structured_outputs.structural_tag).")
    json_schema: JSONSchemaFormat | None = None
    structures: list[Any] | None = Field(None, description="type 'structural_tag': [{begin, schema, end}, ...].")
    triggers: list[Any] | None = Field(None, description="type 'structural_tag': the texts a structure's begin "
                                       "starts with.")


_WHITESPACE_FIELDS = ("whitespace_pattern", "disable_any_whitespace")  # JSON whitespace: they shape, not ask


def _both_whitespace(shaper: str) -> APIError:
    return APIError(400, f"{shaper} and structured_outputs' own whitespace setting both shape the output's "
                    "whitespace; send only one of them", param=shaper)


class StructuredOutputsBody(_Body):
    """vLLM's ``structured_outputs`` object: exactly one of json, regex, choice, grammar, structural_tag or
    json_object."""

    json_: dict[str, Any] | Str | None = Field(None, alias="json", description="A JSON schema (object or its text).")
    regex: Str | None = None
    choice: list[Str] | None = None
    json_object: Bool | None = None
    grammar: Str | None = Field(None, description="A grammar in llguidance's Lark syntax (or GBNF/EBNF).")
    structural_tag: dict[str, Any] | Str | None = Field(
        None, description='vLLM\'s structural tag (object or its text): {"structures": [{"begin", "schema", "end"}], '
        '"triggers": [...]}; tool calls as JSON between a begin and an end, in free text.')
    whitespace_pattern: Str | None = Field(
        None, description="json and json_object: a regex for the whitespace allowed between the JSON tokens, built "
        "of spaces, \\t, \\n and \\r (default: at most 2 spaces or newlines); the llguidance engine only.")
    disable_any_whitespace: Bool | None = Field(
        None, description="json and json_object: true = no whitespace between the JSON tokens (compact JSON).")

    def spec_fields(self) -> dict[str, Any]:
        """The fields given, as :class:`StructuredOutputs` takes them."""
        given: dict[str, Any] = {k: v for k, v in (
            ("json", self.json_), ("regex", self.regex), ("choice", self.choice), ("grammar", self.grammar),
            ("structural_tag", self.structural_tag), ("whitespace_pattern", self.whitespace_pattern)) if v is not None}
        for flag in ("json_object", "disable_any_whitespace"):
            if getattr(self, flag):
                given[flag] = True
        return given


# vLLM's sampling extensions the engine does not implement, at the value that changes nothing: any other is a 400
_NEUTRAL_EXTENSIONS: dict[str, Any] = {
    "use_beam_search": False,
    "logits_processors": None,  # (vLLM too refuses them unless started with --logits-processor-pattern)
}


class _Sampling(_Request):
    """Fields shared by both endpoints."""

    model: Str | None = Field(None, description="A served model id (GET /v1/models); omitted or null = the served model.")
    max_tokens: Int | None = None
    temperature: Float = 1.0
    top_p: Float = 1.0
    top_k: Int | None = Field(None, description="vLLM extension: keep the k most likely tokens; 0, -1 or null = no limit.")
    stop: Str | list[Str] | None = None
    stop_token_ids: list[Int] | None = Field(
        None, description="vLLM extension: token ids that end generation (counted in the usage; the one that does "
        "has its text left out unless include_stop_str_in_output)."
    )
    bad_words: list[Str] | None = Field(
        None, description="vLLM extension: words the output never holds as tokens (each tokenized alone and after a "
        "space; its last token masked wherever the output ends with the rest of it). Not with structured outputs."
    )
    seed: Int | None = None
    stream: Bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: Bool = Field(False, description="vLLM extension: keep generating after EOS (load tests).")
    n: Int = Field(1, description="Choices per prompt (each its own engine request; the prompt's KV blocks are "
                   "shared through the prefix cache).")
    presence_penalty: Float = Field(0.0, description="In [-2, 2]: subtracted from the logit of every token generated so far.")
    frequency_penalty: Float = Field(0.0, description="In [-2, 2]: subtracted once per time a token was generated so far.")
    logit_bias: dict[str, Float] | None = Field(
        None, description="Token id (a string, as OpenAI's) → bias in [-100, 100] added to its logit."
    )
    response_format: ResponseFormat | None = None
    user: Str | None = None
    priority: Int = Field(0, description="vLLM extension: with --scheduling-policy priority, lower values are "
                          "scheduled first; anything but 0 needs that policy.")
    min_tokens: Int = Field(0, description="vLLM extension: at least this many tokens before EOS, stop_token_ids or "
                            "a stop string can end generation.")
    min_p: Float = Field(0.0, description="vLLM extension: drop tokens less likely than min_p × the top one, in [0, 1].")
    repetition_penalty: Float = Field(1.0, description="vLLM extension: > 0; logits of tokens in the prompt or the "
                                      "output are divided by it (positive) or multiplied (negative).")
    allowed_token_ids: list[Int] | None = Field(
        None, description="vLLM extension: sampling (greedy too) picks only among these token ids, each in [0, "
        "vocabulary size); at least one. EOS too: unless it is listed, generation ends only by max_tokens or stop. "
        "Logprobs stay the model's raw ones (top_logprobs may name other tokens)."
    )
    return_tokens_as_token_ids: Bool | None = Field(
        None, description="vLLM extension: logprobs name each token token_id:<id> (its bytes those of that name), "
        "not by its text, which can be ambiguous."
    )
    return_token_ids: Bool | None = Field(
        None, description="vLLM extension: the token ids beside the text — completions: each choice's "
        "prompt_token_ids (those that ran) and token_ids (its output's); chat: the response's prompt_token_ids and "
        "each choice's token_ids. Streamed: prompt_token_ids with a choice's first chunk (chat: beside its choices, as vLLM), "
        "the chunk's new token_ids on every chunk (joined: the full list)."
    )
    cache_salt: Str | None = Field(
        None, description="vLLM extension: prompt blocks cached for a request with a salt serve only requests with "
        "the same salt (1 to 1,024 characters): tenants sharing a server cannot time each other's prompts through the "
        "prefix cache."
    )
    include_stop_str_in_output: Bool = Field(
        False, description="vLLM extension: the stop string that ended generation stays at the end of the text "
        "(streamed too: the deltas joined are the same text)."
    )
    truncate_prompt_tokens: Int | None = Field(
        None, description="vLLM extension: k >= 1 runs only the last k tokens of each prompt (chat: of the rendered "
        "template, as vLLM); usage.prompt_tokens counts them, and completions' echo returns their text "
        "(tokenizer.decode, special tokens included). A shorter prompt runs whole; null = the whole prompt."
    )
    prompt_logprobs: Int | None = Field(
        None, description="vLLM extension: k in 0..20 returns prompt_logprobs (completions: in each choice; chat: "
        "in the response), one entry per prompt token: null for the first, then {token id (a string): {logprob, "
        "rank, decoded_token}} holding that prompt token (rank: its place in the vocabulary by logprob, 1 = the most "
        "likely; it may be past k) and the k most likely there (ranks 1..k). The model's raw logprobs. Not with "
        "stream (as vLLM); vLLM's -1 (the whole vocabulary) is a 400. Such a request skips the prefix cache."
    )
    skip_special_tokens: Bool = Field(True, description="vLLM extension: false keeps special tokens (control tokens "
                                      "such as Mistral's [TOOL_CALLS]) in the text; the stop token that ended the "
                                      "output is left out all the same, as in vLLM.")
    # vLLM extensions, accepted at their neutral values only (_NEUTRAL_EXTENSIONS)
    use_beam_search: Bool = False
    logits_processors: list[Any] | None = Field(
        None, description="vLLM extension: refused (a 400) unless empty — the server runs no custom logits "
        "processors (vLLM refuses them too unless started with --logits-processor-pattern).")
    # structured outputs, vLLM's ways of asking (besides response_format): at most one of them per request
    structured_outputs: StructuredOutputsBody | None = Field(
        None, description="vLLM extension: {json: schema} | {regex} | {choice: [...]} | {grammar} | {structural_tag} "
        "| {json_object: true}; the output is masked token by token to match it (docs/serve.md: what the llguidance engine refuses)."
    )
    guided_json: dict[str, Any] | Str | None = Field(None, description="vLLM extension (older name): a JSON schema.")
    guided_regex: Str | None = Field(None, description="vLLM extension (older name): a regex the output matches.")
    guided_choice: list[Str] | None = Field(None, description="vLLM extension (older name): the output is one of these.")
    guided_grammar: Str | None = Field(None, description="vLLM extension (older name): a Lark (or GBNF) grammar.")
    guided_whitespace_pattern: Str | None = Field(
        None, description="vLLM extension (older name): structured_outputs.whitespace_pattern, for the JSON output "
        "another field asks for.")

    def unsupported(self) -> tuple[str, str] | None:
        """(field, message) for a feature asked for that the engine does not implement."""
        fmt = self.response_format
        if fmt is not None and fmt.type not in ("text", "json_object", "json_schema", "structural_tag"):
            return "response_format", (f"response_format type {fmt.type!r} is not supported; expected 'text', "
                                       "'json_object', 'json_schema' or 'structural_tag'")
        for name, neutral in _NEUTRAL_EXTENSIONS.items():
            value = getattr(self, name)
            if neutral is None and not value:  # ([] asks for nothing either, as in vLLM)
                continue
            if value != neutral:  # the types are strict: 0 == 0.0 is the only coincidence, and a harmless one
                return name, (f"{name}={_short(value)} is not supported by accelkit serve; "
                              f"{'omit it' if neutral is None else f'omit it or send {neutral!r}'}")
        if self.stream_options is not None and not self.stream:
            return "stream_options", "stream_options is only allowed when stream is true"
        return None

    def structured(self) -> tuple[str, StructuredOutputs] | None:
        """(the request field that asked, its spec) for structured outputs, or None; an APIError (400) when more
        than one field asks or the one that does is malformed. JSON whitespace settings given apart from the
        field that asks — ``guided_whitespace_pattern``, or a ``structured_outputs`` that holds nothing else —
        shape that field's output."""
        so = self.structured_outputs.spec_fields() if self.structured_outputs is not None else {}
        asked = self._asked(so)
        shaping, shaper = self._whitespace_shaping(so)
        self._whitespace_from = shaper
        if not asked:
            if shaper is not None:
                raise APIError(400, f"{shaper} shapes the whitespace of a JSON output, and no field asks for one; "
                               "send guided_json or response_format with it, or leave it out", param=shaper)
            return None
        if len(asked) > 1:
            names = ", ".join(name for name, _ in asked)
            raise APIError(400, f"{names} each ask for structured output; send only one of them",
                           param=asked[1][0])
        name, fields = asked[0]
        if shaper is not None:
            if any(k in fields for k in _WHITESPACE_FIELDS):
                raise _both_whitespace(shaper)
            fields = {**fields, **shaping}
        try:
            return name, StructuredOutputs(**fields)
        except ValueError as exc:
            raise self.structured_error(name, str(exc)) from exc

    def _asked(self, so: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """(field, StructuredOutputs fields) of each field that asks for a structured output (``so``:
        structured_outputs' fields)."""
        asked: list[tuple[str, dict[str, Any]]] = []
        fmt = self.response_format
        if fmt is not None and fmt.type == "json_object":
            asked.append(("response_format", {"json_object": True}))
        elif fmt is not None and fmt.type == "json_schema":
            if fmt.json_schema is None or fmt.json_schema.schema_ is None:
                raise APIError(400, "response_format type 'json_schema' needs json_schema.schema (a JSON schema "
                               "object)", param="response_format")
            asked.append(("response_format", {"json": fmt.json_schema.schema_}))
        elif fmt is not None and fmt.type == "structural_tag":
            asked.append(("response_format", {"structural_tag": {"structures": fmt.structures,
                                                                 "triggers": fmt.triggers}}))
        if any(k not in _WHITESPACE_FIELDS for k in so):
            asked.append(("structured_outputs", so))
        for name, key in (("guided_json", "json"), ("guided_regex", "regex"), ("guided_choice", "choice"),
                          ("guided_grammar", "grammar")):
            value = getattr(self, name)
            if value is not None:
                asked.append((name, {key: value}))
        return asked

    def _whitespace_shaping(self, so: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
        """(JSON whitespace settings given apart from the field that asks, the field they came in, or None;
        ``so``: structured_outputs' fields)."""
        alone = so if so and all(k in _WHITESPACE_FIELDS for k in so) else {}
        pattern = self.guided_whitespace_pattern
        if pattern is not None:
            if alone:
                raise _both_whitespace("guided_whitespace_pattern")
            return {"whitespace_pattern": pattern}, "guided_whitespace_pattern"
        return (alone, "structured_outputs") if alone else ({}, None)

    #: where the request's JSON whitespace setting came from when not in the field that asks (see structured)
    _whitespace_from: str | None = PrivateAttr(None)

    def structured_error(self, name: str, message: str) -> APIError:
        """A 400 for a StructuredOutputs or compile error of the spec ``name`` asked for, in the words of the field
        the client sent — the whitespace setting's own where the error is about it."""
        source = self._whitespace_from
        if source is not None and (any(f"structured_outputs.{k}" in message for k in _WHITESPACE_FIELDS)
                                   or "sets both whitespace_pattern" in message):
            if source == "guided_whitespace_pattern":
                message = message.replace("structured_outputs.whitespace_pattern", source)
            return APIError(400, message, param=source)
        return APIError(400, self.structured_message(name, message), param=name)

    def structured_message(self, name: str, message: str) -> str:
        """A StructuredOutputs or compile error in the words of the field the client sent (``guided_json: …``)."""
        if name == "structured_outputs":
            return message
        for key in ("json", "regex", "choice", "grammar", "structural_tag"):
            message = message.replace(f"structured_outputs.{key}", name)
        return message if message.startswith(name) else f"{name}: {message}"

    def stop_list(self) -> tuple[str, ...]:
        if self.stop is None:
            return ()
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop)

    @property
    def top_k_limit(self) -> int | None:
        """top_k for the sampler: 0 and -1 mean "no limit" in vLLM (and the OpenAI-style clients written for it)."""
        return None if self.top_k in (0, -1) else self.top_k


def _prompt_kind(item: Any) -> str:
    if isinstance(item, str):
        return "strings"
    if isinstance(item, list):
        return "lists of token ids"
    if isinstance(item, (int, float)) and not isinstance(item, bool):
        return "token ids"
    return f"a {type(item).__name__}"


def _one_prompt_shape(value: Any) -> Any:
    """A list that mixes shapes: one sentence naming the shapes a prompt takes, not pydantic's guesses at each
    member of the union ("prompt.1: expected a valid string, or a valid integer")."""
    if isinstance(value, list) and value:
        kinds = list(dict.fromkeys(_prompt_kind(item) for item in value))
        if len(kinds) > 1 or kinds[0].startswith("a "):
            raise ValueError(f"a prompt is a string, a list of token ids, or a list of either (several prompts); "
                             f"this list holds {' and '.join(kinds)}")
        # a float that is no token id (2.5, 1e400 = inf, NaN): named by its index, not "prompt.0: expected a
        # valid string, or a valid list" — pydantic's guess at the first member of the union that failed
        lists = value if kinds[0] == "lists of token ids" else [value] if kinds[0] == "token ids" else []
        for i, ids in enumerate(lists):
            bad = next((j for j, t in enumerate(ids) if isinstance(t, float) and not t.is_integer()), None)
            if bad is not None:
                where = f"prompt[{i}][{bad}]" if lists is value else f"prompt[{bad}]"
                raise ValueError(f"{where}={ids[bad]!r} is not a token id; a prompt of token ids holds integers")
    return value


Prompt = Annotated[Str | list[Str] | list[Int] | list[list[Int]], BeforeValidator(_one_prompt_shape)]


class CompletionRequest(_Sampling):
    """POST /v1/completions."""

    prompt: Prompt
    echo: Bool = Field(False, description="Return each prompt's text before its completion; with logprobs, the "
                       "prompt tokens' logprobs first (the first token's null); with max_tokens=0, the prompt alone.")
    logprobs: Int | None = Field(None, description="The logprobs of each token and of the most likely ones (0..20).")
    best_of: Int | None = Field(None, description="Generate this many (>= n) per prompt and return the n with the "
                                "highest logprob per token (OpenAI's rule); not with stream unless equal to n.")
    suffix: Str | None = None
    add_special_tokens: Bool = Field(True, description="vLLM extension: add the tokenizer's special tokens (BOS) to a text prompt.")

    def prompts(self) -> list[str | list[int]]:
        """One entry per choice: text or token ids."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if not p:
            return []
        texts = [x for x in p if isinstance(x, str)]
        if len(texts) == len(p):
            return list(texts)
        ids = [x for x in p if isinstance(x, int)]
        if len(ids) == len(p):
            return [ids]
        return [list(x) for x in p if isinstance(x, list)]  # pydantic admits only list[list[int]] here

    def unsupported(self) -> tuple[str, str] | None:
        if self.suffix is not None:
            return "suffix", "suffix is not supported by accelkit serve (as in vLLM); omit it or send null"
        return _Sampling.unsupported(self)

    @property
    def num_logprobs(self) -> int | None:
        return self.logprobs

    @property
    def num_generated(self) -> int:
        """Engine requests per prompt: best_of when given (it is >= n), else n."""
        return self.best_of if self.best_of is not None else self.n


class TextPart(_Body):
    type: Literal["text"]
    text: Str


def _call_for_template(j: int, call: dict[str, Any]) -> dict[str, Any]:
    """An assistant turn's tool call with its ``function.arguments`` read from JSON text into what it holds ({} for
    none or ""), as vLLM's chat handling does before the template; arguments that are not JSON: a ValueError."""
    function = call.get("function")
    if not isinstance(function, dict) or not isinstance(function.get("name"), str):
        # (a call without its function rendered as nothing: the template skipped it, the model never saw it)
        raise ValueError(f"tool call {j} has no function name; send each call as it came back: {{\"id\": …, "
                         "\"type\": \"function\", \"function\": {\"name\": …, \"arguments\": \"…\"}}")
    arguments = function.get("arguments")
    if isinstance(arguments, (dict, list)):
        return call
    if arguments is None or arguments == "":
        parsed: Any = {}
    elif isinstance(arguments, str):
        try:
            parsed = json.loads(arguments)
        except ValueError as exc:
            raise ValueError(f"tool call {j}'s function.arguments is not JSON ({exc}); send the arguments as the "
                             "JSON text the call came with") from None
    else:
        return call
    return {**call, "function": {**function, "arguments": parsed}}


class ChatMessage(_Body):
    role: Literal["system", "user", "assistant", "developer", "tool"]
    content: Str | list[TextPart] | None = None
    name: Str | None = None
    tool_calls: list[dict[str, Any]] | None = Field(
        None, description="An assistant turn's tool calls, passed to the chat template as vLLM passes them: each "
        "call's function.arguments (OpenAI's JSON text) as the object it holds — chat templates write it with "
        "tojson, so a string would be encoded twice — and an empty list as none.")
    tool_call_id: Str | None = Field(None, description="A tool turn's call id, passed to the chat template.")
    reasoning: Str | None = Field(None, description="An assistant turn's thinking, passed to the chat template as both "
                                  "reasoning and reasoning_content (as vLLM passes it: Qwen3's templates write a past "
                                  "turn's thinking back in agent loops).")
    reasoning_content: Str | None = Field(None, description="The older name of reasoning (the same).")

    @field_validator("tool_calls")
    @classmethod
    def _calls_for_template(cls, calls: list[dict[str, Any]] | None) -> list[dict[str, Any]] | None:
        if not calls:  # ([]: the template's plain assistant turn, not its tool-call one)
            return None
        return [_call_for_template(j, call) for j, call in enumerate(calls)]

    def text(self) -> str:
        """The content as one string: text parts joined by newlines, as vLLM joins them."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "\n".join(part.text for part in self.content)

    def for_template(self) -> dict[str, Any]:
        """The message as chat templates see it: the role as sent (``developer`` too, as vLLM passes it), and the
        name, tool calls and tool call id when sent."""
        message: dict[str, Any] = {"role": self.role, "content": self.text()}
        for key in ("name", "tool_calls", "tool_call_id"):
            if getattr(self, key) is not None:
                message[key] = getattr(self, key)
        thought = self.reasoning if self.reasoning is not None else self.reasoning_content
        if thought is not None:
            message["reasoning"] = message["reasoning_content"] = thought
        return message


def _request_template_problem(template: str | None) -> tuple[str, str] | None:
    if template is None:
        return None
    return "chat_template", ("a chat template in the request is not accepted: the server renders with its own "
                             "(--chat-template, or the model's), as vLLM does unless started with "
                             "--trust-request-chat-template; leave chat_template out")


def _template_flags_problem(add_generation_prompt: bool, continue_final_message: bool) -> tuple[str, str] | None:
    if continue_final_message and add_generation_prompt:  # a new assistant turn and an open last one: vLLM refuses
        return "continue_final_message", ("continue_final_message and add_generation_prompt cannot both be true; "
                                          "send add_generation_prompt false to continue the last message")
    return None


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: Annotated[list[ChatMessage], Field(min_length=1)]
    max_completion_tokens: Int | None = None
    logprobs: Bool = False
    top_logprobs: Int | None = None
    tools: list[Any] | None = Field(None, description="Function tools ({type: function, function: {name, "
                                    "description, parameters}}), passed to the chat template as sent.")
    tool_choice: Str | dict[str, Any] | None = Field(
        None, description="'required' (one or more calls, any tools) or {type: function, function: {name}} (that "
        "function): the output is masked to the calls' JSON (structured outputs) and returned as tool_calls; "
        "'none': text, the tools still rendered; 'auto' (the default with tools): text or calls in the model's own "
        "format, which needs a server started with --tool-call-parser (each call the model opens is masked to a "
        "whole, valid call)."
    )
    parallel_tool_calls: Bool | None = Field(None, description="false: at most one call ('required' makes exactly "
                                             "one; 'auto' returns the model's first call only, as vLLM).")
    functions: list[Any] | None = None
    function_call: Str | dict[str, Any] | None = Field(None, description="'none' or 'auto' only (no functions).")
    echo: Bool = Field(False, description="vLLM extension: only false.")
    best_of: Int | None = Field(None, description="vLLM extension (v0's; its v1 engine refuses it): generate this "
                                "many (>= n) and return the n with the highest logprob per token, as completions' "
                                "best_of; not with stream unless equal to n.")
    # OpenAI's audio output: refused, not ignored (a 200 of text alone is not what was asked for)
    modalities: list[Str] | None = Field(None, description="Only [\"text\"] (or null): the server writes text, no "
                                         "audio.")
    audio: dict[str, Any] | None = Field(None, description="OpenAI's audio output parameters: refused (a 400), "
                                         "the server makes no audio.")
    include_reasoning: Bool = Field(
        True, description="vLLM extension: with a server started with --reasoning-parser, false leaves the model's "
        "reasoning out of the response (it is generated all the same)."
    )
    add_generation_prompt: Bool = Field(True, description="vLLM extension: end the rendered template with the assistant's turn header.")
    continue_final_message: Bool = Field(
        False, description="vLLM extension: render the last (assistant) message open, for the model to continue it; "
        "needs add_generation_prompt false."
    )
    chat_template_kwargs: dict[str, Any] | None = Field(
        None, description="vLLM extension: extra variables for the chat template, e.g. {\"enable_thinking\": false}."
    )
    add_special_tokens: Bool = Field(
        False, description="vLLM extension: add the tokenizer's special tokens again to the rendered template."
    )
    documents: list[dict[str, Any]] | None = Field(
        None, description="vLLM extension: retrieved documents for a RAG chat template (apply_chat_template's "
        "documents, each e.g. {\"title\": …, \"text\": …}).")
    chat_template: Str | None = Field(
        None, description="Refused (a 400): the server renders with its own template (--chat-template or the "
        "model's), as vLLM does unless started with --trust-request-chat-template.")

    @property
    def num_logprobs(self) -> int | None:
        """The sampler's logprobs: top_logprobs (0 when not given) when logprobs is true, else none."""
        return (self.top_logprobs or 0) if self.logprobs else None

    @property
    def num_generated(self) -> int:
        """Engine requests per prompt: best_of when given (it is >= n), else n."""
        return self.best_of if self.best_of is not None else self.n

    #: the server's tool-call format (``--tool-call-parser``), set by :meth:`configure` before anything reads the
    #: request: "auto" with tools needs it
    _call_format: CallFormat | None = PrivateAttr(None)

    _reasoning_format: ReasoningFormat | None = PrivateAttr(None)  # (``--reasoning-parser``, set there too)

    @property
    def _asks_auto(self) -> bool:
        """Tools with tool_choice "auto" or omitted: text or calls in the model's own format."""
        return bool(self.tools) and self.tool_choice in (None, "auto")

    def configure(self, config: ServerConfig, added_tokens: Collection[str] = ()) -> None:
        self._call_format = call_format(config.tool_call_parser, added_tokens)
        if self._call_format is not None and self._call_format.keeps_special_tokens and self._asks_auto:
            self.skip_special_tokens = False  # (its call markers must be in the text, as for vLLM's parsers)
        self._reasoning_format = (REASONING_FORMATS[config.reasoning_parser] if config.reasoning_parser is not None
                                  else None)

    #: the output is masked from its first token by a structured output or a forced tool call (not after thinking,
    #: not "auto"'s free text): it is all answer (set by ``ServingChat.structured_after``)
    _answer_only: bool = PrivateAttr(False)

    @property
    def server_reasoning_format(self) -> ReasoningFormat | None:
        return self._reasoning_format

    def prompt_thinking(self, opens: bool | None) -> None:
        """How the rendered prompt leaves the thinking (:func:`~accelkit.serve.server.reasoning.thinks_first`): what
        splits this request's output starts from there."""
        if self._reasoning_format is not None:
            self._reasoning_format = dataclasses.replace(self._reasoning_format, prompt_opens=opens)

    def answer_only(self) -> None:
        self._answer_only = True

    @property
    def reasoning_format(self) -> ReasoningFormat | None:
        """The server's reasoning format (``--reasoning-parser``) — unless the output is constrained from its first
        token (:meth:`answer_only`): that output is all answer. Read once the request is prepared."""
        return None if self._answer_only else self._reasoning_format

    def unsupported(self) -> tuple[str, str] | None:
        if self._asks_auto and self._call_format is None:
            return "tool_choice", ("tool_choice 'auto' (the default with tools) needs the model's tool-call format, "
                                   "and this server was started without one; start it with --tool-call-parser "
                                   f"({' | '.join(FORMATS)}), or send tool_choice 'required' or "
                                   "{\"type\": \"function\", \"function\": {\"name\": …}} (the output is then "
                                   "constrained to the call), or 'none'")
        if self.functions:
            return "functions", "the legacy functions field is not supported by accelkit serve; use tools"
        if self.function_call is not None and self.function_call not in ("none", "auto"):
            return "function_call", (f"function_call={_short(self.function_call)} is not supported by accelkit "
                                     "serve; use tools with tool_choice")
        if self.echo:
            return "echo", ("echo is not supported by accelkit serve for chat; omit it or send false (to continue "
                            "an assistant message, send it last with continue_final_message true and "
                            "add_generation_prompt false)")
        if self.modalities is not None and any(m != "text" for m in self.modalities):
            return "modalities", (f"modalities={_short(self.modalities)} asks for output accelkit serve does not make "
                                  "(it writes text only); send [\"text\"] or omit it")
        if self.audio is not None:
            return "audio", "audio output is not supported by accelkit serve; omit audio and send modalities [\"text\"]"
        return _request_template_problem(self.chat_template) or \
            _template_flags_problem(self.add_generation_prompt, self.continue_final_message) or \
            _Sampling.unsupported(self)

    @cached_property
    def _calling(self) -> ToolCalling | None:
        return tool_calling(self.tools, self.tool_choice, parallel_tool_calls=self.parallel_tool_calls,
                            call_format=self._call_format)

    #: "auto" with the answer a response_format asks for beside the tools (set by :meth:`structured`)
    _answered: ToolCalling | None = PrivateAttr(None)

    @property
    def tool_calling(self) -> ToolCalling | None:
        """What tools and tool_choice ask for (None: text), or an APIError (400) naming the field; worked out once
        per request (the endpoint, structured() and an error message all read it)."""
        return self._answered if self._answered is not None else self._calling

    def structured(self) -> tuple[str, StructuredOutputs] | None:
        """The tool call's constraint ("tools" asks), else :meth:`_Sampling.structured`; both is a 400."""
        calling = self.tool_calling
        asked = _Sampling.structured(self)
        if calling is None:
            return asked
        if asked is not None and calling.kind == "auto":
            field, spec = asked
            if spec.kind not in ("json", "json_object") or spec.whitespace_pattern is not None \
                    or spec.disable_any_whitespace:
                what = spec.kind if spec.kind not in ("json", "json_object") else f"{spec.kind}, a whitespace setting"
                raise APIError(400, f"{field} asks for structured output ({what}) that cannot go beside tool_choice "
                               "'auto' (the default with tools), which constrains the model's calls: beside tools "
                               "the answer can be a JSON schema or a JSON object (response_format json_schema or "
                               "json_object); or send tool_choice 'none' for the structured output alone", param=field)
            schema = json.loads(spec.json) if spec.json is not None else {"type": "object"}
            if schema is False:
                raise APIError(400, f"{field}: no document is valid under the schema false", param=field)
            self._answered = calling = calling.with_answer(field, {} if schema is True else schema)
        elif asked is not None:
            raise APIError(400, f"{asked[0]} asks for structured output, and tool_choice constrains the output to "
                           "the tool call; send only one of them", param=asked[0])
        try:
            return "tools", calling.spec()
        except ValueError as exc:  # (a schema past the size limit)
            raise APIError(400, calling.error_message(str(exc)), param="tools") from exc

    def structured_error(self, name: str, message: str) -> APIError:
        error = _Sampling.structured_error(self, name, message)
        calling = self.tool_calling if name == "tools" else None
        if calling is not None and calling.answer is not None and error.message.startswith(f"{calling.answer[0]}: "):
            error.param = calling.answer[0]  # (about the answer's schema: the field that gave it)
        return error

    def structured_message(self, name: str, message: str) -> str:
        calling = self.tool_calling if name == "tools" else None
        return calling.error_message(message) if calling is not None else _Sampling.structured_message(self, name,
                                                                                                         message)

    @property
    def token_limit(self) -> int | None:
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    @property
    def token_limit_field(self) -> str:
        return "max_completion_tokens" if self.max_completion_tokens is not None else "max_tokens"


class TokenizeRequest(_Request):
    """POST /tokenize (vLLM's): exactly one of a text ``prompt`` or chat ``messages``."""

    model: Str | None = None
    prompt: Str | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: Bool | None = Field(
        None, description="Add the tokenizer's special tokens; null = true for a prompt, false for messages (the "
        "template holds them)."
    )
    add_generation_prompt: Bool = True
    continue_final_message: Bool = False
    chat_template_kwargs: dict[str, Any] | None = None
    tools: list[Any] | None = Field(None, description="With messages: function tools passed to the chat template, "
                                    "as chat completions passes them (so the count matches that prompt's).")
    documents: list[dict[str, Any]] | None = Field(None, description="With messages: RAG documents for the chat "
                                                   "template, as chat completions passes them.")
    chat_template: Str | None = Field(None, description="Refused (a 400), as in chat completions.")
    return_token_strs: Bool = False

    def unsupported(self) -> tuple[str, str] | None:
        return _request_template_problem(self.chat_template) or \
            _template_flags_problem(self.add_generation_prompt, self.continue_final_message)


class DetokenizeRequest(_Request):
    """POST /detokenize (vLLM's)."""

    model: Str | None = None
    tokens: list[Int]


# ---- parsing a body (in a worker thread when large) ---------------------------------------------------------------

B = TypeVar("B", bound=_Request)
_gc_lock = threading.Lock()
_gc_holds = 0  # parses running with the cyclic collector paused (it is process-wide)


@contextmanager
def _no_cyclic_gc() -> Iterator[None]:
    """The cyclic garbage collector paused while a body becomes objects. Millions of fresh containers (a list of
    250k nested objects: legal under an 8 MiB limit) set off collections that walk them all, holding the GIL —
    the event loop in the other thread stopped for most of a second. The objects a parse makes form no cycles;
    reference counting frees them as before."""
    global _gc_holds
    with _gc_lock:
        if _gc_holds == 0 and not gc.isenabled():  # someone else paused it: theirs to restart
            _gc_holds = -1
        elif _gc_holds >= 0:
            _gc_holds += 1
            gc.disable()
    try:
        yield
    finally:
        with _gc_lock:
            if _gc_holds > 0:
                _gc_holds -= 1
                if _gc_holds == 0:
                    gc.enable()
            else:
                _gc_holds = 0


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    # a Python-level hook (the C scanner would otherwise build a whole body without ever letting the event loop's
    # thread take the GIL): json.loads keeps the last of duplicate keys the same way
    return dict(pairs)


def _is_json(content_type: str | None) -> bool:
    """``application/json`` or ``application/*+json`` (parameters such as charset aside), as FastAPI reads a body."""
    if not content_type:
        return False
    kind = content_type.split(";", 1)[0].strip().lower()
    main, _, sub = kind.partition("/")
    return main == "application" and (sub == "json" or sub.endswith("+json"))


NOT_AN_OBJECT = "the request body must be a JSON object, sent with 'Content-Type: application/json'"


def parse_body(cls: type[B], raw: bytes, content_type: str | None, *, max_model_len: int) -> tuple[B, list[str]]:
    """(request, its ignored fields' paths) from a body's bytes, or an :class:`APIError` as OpenAI's server words
    it. Runs in a worker thread for a large body: JSON decoding and validation of an 8 MiB body take seconds, which
    on the event loop would stall every stream and /health. A prompt of more token ids than the context holds is
    refused before each id is validated (a few megabytes of ids would cost seconds of validation for the same 400)."""
    if not raw:
        raise APIError(400, "the request body is empty; send a JSON object with 'Content-Type: application/json'",
                       code="invalid_json")
    if not _is_json(content_type):
        raise APIError(400, NOT_AN_OBJECT, code="invalid_json")
    with _no_cyclic_gc():
        try:
            data = json.loads(raw, object_pairs_hook=_object)
        except json.JSONDecodeError as exc:
            raise APIError(400, f"the request body is not valid JSON: {exc.msg} at line {exc.lineno} column "
                           f"{exc.colno}", code="invalid_json") from None
        except UnicodeDecodeError as exc:
            raise APIError(400, f"the request body is not valid JSON: it is not UTF-8 text (byte {exc.start} is "
                           f"{raw[exc.start:exc.start + 1]!r})", code="invalid_json") from None
        except RecursionError:
            raise APIError(400, "the request body is not valid JSON: it nests objects or arrays too deeply",
                           code="invalid_json") from None
        except ValueError:  # an integer literal longer than Python converts (4,300 digits by default)
            raise _overlong_int_error(raw) from None
        if not isinstance(data, dict):
            raise APIError(400, NOT_AN_OBJECT, code="invalid_json")
        if data.get("truncate_prompt_tokens") is None:  # (truncated, a long prompt may fit)
            _refuse_overlong_ids(data.get("prompt"), max_model_len)
        try:
            body = cls.model_validate(data)
        except ValidationError as exc:
            message, param = validation_message(list(exc.errors(include_url=False, include_input=False)))
            raise APIError(400, message, param=param, code="invalid_value") from None
        body._num_bytes = len(raw)
        return body, body.ignored_fields()


def _overlong_int_error(raw: bytes) -> APIError:
    found = overlong_int(raw)
    path, digits = found if found is not None else ("body", 0)
    return APIError(400, f"{path}: an integer of {digits} digits; at most {max_int_digits()} digits are accepted "
                    "(no token id, count or seed is that long)", param=None if path == "body" else path.split(".")[0],
                    code="invalid_value")


def _refuse_overlong_ids(prompt: Any, max_model_len: int) -> None:
    """A prompt of token ids (or a list of them) holding a prompt longer than the context: the 400 that tokenizing
    would give, without validating millions of ids first."""
    if not isinstance(prompt, list) or not prompt:
        return
    prompts = prompt if isinstance(prompt[0], list) else [prompt]
    for ids in prompts:
        if isinstance(ids, list) and len(ids) >= max_model_len and isinstance(ids[0], (int, float)) \
                and not isinstance(ids[0], bool):
            raise APIError(400, prompt_too_long(len(ids), max_model_len), param="prompt", code="context_length_exceeded")
