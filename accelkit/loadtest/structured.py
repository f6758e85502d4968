"""Structured outputs in a load test: the constraint each request carries, how it goes into the request body, and
whether each output obeys it (as vLLM's ``benchmark_serving_structured_output.py`` reports its share of valid
outputs).

An output is checked once its request has ended, after the pass (outside its clock):

- ``truncated``: the request ended with ``finish_reason: "length"`` — max_tokens cut it, so it is at most the
  beginning of a match, whatever its text;
- ``valid`` / ``invalid``: otherwise, the whole output text (chat: ``delta.content`` only, never reasoning) against
  the constraint — json: parses and validates against the schema (``jsonschema``, the schema's own draft, formats
  as its FormatChecker knows them); json_object: parses to an object; regex: ``re.fullmatch``; choice: equals one.

Only successful requests are checked (a failed one is counted with its error).
"""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from accelkit.core.spec import Spec, spec_field

if TYPE_CHECKING:
    from accelkit.loadtest.metrics import RequestRecord

__all__ = ["ConstraintKind", "OutputChecker", "OutputConstraint", "parse_constraint", "request_fields"]

ConstraintKind = Literal["json", "regex", "choice", "json_object"]
Validity = Literal["valid", "invalid", "truncated"]

SYNTAX = "json:SCHEMA_FILE, regex:PATTERN, choice:A,B,C or json_object"
#: the json_schema name OpenAI's response_format requires (^[a-zA-Z0-9_-]{1,64}$)
SCHEMA_NAME = "accelkit_loadtest"
_MAX_REASON_CHARS = 200
_MAX_EXAMPLES = 3
MAX_SCHEMA_BYTES = 16 << 20  # 16 MiB (2^20 bytes): far past any real schema


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputConstraint(Spec):
    """What every request's output must be: one of the four kinds, with the field its kind needs."""

    kind: ConstraintKind = spec_field(doc="json (a JSON schema), regex, choice or json_object (any JSON object).")
    schema: dict[str, Any] | None = spec_field(None, doc="kind json: the JSON schema (an object).")
    regex: str | None = spec_field(None, doc="kind regex: Python syntax, matched against the whole output.")
    choices: tuple[str, ...] | None = spec_field(None, doc="kind choice: the outputs allowed, distinct, not empty.")
    schema_path: str | None = spec_field(None, doc="kind json: the file the schema was read from (for the record).")

    def validate(self) -> None:
        given = {name for name in ("schema", "regex", "choices") if getattr(self, name) is not None}
        needed = {"json": {"schema"}, "regex": {"regex"}, "choice": {"choices"}, "json_object": set()}[self.kind]
        if given != needed:
            raise ValueError(f"structured_outputs kind {self.kind!r} takes {' and '.join(sorted(needed)) or 'no value'}"
                             f"; got {' and '.join(sorted(given)) or 'none'}")
        # the request body is UTF-8 JSON: a lone surrogate (from undecodable argv bytes, or a '\udcff' escape in a
        # schema) would fail every request at send time
        for name in sorted(given):
            text = json.dumps(getattr(self, name), ensure_ascii=False)
            if not text.isascii():
                try:
                    text.encode("utf-8")
                except UnicodeEncodeError:
                    raise ValueError(f"structured_outputs {name} holds a character UTF-8 cannot carry (a lone "
                                     "surrogate); check the text or the file's encoding") from None
        if self.schema is not None:
            _check_schema(self.schema)
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"structured_outputs regex {self.regex!r} does not compile: {exc}") from None
        if self.choices is not None:
            if not self.choices or any(not c for c in self.choices):
                raise ValueError(f"structured_outputs choices {list(self.choices)!r} must be non-empty strings, "
                                 "at least one")
            if len(set(self.choices)) != len(self.choices):
                raise ValueError(f"structured_outputs choices {list(self.choices)!r} repeat one; give each once")

    def describe(self) -> str:
        """'json (schema.json)', 'regex [0-9]+', 'choice yes|no', 'json_object'."""
        if self.kind == "json":
            return f"json ({self.schema_path or 'inline schema'})"
        if self.kind == "regex":
            return f"regex {self.regex}"
        if self.kind == "choice":
            return "choice " + "|".join(self.choices or ())
        return "json_object"


def _check_schema(schema: dict[str, Any]) -> None:
    """The schema is one its own draft accepts (jsonschema's meta-schema check), so that an invalid output is the
    server's, never a schema that no output could satisfy."""
    from jsonschema.exceptions import SchemaError
    from jsonschema.validators import validator_for

    try:
        validator_for(schema).check_schema(schema)
    except SchemaError as exc:
        where = ".".join(str(p) for p in exc.absolute_path) or "the top level"
        raise ValueError(f"structured_outputs schema is not a valid JSON schema: {exc.message} (at {where})") from None


def parse_constraint(text: str, *, field: str = "--structured-outputs") -> OutputConstraint:
    """The flag's text → :class:`OutputConstraint`: ``json:PATH`` (a schema file; ``json:{...}`` inline),
    ``regex:PATTERN``, ``choice:A,B,C`` (``choice:["a,b","c"]`` for choices with commas) or ``json_object``.
    A bad value raises ValueError naming ``field`` and the fix."""
    kind, sep, value = text.partition(":")
    kind = kind.strip()
    if kind == "json_object":
        if value.strip():
            raise ValueError(f"{field} {text!r}: json_object takes no value; give just json_object")
        return OutputConstraint(kind="json_object")
    if kind not in ("json", "regex", "choice") or not sep:
        raise ValueError(f"{field} {text!r} is not valid; expected {SYNTAX}")
    if not value:
        raise ValueError(f"{field} {text!r} has nothing after '{kind}:'; expected {SYNTAX}")
    try:
        if kind == "json":
            schema, path = _read_schema(value, field)
            return OutputConstraint(kind="json", schema=schema, schema_path=path)
        if kind == "regex":
            return OutputConstraint(kind="regex", regex=value)
        return OutputConstraint(kind="choice", choices=_choices(value, field))
    except ValueError as exc:  # the spec's own checks name the field: name the flag instead
        message = str(exc)
        if message.startswith("structured_outputs "):
            message = f"{field} {message.removeprefix('structured_outputs ')}"
        raise ValueError(message if message.startswith(field) else f"{field} {text!r}: {message}") from None


def _read_schema(value: str, field: str) -> tuple[dict[str, Any], str | None]:
    path = None
    raw = value
    if not value.lstrip().startswith("{"):
        path = value
        try:
            raw = _read_small_file(Path(value).expanduser())
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
            raise ValueError(f"{field} json:{value}: cannot read the schema file ({reason}); give the path of a JSON "
                             "schema file, or the schema inline as json:{...}") from None
    where = f"json:{value}" if path else "json:{...}"
    try:
        schema = json.loads(raw)
    except ValueError as exc:
        raise ValueError(f"{field} {where}: the schema is not JSON ({exc})") from None
    if not isinstance(schema, dict):
        raise ValueError(f"{field} {where}: the schema is a JSON {type(schema).__name__}, not an object; give a JSON "
                         'schema such as {"type": "object", "properties": {...}}')
    return schema, path


def _read_small_file(path: Path) -> str:
    """A regular file's text, at most MAX_SCHEMA_BYTES: a device (/dev/zero) or a FIFO would never end."""
    with path.open("rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ValueError("not a regular file")
        data = f.read(MAX_SCHEMA_BYTES + 1)
    if len(data) > MAX_SCHEMA_BYTES:
        raise ValueError(f"larger than {MAX_SCHEMA_BYTES >> 20} MiB")
    return data.decode("utf-8")


def _choices(value: str, field: str) -> tuple[str, ...]:
    if value.lstrip().startswith("["):
        try:
            items = json.loads(value)
        except ValueError as exc:
            raise ValueError(f"{field} choice:{value}: not a JSON array ({exc})") from None
        if not isinstance(items, list) or not all(isinstance(c, str) for c in items):
            raise ValueError(f"{field} choice:{value}: give a JSON array of strings") from None
        return tuple(items)
    return tuple(c.strip() for c in value.split(","))


def request_fields(constraint: OutputConstraint, endpoint: str, *, guided_fields: bool = False) -> dict[str, Any]:
    """The body fields that ask the server for ``constraint``. Chat: OpenAI's ``response_format`` for json
    (json_schema) and json_object, vLLM's ``structured_outputs`` for regex and choice; completions: vLLM's
    ``structured_outputs`` for all four. ``guided_fields``: vLLM's older names (``guided_json``, ``guided_regex``,
    ``guided_choice``, and ``response_format`` for json_object), for servers from before ``structured_outputs``."""
    kind = constraint.kind
    if kind == "json_object" and (endpoint == "chat" or guided_fields):
        return {"response_format": {"type": "json_object"}}
    if kind == "json" and endpoint == "chat" and not guided_fields:
        return {"response_format": {"type": "json_schema",
                                    "json_schema": {"name": SCHEMA_NAME, "schema": constraint.schema}}}
    values: dict[str, Any] = {"json": constraint.schema, "regex": constraint.regex,
                              "choice": list(constraint.choices or ()), "json_object": True}
    if guided_fields:
        return {f"guided_{kind}": values[kind]}
    return {"structured_outputs": {kind: values[kind]}}


def sent_as(constraint: OutputConstraint, endpoint: str, *, guided_fields: bool = False) -> str:
    """The body field that carries the constraint, e.g. 'response_format.json_schema' (for the record)."""
    fields = request_fields(constraint, endpoint, guided_fields=guided_fields)
    (name, value), = fields.items()
    if name == "response_format":
        return f"response_format.{value['type']}"
    return f"structured_outputs.{constraint.kind}" if name == "structured_outputs" else name


class OutputChecker:
    """Checks outputs against one constraint (its regex compiled and its schema's validator built once)."""

    def __init__(self, constraint: OutputConstraint):
        self.constraint = constraint
        self._regex = re.compile(constraint.regex) if constraint.regex is not None else None
        self._choices = frozenset(constraint.choices or ())
        self._validator: Any = None
        if constraint.schema is not None:
            from jsonschema import FormatChecker
            from jsonschema.validators import validator_for

            cls = validator_for(constraint.schema)
            self._validator = cls(constraint.schema, format_checker=FormatChecker())

    def violation(self, text: str) -> str | None:
        """Why ``text`` breaks the constraint, or None when it obeys it."""
        kind = self.constraint.kind
        if kind == "regex":
            assert self._regex is not None
            return None if self._regex.fullmatch(text) else "does not match the regex"
        if kind == "choice":
            return None if text in self._choices else "is not one of the choices"
        try:
            doc = json.loads(text)
        except (ValueError, RecursionError) as exc:
            return f"not JSON: {exc}"
        if kind == "json_object":
            return None if isinstance(doc, dict) else f"JSON, but {_json_kind(doc)}, not an object"
        from jsonschema.exceptions import best_match

        error = best_match(self._validator.iter_errors(doc))
        if error is None:
            return None
        where = "".join(f"[{p!r}]" for p in error.absolute_path) or "the document"
        return f"schema: {error.message} (at {where})"

    def check(self, text: str, finish_reason: str | None) -> tuple[Validity, str | None]:
        """('truncated', None) when max_tokens cut the output, else ('valid', None) or ('invalid', why)."""
        if finish_reason == "length":
            return "truncated", None
        reason = self.violation(text)
        return ("valid", None) if reason is None else ("invalid", reason[:_MAX_REASON_CHARS])

    def check_records(self, records: Sequence[RequestRecord]) -> dict[str, Any]:
        """Check every successful record (sets its ``validity`` and ``invalid_reason``) and count them:
        ``{checked, valid, invalid, truncated, valid_share, invalid_examples}``. ``valid_share`` is valid / checked
        (truncated outputs count against it; None when nothing was checked); ``invalid_examples`` holds the first
        few invalid outputs (index, reason, the text's first 200 characters)."""
        counts = {"valid": 0, "invalid": 0, "truncated": 0}
        examples: list[dict[str, Any]] = []
        for record in records:
            if not record.success:
                continue
            record.validity, record.invalid_reason = self.check(record.output_text or "", record.finish_reason)
            counts[record.validity] += 1
            if record.validity == "invalid" and len(examples) < _MAX_EXAMPLES:
                examples.append({"index": record.index, "reason": record.invalid_reason,
                                 "text": (record.output_text or "")[:_MAX_REASON_CHARS]})
        checked = sum(counts.values())
        return {"checked": checked, **counts, "valid_share": counts["valid"] / checked if checked else None,
                "invalid_examples": examples}


def _json_kind(doc: object) -> str:
    return {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}.get(
        type(doc), "null")
