"""What both structured-output backends read of a JSON schema and of a tokenizer: where a schema's subschemas are
(a property may be named ``format``: only schema positions are keywords), the closing of objects to their declared
properties, where a keyword first appears, and whether a tokenizer's decoder gives the token bytes a grammar
engine needs."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import Any

# the keywords whose values are schemas: a list of them, a map of names to them, or one
SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SCHEMA_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
SCHEMA_ONES = ("items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
               "unevaluatedProperties", "additionalItems")


# deeper JSON than this is refused before any compile: llguidance's grammar reader stops at 128 levels, xgrammar's
# compile time grows faster than the depth, and the schema rewrites here recurse (a 450-deep schema would exhaust
# Python's stack in them)
MAX_SCHEMA_DEPTH = 128


TOO_DEEP = (f"it nests deeper than structured outputs compile ({MAX_SCHEMA_DEPTH} levels of JSON nesting: about "
            f"{MAX_SCHEMA_DEPTH // 2} levels of objects in a schema); flatten it")


def check_depth(schema: Any, kind: str) -> None:
    """ValueError (``structured_outputs.<kind>: ...``, :data:`TOO_DEEP`) where ``schema`` nests deeper than
    :data:`MAX_SCHEMA_DEPTH`: checked before any rewrite, which recurses."""
    if schema_depth(schema) > MAX_SCHEMA_DEPTH:
        raise ValueError(f"structured_outputs.{kind}: {TOO_DEEP}")


def schema_depth(schema: Any) -> int:
    """How deep ``schema``'s JSON nests (a scalar 0, ``{}`` 1), without recursing."""
    deepest, stack = 0, [(schema, 1)]
    while stack:
        node, depth = stack.pop()
        items = node.values() if isinstance(node, dict) else node if isinstance(node, list) else None
        if items is None:
            continue
        deepest = max(deepest, depth)
        stack += [(item, depth + 1) for item in items]
    return deepest


def subschemas(schema: dict[str, Any]) -> list[tuple[str, Any]]:
    """(path step, subschema) of each schema directly inside ``schema``."""
    out: list[tuple[str, Any]] = []
    for key in SCHEMA_LISTS:
        if isinstance(schema.get(key), list):
            out += [(f"{key}[{i}]", s) for i, s in enumerate(schema[key])]
    for key in SCHEMA_MAPS:
        if isinstance(schema.get(key), dict):
            out += [(f"{key}.{k}", s) for k, s in schema[key].items()]
    out += [(key, schema[key]) for key in SCHEMA_ONES if key in schema]
    return out


def map_subschemas(schema: dict[str, Any], fn: Callable[[Any], Any]) -> dict[str, Any]:
    """A copy of ``schema`` with ``fn`` applied to each schema directly inside it (the rest as it is)."""
    out = dict(schema)
    for key in SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            out[key] = [fn(s) for s in out[key]]
    for key in SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {k: fn(s) for k, s in out[key].items()}
    for key in SCHEMA_ONES:
        if key in out:
            out[key] = fn(out[key])
    return out


# beside an object's own ``properties``, what can let its documents hold other keys (a node with one of these is not
# closed: closing it could leave no document valid)
_EXTENDED_BY = ("allOf", "anyOf", "oneOf", "$ref", "$dynamicRef", "if", "then", "else", "dependentSchemas",
                "dependencies", "unevaluatedProperties")
# what keeps an anyOf/oneOf's branches from being whole alternatives: keys this node itself declares or requires,
# or another part that is intersected with the chosen branch
_BRANCHES_SHARE = ("properties", "patternProperties", "additionalProperties", "required", "allOf", "$ref",
                   "$dynamicRef", "if", "dependentSchemas", "dependencies", "minProperties", "maxProperties",
                   "propertyNames", "unevaluatedProperties")
# subschemas intersected with the node they are in (never closed themselves): allOf's, if/then/else's,
# dependentSchemas'; "not"'s is negated (closing it would widen what the node allows)
_INTERSECTED = ("allOf", "if", "then", "else", "dependentSchemas", "not")


def close_objects(schema: Any) -> Any:
    """A copy of ``schema`` where an object with ``properties`` and no ``additionalProperties`` gets
    ``additionalProperties: false`` (vLLM's ``disable_additional_properties``): the output has the declared keys
    only, as OpenAI's strict mode writes it and as accelkit always did — only where the declared keys alone can
    satisfy the object: not where ``required`` names others or ``patternProperties``/``min/maxProperties`` ask for
    more, not where something else adds keys (``allOf``, ``anyOf``/``oneOf`` beside the node's own keys, a ``$ref``
    beside them, ``if``/``then``, ``dependentSchemas``), not in what is intersected with another part (``allOf``'s
    branches, those of an ``anyOf`` beside declared keys, a definition a ``$ref`` reaches from such a place)."""
    open_refs: set[str] = set()
    while True:  # (a definition left open can leave open what it refers to: until nothing more is found)
        found = _refs_left_open(schema, open_refs)
        if found <= open_refs:
            return _close(schema, open_refs, "#" not in open_refs)
        open_refs |= found


def _closable(node: dict[str, Any], key: str, name: str | None, open_refs: set[str], may_close: bool) -> bool:
    """Whether a subschema under ``key`` (``name``: its name in a map) in ``node`` may be closed itself; ``may_close``:
    whether ``node`` may."""
    if key in ("$defs", "definitions"):  # (a definition some $ref reaches from an open place stays open)
        at = f"#/{key}/{str(name).replace('~', '~0').replace('/', '~1')}"
        return not any(ref == at or ref.startswith(at + "/") for ref in open_refs)
    if key in _INTERSECTED:
        return False
    if key in ("anyOf", "oneOf"):  # whole alternatives only where nothing else is intersected with them
        other = "oneOf" if key == "anyOf" else "anyOf"
        return may_close and other not in node and not any(k in node for k in _BRANCHES_SHARE)
    return True


def _children(node: dict[str, Any], open_refs: set[str], may_close: bool) -> Iterator[tuple[Any, bool]]:
    """(subschema, whether it may be closed) of each schema directly inside ``node``."""
    for key in SCHEMA_LISTS:
        if isinstance(node.get(key), list):
            closable = _closable(node, key, None, open_refs, may_close)
            yield from ((sub, closable) for sub in node[key])
    for key in SCHEMA_MAPS:
        if isinstance(node.get(key), dict):
            yield from ((sub, _closable(node, key, name, open_refs, may_close)) for name, sub in node[key].items())
    for key in SCHEMA_ONES:
        if key in node:
            yield node[key], _closable(node, key, None, open_refs, may_close)


def _refs_left_open(schema: Any, open_refs: set[str]) -> set[str]:
    """The ``$ref``s of every node :func:`_close` leaves open, given the definitions ``open_refs`` it already leaves
    open (what those refer to must stay open too); without recursing."""
    found: set[str] = set()
    stack: list[tuple[Any, bool]] = [(schema, "#" not in open_refs)]
    while stack:
        node, may_close = stack.pop()
        if not isinstance(node, dict):
            continue
        ref = node.get("$ref")
        if isinstance(ref, str) and (not may_close or any(k in node for k in _BRANCHES_SHARE if k != "$ref")):
            found.add(ref)
        stack += _children(node, open_refs, may_close)
    return found


def _close(schema: Any, open_refs: set[str], may_close: bool) -> Any:
    if not isinstance(schema, dict):
        return schema
    out = dict(schema)
    for key in SCHEMA_LISTS:
        if isinstance(out.get(key), list):
            closable = _closable(schema, key, None, open_refs, may_close)
            out[key] = [_close(sub, open_refs, closable) for sub in out[key]]
    for key in SCHEMA_MAPS:
        if isinstance(out.get(key), dict):
            out[key] = {name: _close(sub, open_refs, _closable(schema, key, name, open_refs, may_close))
                        for name, sub in out[key].items()}
    for key in SCHEMA_ONES:
        if key in out:
            out[key] = _close(out[key], open_refs, _closable(schema, key, None, open_refs, may_close))
    declared = out.get("properties")
    required = out.get("required", [])
    if (may_close and isinstance(declared, dict) and "additionalProperties" not in out
            and "patternProperties" not in out and "minProperties" not in out and "maxProperties" not in out
            and not any(k in out for k in _EXTENDED_BY)
            and isinstance(required, list) and all(isinstance(r, str) for r in required)
            and set(required) <= set(declared)):
        out["additionalProperties"] = False  # (only where the schema stays satisfiable by the declared keys alone)
    return out


def schema_nodes(schema: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(where, subschema) of ``schema`` and every schema inside it (``properties.n``; "" the root), depth first, in
    :func:`subschemas`' order, without recursing."""
    stack = [(path, schema)]
    while stack:
        where, node = stack.pop()
        if not isinstance(node, dict):
            continue
        yield where, node
        stack += reversed([(f"{where}.{step}" if where else step, sub) for step, sub in subschemas(node)])


def keyword_path(schema: Any, keyword: str) -> str | None:
    """Where ``keyword`` first appears as a keyword of ``schema`` or a subschema (``properties.n``; "" the root)."""
    return next((where for where, node in schema_nodes(schema) if keyword in node), None)


def check_decoder(tokenizer: Any) -> None:
    """A grammar engine reads token bytes from a byte-level BPE or a SentencePiece-style (``▁``, byte fallback)
    vocabulary; a word-level one would give it words with no spaces between them (ValueError naming it)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        raise ValueError("structured outputs need a Hugging Face fast tokenizer; this model's is "
                         f"{type(tokenizer).__name__}")
    decoder = json.loads(backend.to_str()).get("decoder") or {}
    steps = decoder.get("decoders", [decoder]) if decoder.get("type") == "Sequence" else [decoder]
    kinds = [str(step.get("type")) for step in steps]
    if not {"ByteLevel", "Metaspace", "ByteFallback", "Replace"} & set(kinds):
        raise ValueError("structured outputs need a byte-level BPE or SentencePiece tokenizer; this model's decoder is "
                         f"{', '.join(kinds) or 'missing'}")
