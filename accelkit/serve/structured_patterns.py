"""Regular expressions for structured outputs: a user's regex made ready for ``interegular`` (anchors, ``\\uXXXX``
escapes, constructs no automaton can hold refused by name), and a JSON schema turned into a regex whose matches
are the documents valid under it (:func:`schema_to_regex`, a documented subset). ``structured.py`` lifts the
resulting automata to tokens.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

from accelkit.serve.structured_numbers import MAX_BOUND_DIGITS, integer_range, number_range

JSON_WHITESPACE = " \n"  # the characters allowed between JSON tokens
MAX_JSON_WHITESPACE = 2  # at most this many in a row: `{"a": 1}` and one newline of pretty-printing fit
# a JSON schema's "any value" ({} or no type): objects/arrays nest this deep at most, counting the containers of
# the schema around it (so inside an object's property it is a scalar). interegular builds the DFA of depth 1 in
# ~0.2 s, of depth 2 in ~1 s (a 2-core CPU): 1 keeps compiling on the engine thread short
ANY_VALUE_DEPTH = 1


def escape_literal(text: str) -> str:
    """``re.escape`` in the subset interegular parses (it has no ``\\uXXXX``; non-ASCII stays literal)."""
    return re.escape(text)


_UNICODE_ESCAPE = re.compile(r"\\(\\|u[0-9a-fA-F]{4}|U[0-9a-fA-F]{8}|x\{[0-9a-fA-F]+\})")


def strip_anchors(pattern: str) -> str:
    """The whole output must match anyway: a leading ``^`` / ``\\A`` and a trailing ``$`` / ``\\Z`` say nothing
    more (interegular refuses them). ``\\uXXXX`` escapes become the character (interegular has none)."""

    def literal(m: re.Match[str]) -> str:
        body = m.group(1)
        if body == "\\":
            return m.group(0)
        return escape_literal(chr(int(body.strip("uUx{}"), 16)))

    pattern = _UNICODE_ESCAPE.sub(literal, pattern)
    for anchor in ("^", "\\A"):
        if pattern.startswith(anchor):
            pattern = pattern[len(anchor):]
    for anchor in ("$", "\\Z"):
        body = pattern[: -len(anchor)]
        if pattern.endswith(anchor) and (len(body) - len(body.rstrip("\\"))) % 2 == 0:  # not an escaped "$"
            pattern = body
    return pattern


def regex_fsm(pattern: str) -> Any:
    import interegular
    from interegular.patterns import _NonCapturing

    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"not a valid regular expression ({exc})") from None
    try:
        parsed = interegular.parse_pattern(pattern)
    except interegular.patterns.Unsupported as exc:
        raise ValueError(f"unsupported construct ({exc}); lookarounds, backreferences, word boundaries and anchors "
                         "inside the pattern cannot be compiled into an automaton") from None
    except Exception as exc:  # interegular's own parse errors
        raise ValueError(f"cannot parse it ({type(exc).__name__}: {exc})") from None
    if any(isinstance(node, _NonCapturing) for node in _nodes(parsed)):
        raise ValueError("lookarounds ((?=...), (?!...), (?<=...), (?<!...)) are not supported")
    _install_indexed_crawl()
    return parsed.to_fsm()


# ---- interegular's crawl with its states indexed ----------------------------------------------------------------
# interegular builds every automaton (concatenation, union, repetition) with fsm.crawl, which numbers the states
# it reaches by looking each new one up in a list (list.index): quadratic in the states. A 16-field pydantic
# model's schema has ~2,300 and took 4.6 s to compile on a 2-core CPU, nearly all of it in that lookup. The same
# crawl with a dict beside the list numbers the states in the same order, so the automaton is identical (a test
# compares them), in 0.9 s. Installed on first use, for the whole process: it changes how fast interegular is,
# not what it returns.
_DICT_STATE, _LIST_STATE = object(), object()
_ORIGINAL_CRAWL: Any = None


def _state_key(state: Any) -> Any:
    """A hashable stand-in equal exactly when the states are ``==`` (crawl's states hold sets and dicts)."""
    try:
        hash(state)
        return state
    except TypeError:
        pass
    if isinstance(state, set | frozenset):  # (a set equals the frozenset of the same items)
        return frozenset(_state_key(x) for x in state)
    if isinstance(state, dict):
        return (_DICT_STATE, frozenset((k, _state_key(v)) for k, v in state.items()))
    if isinstance(state, tuple):
        return tuple(_state_key(x) for x in state)
    if isinstance(state, list):
        return (_LIST_STATE, tuple(_state_key(x) for x in state))
    raise TypeError(f"cannot index an automaton state of type {type(state).__name__}")


def _indexed_crawl(alphabet: Any, initial: Any, final: Any, follow: Any) -> Any:
    """``interegular.fsm.crawl``, with a dict from each state to its number instead of ``list.index``."""
    from interegular.fsm import FSM, OblivionError

    states = [initial]
    numbers = {_state_key(initial): 0}
    finals = set()
    transitions: dict[int, dict[Any, int]] = {}
    i = 0
    while i < len(states):
        state = states[i]
        if final(state):
            finals.add(i)
        row = transitions[i] = {}
        for transition in alphabet.by_transition:
            try:
                nxt = follow(state, transition)
            except OblivionError:
                continue
            key = _state_key(nxt)
            j = numbers.get(key)
            if j is None:
                j = numbers[key] = len(states)
                states.append(nxt)
            row[transition] = j
        i += 1
    return FSM(alphabet=alphabet, states=range(len(states)), initial=0, finals=finals, map=transitions,
               __no_validation__=True)


def _install_indexed_crawl() -> None:
    global _ORIGINAL_CRAWL
    import interegular.fsm

    if _ORIGINAL_CRAWL is None:
        _ORIGINAL_CRAWL = interegular.fsm.crawl
        interegular.fsm.crawl = _indexed_crawl


def _nodes(node: Any) -> Iterator[Any]:
    yield node
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            value = getattr(node, f.name)
            for item in value if isinstance(value, tuple | list | frozenset) else (value,):
                if dataclasses.is_dataclass(item):
                    yield from _nodes(item)



# ------------------------------------------------------------------------------------- JSON schema → regex

_WS = f"[{re.escape(JSON_WHITESPACE)}]{{0,{MAX_JSON_WHITESPACE}}}"
_STRING_CHAR = r'(?:[^"\\\x00-\x1f]|\\["\\/bfnrt]|\\u(?:[0-9a-cA-Ce-fE-F][0-9a-fA-F]{3}|[dD][0-7][0-9a-fA-F]{2}))'
_STRING = f'"{_STRING_CHAR}*"'
_INTEGER = r"-?(?:0|[1-9][0-9]*)"
_NUMBER = _INTEGER + r"(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?"
_SCALAR = {"string": _STRING, "integer": _INTEGER, "number": _NUMBER, "boolean": "(?:true|false)", "null": "null"}
_YEAR = "(?:[1-9][0-9]{3}|0[1-9][0-9]{2}|00[1-9][0-9]|000[1-9])"  # no year 0: Python's dates (and validators) lack it
_MULTIPLE_OF_4 = "(?:0[48]|[2468][048]|[13579][26])"  # two digits, not 00
_DATE = (f"(?:{_YEAR}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
         f"|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{{2}}{_MULTIPLE_OF_4}|{_MULTIPLE_OF_4}00)-02-29)")  # leap days
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:\.[0-9]{1,6})?(?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_FORMATS = {  # RFC 3339 full-date / full-time (offset required; no leap second, at most microseconds) / date-time,
    # RFC 4122 uuid
    "date": _DATE, "time": _TIME, "date-time": f"{_DATE}T{_TIME}",
    "uuid": "[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}",
}
# "discriminator" (OpenAPI's, pydantic writes it beside a tagged union's oneOf): the branches' const tags already
# say which branch a value takes
_ANNOTATIONS = frozenset({"title", "description", "examples", "default", "$schema", "$id", "$comment", "$defs",
                          "definitions", "deprecated", "readOnly", "writeOnly", "discriminator"})
_BOUNDS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_KEYWORDS = frozenset({"type", "enum", "const", "properties", "required", "additionalProperties", "propertyNames",
                       "minProperties", "maxProperties", "items", "prefixItems", "minItems", "maxItems", "minLength",
                       "maxLength", "pattern", "format", "anyOf", "oneOf", "allOf", "$ref", *_BOUNDS})
_TYPES = ("object", "array", "string", "integer", "number", "boolean", "null")
MAX_SCHEMA_REPEAT = 64  # minItems/maxItems/minLength/maxLength: each unit of a bound is a copy in the automaton
_UNSAFE_IN_STRING = r'[\s\S]*["\\\x00-\x1f][\s\S]*'


def _any_value(depth: int) -> str:
    """Any JSON value whose objects and arrays nest at most ``depth`` levels (a regex cannot count deeper)."""
    scalar = "|".join(_SCALAR.values())
    if depth == 0:
        return f"(?:{scalar})"
    inner = _any_value(depth - 1)
    member = f"{_STRING}{_WS}:{_WS}{inner}"
    obj = rf"\{{{_WS}(?:{member}(?:{_WS},{_WS}{member})*{_WS})?\}}"
    arr = rf"\[{_WS}(?:{inner}(?:{_WS},{_WS}{inner})*{_WS})?\]"
    return f"(?:{scalar}|{obj}|{arr})"


def _float_bound(keyword: str, value: float | int) -> float:
    """The double a number's output is held to (inclusive) for one bound: the nearest on the right side of it,
    so that exclusive bounds and integers a double cannot hold are kept by a reader that rounds to doubles."""
    exact, near = Fraction(value), float(value)
    if keyword in ("minimum", "exclusiveMinimum"):
        if Fraction(near) < exact or (keyword == "exclusiveMinimum" and Fraction(near) == exact):
            near = math.nextafter(near, math.inf)
    elif Fraction(near) > exact or (keyword == "exclusiveMaximum" and Fraction(near) == exact):
        near = math.nextafter(near, -math.inf)
    return near


def _literal(value: Any) -> str:
    """One JSON value exactly as the output must spell it: compact, non-ASCII characters raw."""
    return escape_literal(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _json_safe_pattern(pattern: str, where: str) -> str:
    """A JSON schema ``pattern`` (a search, unless anchored at both ends) for the raw text between a string's
    quotes. Where it would allow any character (``.``, ``[^...]``, ``\\S``...) it is narrowed to the ones a JSON
    string holds unescaped — every output still matches; a pattern that still needs ``"``, ``\\`` or a control
    character is refused."""
    anchored_start, anchored_end = pattern.startswith("^"), pattern.endswith("$") and not pattern.endswith("\\$")
    body = strip_anchors(pattern)
    out, i, in_class = [], 0, False
    while i < len(body):
        c = body[i]
        if c == "\\" and i + 1 < len(body):
            pair = body[i : i + 2]
            if not in_class and pair in ("\\S", "\\W", "\\D"):
                out.append("[^" + {"\\S": r"\s", "\\W": r"\w", "\\D": r"\d"}[pair] + r'"\\\x00-\x1f]')
            else:
                out.append(pair)
            i += 2
            continue
        if in_class:
            if c == "]" and body[i - 1] not in "[^":
                in_class = False
            out.append(c)
        elif c == "[":
            in_class = True
            if body.startswith("[^", i):
                out.append(r'[^"\\\x00-\x1f')
                i += 2
                continue
            out.append(c)
        elif c == ".":
            out.append(r'[^"\\\x00-\x1f]')
        else:
            out.append(c)
        i += 1
    safe = "".join(out)
    try:
        fsm = regex_fsm(safe)
        unsafe = regex_fsm(_UNSAFE_IN_STRING)
    except ValueError as exc:
        raise ValueError(f"pattern {pattern!r} (at {where}): {exc}") from None
    if not (fsm & unsafe).empty():
        raise ValueError(f'pattern {pattern!r} (at {where}) can match a ", \\ or control character, which a JSON '
                         "string must escape; this is not supported")
    free = f"{_STRING_CHAR}*"  # an unanchored side: any string characters, escapes included
    return ("" if anchored_start else free) + f"(?:{safe})" + ("" if anchored_end else free)


def _has_type(value: Any, types: Any) -> bool:
    names = [types] if isinstance(types, str) else types if isinstance(types, list) else []
    python = {"object": dict, "array": list, "string": str, "boolean": bool, "null": type(None)}
    for name in names:
        if name in ("integer", "number") and isinstance(value, int | float) and not isinstance(value, bool):
            if name == "number" or float(value).is_integer():
                return True
        elif name in python and isinstance(value, python[name]):
            return True
    return False


def _child(where: str, part: str) -> str:
    """The path of a subschema in messages: ``properties.age.items`` (the root is "the root")."""
    return part if where == _ROOT else f"{where}.{part}"


_ROOT = "the root"
_WHY_NOT = {  # the keywords clients send most that no regular expression can hold
    "uniqueItems": "telling items apart needs memory of every earlier item, which no automaton has (use a list)",
    "multipleOf": "not translated into digits",
    "patternProperties": "keys would have to be told apart from the declared ones",
}


class _SchemaRegex:
    """One schema's translation; ``refs`` holds the $refs being expanded (a repeat is recursion)."""

    def __init__(self, root: Any) -> None:
        self.root = root
        self.refs: list[str] = []
        self.level = 0  # objects/arrays around the schema being translated

    def any_value(self) -> str:
        """Any value, nested no deeper than :data:`ANY_VALUE_DEPTH` counting the containers around it."""
        return _any_value(max(ANY_VALUE_DEPTH - self.level, 0))

    def inside(self, schema: Any, where: str) -> str:
        self.level += 1
        try:
            return self.regex(schema, where)
        finally:
            self.level -= 1

    def unsupported(self, keyword: str, where: str) -> ValueError:
        why = _WHY_NOT.get(keyword)
        return ValueError(f"keyword {keyword!r} (at {where}) is not supported" + (f": {why}" if why else ""))

    def count(self, schema: dict[str, Any], keyword: str, where: str) -> int | None:
        value = schema.get(keyword)
        if value is None:
            return None
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{keyword} (at {where}) must be a non-negative integer, not {value!r}")
        if value > MAX_SCHEMA_REPEAT:
            raise ValueError(f"{keyword}={value} (at {where}) is above {MAX_SCHEMA_REPEAT}, the most supported")
        return value

    def regex(self, schema: Any, where: str) -> str:
        if schema is True:
            return self.any_value()
        if not isinstance(schema, dict):
            raise ValueError(f"the schema at {where} is {json.dumps(schema)}; give an object")
        for keyword in schema:
            if keyword not in _KEYWORDS and keyword not in _ANNOTATIONS:
                raise self.unsupported(keyword, where)
        if "$ref" in schema:
            return self.ref(schema, where)
        if "allOf" in schema:
            members = schema["allOf"]
            others = set(schema) - _ANNOTATIONS - {"allOf"}
            if not isinstance(members, list) or len(members) != 1 or others:
                raise ValueError(f"allOf (at {where}) is supported with one member and no other keywords beside it")
            return self.regex(members[0], _child(where, "allOf[0]"))
        for keyword in ("anyOf", "oneOf"):
            if keyword in schema:
                members = schema[keyword]
                if not isinstance(members, list) or not members:
                    raise ValueError(f"{keyword} (at {where}) must be a non-empty list of schemas")
                rest = {k: v for k, v in schema.items() if k != keyword}
                if set(rest) - _ANNOTATIONS:
                    # the siblings constrain every branch: fold them in (a branch's own keywords win)
                    members = [{**rest, **m} if isinstance(m, dict) else m for m in members]
                branches = [self.regex(m, _child(where, f"{keyword}[{i}]")) for i, m in enumerate(members)]
                return "(?:" + "|".join(branches) + ")"
        if "const" in schema or "enum" in schema:
            values = [schema["const"]] if "const" in schema else schema["enum"]
            if not isinstance(values, list) or not values:
                raise ValueError(f"enum (at {where}) must be a non-empty list")
            if "type" in schema:  # a value of another type would be rejected by the schema
                values = [v for v in values if _has_type(v, schema["type"])]
                if not values:
                    raise ValueError(f"no value of enum/const (at {where}) has the type {json.dumps(schema['type'])}")
            return "(?:" + "|".join(_literal(v) for v in values) + ")"
        types = schema.get("type")
        if types is None:
            types = self.implied_type(schema)
            if types is None:
                return self.any_value()
        if isinstance(types, str):
            types = [types]
        if not isinstance(types, list) or not types or any(t not in _TYPES for t in types):
            raise ValueError(f"type (at {where}) must be one of {', '.join(_TYPES)} or a list of them, "
                             f"not {json.dumps(schema.get('type'))}")
        # JSON's integers are numbers too: "number" already covers them
        branches = [self.typed(schema, t, where) for t in types if not (t == "integer" and "number" in types)]
        return branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"

    @staticmethod
    def implied_type(schema: dict[str, Any]) -> str | None:
        """No "type": any value is valid, but the keywords given say what the author meant (a narrower output is
        still valid)."""
        if {"properties", "required", "additionalProperties", "propertyNames", "minProperties", "maxProperties"} & set(
                schema):
            return "object"
        if {"items", "prefixItems", "minItems", "maxItems"} & set(schema):
            return "array"
        if {"minLength", "maxLength", "pattern", "format"} & set(schema):
            return "string"
        if set(_BOUNDS) & set(schema):
            return "number"
        return None

    def typed(self, schema: dict[str, Any], kind: str, where: str) -> str:
        if kind == "object":
            return self.object(schema, where)
        if kind == "array":
            return self.array(schema, where)
        if kind == "string":
            return self.string(schema, where)
        if kind in ("integer", "number") and any(k in schema for k in _BOUNDS):
            return self.bounded(schema, kind, where)
        return _SCALAR[kind]

    def bounded(self, schema: dict[str, Any], kind: str, where: str) -> str:
        """An integer (or a number that is one, see below) within minimum/maximum (exclusive or not), exactly."""
        bounds = {}
        for keyword in _BOUNDS:
            value = schema.get(keyword)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
                raise ValueError(f"{keyword} (at {where}) must be a number, not {json.dumps(value)}")
            if abs(value) >= 10**MAX_BOUND_DIGITS:
                raise ValueError(f"{keyword}={value} (at {where}) is beyond ±10^{MAX_BOUND_DIGITS}, the most supported")
            bounds[keyword] = value
        if kind == "number":
            lower = [_float_bound(k, v) for k, v in bounds.items() if k.endswith("inimum")]
            upper = [_float_bound(k, v) for k, v in bounds.items() if k.endswith("aximum")]
            number = number_range(max(lower, default=None), min(upper, default=None))
            if number is None:
                raise ValueError(f"no number lies within {', '.join(f'{k}={v}' for k, v in bounds.items())} "
                                 f"(at {where})")
            return number
        lows = [math.ceil(bounds["minimum"])] if "minimum" in bounds else []
        lows += [math.floor(bounds["exclusiveMinimum"]) + 1] if "exclusiveMinimum" in bounds else []
        highs = [math.floor(bounds["maximum"])] if "maximum" in bounds else []
        highs += [math.ceil(bounds["exclusiveMaximum"]) - 1] if "exclusiveMaximum" in bounds else []
        regex = integer_range(max(lows, default=None), min(highs, default=None))
        if regex is None:
            raise ValueError(f"no integer lies within {', '.join(f'{k}={v}' for k, v in bounds.items())} (at {where})")
        return regex

    def string(self, schema: dict[str, Any], where: str) -> str:
        low, high = self.count(schema, "minLength", where), self.count(schema, "maxLength", where)
        fmt, pattern = schema.get("format"), schema.get("pattern")
        if sum(x is not None for x in (fmt, pattern)) + (low is not None or high is not None) > 1:
            raise ValueError(f"combining format, pattern and minLength/maxLength (at {where}) is not supported")
        if fmt is not None:
            if fmt not in _FORMATS:
                raise ValueError(f"format {fmt!r} (at {where}) is not supported (supported: {', '.join(_FORMATS)})")
            return f'"{_FORMATS[fmt]}"'
        if pattern is not None:
            if not isinstance(pattern, str) or not pattern:
                raise ValueError(f"pattern (at {where}) must be a non-empty string")
            return f'"{_json_safe_pattern(pattern, where)}"'
        if low is None and high is None:
            return _STRING
        if high is not None and low is not None and high < low:
            raise ValueError(f"maxLength {high} is below minLength {low} (at {where})")
        return f'"{_STRING_CHAR}{{{low or 0},{"" if high is None else high}}}"'

    def array(self, schema: dict[str, Any], where: str) -> str:
        low, high = self.count(schema, "minItems", where) or 0, self.count(schema, "maxItems", where)
        if high is not None and high < low:
            raise ValueError(f"maxItems {high} is below minItems {low} (at {where})")
        items = schema.get("items", True)
        if isinstance(items, list):
            raise self.unsupported("items (a list: prefixItems' old form)", where)
        prefix = schema.get("prefixItems", [])
        if not isinstance(prefix, list):
            raise ValueError(f"prefixItems (at {where}) must be a list of schemas")
        if prefix:
            return self.positional(schema, prefix, items, low, high, where)
        item = self.inside(items, _child(where, "items"))
        if high == 0 or items is False:
            if low > 0:
                raise ValueError(f"minItems {low} (at {where}) with items false: no array is valid")
            return rf"\[{_WS}\]"
        more = f"(?:{_WS},{_WS}{item}){{{max(low - 1, 0)},{'' if high is None else high - 1}}}"
        body = f"{item}{more}{_WS}"
        return rf"\[{_WS}{body}\]" if low > 0 else rf"\[{_WS}(?:{body})?\]"

    def positional(self, schema: dict[str, Any], prefix: list[Any], items: Any, low: int, high: int | None,
              where: str) -> str:
        """prefixItems: element i follows prefixItems[i], the ones after them ``items``; minItems..maxItems long."""
        elements = [self.inside(sub, _child(where, f"prefixItems[{i}]")) for i, sub in enumerate(prefix)]
        item = None if items is False else self.inside(items, _child(where, "items"))
        if low > len(elements):
            if item is None:
                raise ValueError(f"minItems {low} (at {where}) is more than prefixItems holds with items false")
            elements += [item] * (low - len(elements))
        if high is not None:
            elements = elements[:high]
        sep = f"{_WS},{_WS}"
        tail = ""  # after the last positional element: more items, up to maxItems
        if item is not None and (high is None or high > len(elements)):
            tail = f"(?:{sep}{item}){{0,{'' if high is None else high - len(elements)}}}"
        for i in reversed(range(len(elements))):  # element i is written only after i-1: nest the optional ones
            tail = f"{sep if i else ''}{elements[i]}{tail}"
            if i >= low:
                tail = f"(?:{tail})?"
        return rf"\[{_WS}{tail}{_WS}\]"

    def object(self, schema: dict[str, Any], where: str) -> str:
        extra = schema.get("additionalProperties", True)
        properties = schema.get("properties")
        required = schema.get("required", [])
        if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
            raise ValueError(f"required (at {where}) must be a list of property names")
        if properties is None:
            if required:
                raise ValueError(f"required (at {where}) names properties that 'properties' does not define")
            return self.map(schema, extra, where)
        for keyword in ("propertyNames", "minProperties", "maxProperties"):
            if keyword in schema:
                raise ValueError(f"{keyword} beside properties (at {where}) is not supported")
        if not isinstance(extra, bool | dict):
            raise ValueError(f"additionalProperties (at {where}) must be a boolean or a schema")
        if not isinstance(properties, dict):
            raise ValueError(f"properties (at {where}) must be an object")
        missing = [r for r in required if r not in properties]
        if missing:
            raise ValueError(f"required property {missing[0]!r} (at {where}) is not in properties")
        members = [
            (f"{_literal(name)}{_WS}:{_WS}{self.inside(sub, _child(where, f'properties.{name}'))}", name in required)
            for name, sub in properties.items()
        ]
        sep = f"{_WS},{_WS}"

        def rest(i: int) -> str:  # members i.. after one was written: each with its comma
            return "".join(f"{sep}{m}" if req else f"(?:{sep}{m})?" for m, req in members[i:])

        firsts = []  # the first member written is k: all before it optional and left out
        for k, (member, req) in enumerate(members):
            firsts.append(f"{member}{rest(k + 1)}")
            if req:
                break
        else:
            firsts.append("")  # every member optional: {} too
        return rf"\{{{_WS}(?:{'|'.join(firsts)}){_WS}\}}"

    def map(self, schema: dict[str, Any], extra: Any, where: str) -> str:
        """An object without properties: keys under propertyNames (any string by default), values under
        additionalProperties (any value by default, nested within :data:`ANY_VALUE_DEPTH`), minProperties..
        maxProperties of them. A key may repeat (JSON allows it; the last one counts)."""
        low = self.count(schema, "minProperties", where) or 0
        high = self.count(schema, "maxProperties", where)
        if high is not None and high < low:
            raise ValueError(f"maxProperties {high} is below minProperties {low} (at {where})")
        if extra is False or high == 0:
            if low > 0:
                raise ValueError(f"minProperties {low} (at {where}) with no property allowed: no object is valid")
            return rf"\{{{_WS}\}}"
        value = self.inside(extra, _child(where, "additionalProperties"))
        key = self.key(schema["propertyNames"], _child(where, "propertyNames")) if "propertyNames" in schema else _STRING
        member = f"{key}{_WS}:{_WS}{value}"
        more = f"(?:{_WS},{_WS}{member}){{{max(low - 1, 0)},{'' if high is None else high - 1}}}"
        body = f"{member}{more}{_WS}"
        return rf"\{{{_WS}{body}\}}" if low > 0 else rf"\{{{_WS}(?:{body})?\}}"

    def key(self, names: Any, where: str) -> str:
        """propertyNames' schema: it describes strings (a key is one), so it is read as a string schema."""
        while isinstance(names, dict) and "$ref" in names and not set(names) - _ANNOTATIONS - {"$ref"}:
            names, where = self.target(names["$ref"], where)
        if names is True or names == {}:
            return _STRING
        if not isinstance(names, dict):
            raise ValueError(f"the schema at {where} is {json.dumps(names)}; give an object")
        types = names.get("type", "string")
        if types != "string" and not (isinstance(types, list) and "string" in types):
            raise ValueError(f"propertyNames (at {where}) must allow strings: an object's keys are strings")
        return self.regex({**names, "type": "string"}, where)

    def any_object(self) -> str:
        inner = _any_value(max(ANY_VALUE_DEPTH - self.level - 1, 0))
        member = f"{_STRING}{_WS}:{_WS}{inner}"
        return rf"\{{{_WS}(?:{member}(?:{_WS},{_WS}{member})*{_WS})?\}}"

    def target(self, ref: Any, where: str) -> tuple[Any, str]:
        """The schema a ``$ref`` points at, and its path for messages."""
        match = re.fullmatch(r"#/(\$defs|definitions)/([^/]+)", ref) if isinstance(ref, str) else None
        if match is None:
            raise ValueError(f"$ref {ref!r} (at {where}) is not supported; use #/$defs/NAME or #/definitions/NAME")
        name = match.group(2).replace("~1", "/").replace("~0", "~")
        target = self.root.get(match.group(1), {}).get(name) if isinstance(self.root, dict) else None
        if target is None:
            raise ValueError(f"$ref {ref!r} (at {where}) points at nothing")
        return target, f"{match.group(1)}.{name}"

    def ref(self, schema: dict[str, Any], where: str) -> str:
        ref = schema["$ref"]
        others = set(schema) - _ANNOTATIONS - {"$ref"}
        if others:
            raise ValueError(f"keywords beside $ref (at {where}: {', '.join(sorted(others))}) are not supported")
        target, at = self.target(ref, where)
        if ref in self.refs:
            raise ValueError(f"$ref {ref!r} (at {where}) is recursive; recursive schemas are not supported")
        self.refs.append(ref)
        try:
            return self.regex(target, at)
        finally:
            self.refs.pop()


def schema_to_regex(schema: Any) -> str:
    """A regex whose matches are JSON documents valid under ``schema``, for this subset of JSON schema:

    - ``type`` (one or a list) object, array, string, integer, number, boolean, null; no type: inferred from
      the keywords present (properties → object ...), else any JSON value (objects/arrays nested at most
      :data:`ANY_VALUE_DEPTH` deep counting the schema's own containers around it, so any scalar inside an object
      or array); ``{}`` / ``true``: any value likewise;
    - object: ``properties`` written in their declared order, the ``required`` ones always, the others optional;
      no other keys (``additionalProperties`` true, false or a schema: the output has only declared keys either
      way). Without ``properties`` (a map, pydantic's ``dict[K, V]``): keys under ``propertyNames`` (read as a
      string schema; any string by default), values under ``additionalProperties`` (any value by default, none
      when false), ``minProperties``/``maxProperties`` of them; a key may repeat;
    - string: ``minLength``/``maxLength`` (counted in JSON characters: an escape is one), ``pattern`` (see
      :func:`_json_safe_pattern`), ``format`` date, time, date-time (RFC 3339, offset required), uuid — one of
      the three kinds at a time;
    - integer: ``minimum``/``maximum``/``exclusiveMinimum``/``exclusiveMaximum`` exactly, digit by digit
      (bounds within ±10^:data:`MAX_BOUND_DIGITS`); number: the same bounds, the output then written without an
      exponent and kept for a reader that rounds to doubles (see :func:`number_range`);
    - array: ``items`` (one schema), ``prefixItems`` (positional, ``items`` after them; false: none),
      ``minItems``/``maxItems``; ``enum``, ``const`` (compact spelling);
    - ``anyOf``; ``oneOf`` as anyOf (exclusivity is not enforced: a value valid under two branches may come out);
      ``allOf`` with one member; ``$ref`` to ``#/$defs/NAME`` or ``#/definitions/NAME``, not recursive.

    Annotations (title, description, examples, default, discriminator, $schema, $id, $comment ...) are ignored; any
    other keyword (multipleOf, patternProperties, uniqueItems, not, if/then ...) raises ValueError naming it and where
    it is: refused rather than ignored, since ignoring it could produce output the schema rejects. Numbers are
    JSON's (no bound on digits); between tokens at most :data:`MAX_JSON_WHITESPACE` of :data:`JSON_WHITESPACE`.
    """
    return _SchemaRegex(schema).regex(schema, _ROOT)
