"""The xgrammar backend of structured outputs (vLLM's default, ``--structured-outputs-backend xgrammar``): a pushdown
automaton over the grammar with token masks precomputed per rule at compile, in C++. Optional
(``pip install 'accelkit[xgrammar]'``); llguidance stays the default.

What differs from llguidance for a user (docs/engine.md, "Choosing the backend"):

- xgrammar has no compile fuel or time limit of its own. The server's wall-clock limit answers the request with a
  400, but a compile that runs away keeps its compile thread until it ends. What is known to run long is refused
  before compiling (schemas nested deeper than ``structured_schema.MAX_SCHEMA_DEPTH``).
- Its JSON Schema converter drops some keywords without a word (``uniqueItems``, ``allOf`` with several branches,
  a ``type`` beside ``anyOf`` …): such a schema would let out documents the schema rejects, so each is refused
  naming the keyword and where it is (:func:`unenforced_keyword`), as llguidance's unenforceable keywords are;
  two string rules whose output does not validate are replaced by patterns that say the same (:func:`rewritten`).
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from accelkit.serve.sampling import StructuredOutputs, structural_tag_answer, structural_tags
from accelkit.serve.structured import SAMPLE_FIRST_MIN, EosBits, Native, parallel_fill, run_here
from accelkit.serve.structured_schema import (
    check_decoder,
    check_depth,
    close_objects,
    map_subschemas,
    schema_nodes,
)

if TYPE_CHECKING:
    import torch
    import xgrammar

INSTALL_HINT = "pip install 'accelkit[xgrammar]'"
# JSON: at most 2 whitespace characters between tokens, as the llguidance backend allows
MAX_WHITESPACE = 2
COMPILE_THREADS = 2  # xgrammar's threads for one compile's mask tables (started from a niced compile thread)

# JSON Schema keywords xgrammar 0.2.9 drops without an error (checked against the grammar it writes: the same with
# and without them), and the ones that constrain: a key in neither is a non-keyword a validator ignores
_NEVER_ENFORCED = ("uniqueItems", "contains", "minContains", "maxContains", "dependentRequired", "dependentSchemas",
                   "dependencies", "if", "then", "else", "not")
_VALIDATION = frozenset({
    "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum", "exclusiveMinimum", "maxLength",
    "minLength", "pattern", "format", "items", "prefixItems", "additionalItems", "unevaluatedItems", "contains",
    "maxItems", "minItems", "uniqueItems", "maxContains", "minContains", "properties", "patternProperties",
    "additionalProperties", "unevaluatedProperties", "propertyNames", "maxProperties", "minProperties", "required",
    "dependentRequired", "dependentSchemas", "dependencies", "allOf", "anyOf", "oneOf", "not", "if", "then", "else",
    "$ref",
})
# a node with one of these is compiled from it alone: every other constraint beside it is dropped
_ALONE = ("$ref", "allOf", "anyOf", "oneOf", "enum", "const")
_JSON_TYPES: dict[str, Any] = {"string": str, "boolean": bool, "null": type(None), "object": dict, "array": list}
_CPP_PREFIX = re.compile(r"\[[0-9:]+\] \S+:\d+: (?:Check failed: .*? is false: )?")  # (also inside a message)


def _has_type(value: Any, name: str) -> bool:
    if name in ("integer", "number"):
        return (isinstance(value, (int, float)) and not isinstance(value, bool)
                and (name == "number" or float(value).is_integer()))
    kind = _JSON_TYPES.get(name)
    return kind is not None and isinstance(value, kind) and not (kind is not bool and isinstance(value, bool))


def _dropped_here(node: dict[str, Any]) -> str | None:
    """The first keyword of one schema node that xgrammar would drop (its subschemas are not looked at), or None."""
    for key in _NEVER_ENFORCED:
        if key in node and not (key == "uniqueItems" and node[key] is False):
            return key
    if "multipleOf" in node and node.get("type") != "integer":  # (xgrammar enforces it on integers only)
        return "multipleOf"
    for bound in ("minLength", "maxLength"):
        if bound in node and ("pattern" in node or "format" in node):
            return bound
    if isinstance(node.get("allOf"), list) and len(node["allOf"]) > 1:
        return "allOf"
    # a required key that properties do not declare: xgrammar writes the declared ones and drops the requirement
    required, declared = node.get("required"), node.get("properties")
    if isinstance(required, list) and required and not (isinstance(declared, dict)
                                                        and all(isinstance(r, str) and r in declared for r in required)):
        return "required"
    # a $ref by anchor, $id or URL (xgrammar resolves JSON pointers in the document, "#/…", only: it logs a
    # warning for the others and leaves the value unconstrained)
    ref = node.get("$ref")
    if isinstance(ref, str) and not (ref == "#" or ref.startswith("#/")):
        return "$ref"
    return _beside_an_alone_keyword(node)


def _beside_an_alone_keyword(node: dict[str, Any]) -> str | None:
    """A validation keyword beside ``$ref``, ``anyOf``, ``oneOf``, ``enum`` or ``const`` (xgrammar reads those alone),
    except a ``type`` every ``enum``/``const`` value has; or None."""
    alone = [key for key in _ALONE if key in node]
    if not alone:
        return None
    values = node["enum"] if alone[0] == "enum" else [node["const"]] if alone[0] == "const" else None
    types = node.get("type")
    for key in node:
        if key == alone[0] or key not in _VALIDATION:
            continue
        if key == "type" and values is not None and isinstance(values, list):  # (a type every value has)
            names = types if isinstance(types, list) else [types]
            if all(any(_has_type(v, str(n)) for n in names) for v in values):
                continue
        return key
    return None


def unenforced_keyword(schema: Any) -> tuple[str, str] | None:
    """(keyword, where) of the first constraint in ``schema`` that xgrammar would drop, or None."""
    for where, node in schema_nodes(schema):
        key = _dropped_here(node)
        if key is not None:
            return key, where
    return None


# a date as a validator reads it (each month's days, February 29 in leap years only): xgrammar's own "date" lets
# 2021-02-31 out; a time as RFC 3339 writes it, without leap or fractional seconds (xgrammar 0.2.9 reads an
# optional group after an alternation in a JSON string's pattern wrongly: ^(?:x|y):a(?:[.][0-9]{1,3})?b$ lets
# "x:a12b" out)
_DATE = (r"(?:[0-9]{4}-(?:(?:0[13578]|1[02])-(?:0[1-9]|[12][0-9]|3[01])|(?:0[469]|11)-(?:0[1-9]|[12][0-9]|30)"
         r"|02-(?:0[1-9]|1[0-9]|2[0-8]))|(?:[0-9]{2}(?:0[48]|[2468][048]|[13579][26])|(?:[02468][048]|[13579][26])00)"
         r"-02-29)")
_TIME = r"(?:[01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](?:Z|[+-](?:[01][0-9]|2[0-3]):[0-5][0-9])"
_FORMAT_PATTERNS = {"date": f"^{_DATE}$", "date-time": f"^{_DATE}T{_TIME}$"}


def rewritten(schema: Any) -> Any:
    """A copy of ``schema`` with two of xgrammar's string rules replaced by patterns that say the same: a length
    bound (xgrammar's lets raw control characters into the JSON string: a document no parser reads) and the
    ``date``/``date-time`` formats (xgrammar's allow February 31). Call after :func:`unenforced_keyword`."""
    if isinstance(schema, list):  # (draft 4's items: a list of schemas)
        return [rewritten(s) for s in schema]
    if not isinstance(schema, dict):
        return schema
    out = map_subschemas(schema, rewritten)  # (schema positions only: a property may be named "format")
    bounds = [out[k] for k in ("minLength", "maxLength") if k in out]
    if (bounds and all(isinstance(b, int) and not isinstance(b, bool) for b in bounds) and "pattern" not in out
            and "format" not in out):
        low, high = int(out.pop("minLength", 0)), out.pop("maxLength", None)
        out["pattern"] = f"^[^\\x00-\\x1f\\ud800-\\udfff]{{{low},{'' if high is None else int(high)}}}$"
    elif isinstance(out.get("format"), str) and out["format"] in _FORMAT_PATTERNS and "pattern" not in out:
        out["pattern"] = _FORMAT_PATTERNS[out.pop("format")]
    return out


def _ebnf_string(text: str) -> str:
    """``text`` as an EBNF sequence of string literals: quotes and backslashes escaped, each control character a
    literal of its own, ``"\\xNN"`` — xgrammar reads the hex digits after ``\\x`` greedily, so a newline written
    ``\\x0a`` before "bye" would be read as U+0AB then "ye" (found in review: a choice came out as text no choice
    has); the closing quote ends the escape."""
    parts: list[str] = []
    run: list[str] = []
    for ch in text:
        if ord(ch) < 0x20 or ch == "\x7f":
            if run:
                parts.append('"' + "".join(run) + '"')
                run = []
            parts.append(f'"\\x{ord(ch):02x}"')
        else:
            run.append("\\" + ch if ch in '"\\' else ch)
    if run or not parts:
        parts.append('"' + "".join(run) + '"')
    return parts[0] if len(parts) == 1 else "(" + " ".join(parts) + ")"


def choice_grammar(choices: Sequence[str]) -> str:
    """An EBNF grammar whose sentences are exactly ``choices``."""
    return "root ::= " + " | ".join(_ebnf_string(c) for c in choices)


def is_ebnf(grammar: str) -> bool:
    """Whether ``grammar`` is GBNF/EBNF (rules ``name ::= ...``) rather than Lark (``name: ...``)."""
    return re.search(r"^\s*[A-Za-z_][\w.-]*\s*::=", grammar, re.MULTILINE) is not None


def _one_line(error: str) -> str:
    """xgrammar's error (``[hh:mm:ss] file.cc:line: message``, sometimes over several lines) as its message line."""
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    first = _CPP_PREFIX.sub("", lines[0]) if lines else "it does not compile"
    if "Invalid repetition range {-" in first:  # (a count past int32 wrapped to a negative one)
        return ("a repetition count is past the xgrammar engine's limit (2,147,483,647); use a smaller count or "
                "an open repetition (+, *, {n,})")
    return first[:400]


def _tokenizer_info(xgr: Any, tokenizer: Any, vocab_size: int, eos_token_ids: Collection[int]) -> Any:
    """xgrammar's view of the vocabulary, special tokens (``<s>``, ``<pad>``, a chat template's markers) written as
    empty: xgrammar reads a byte-level ``<s>`` as the text ``<s>`` and would let it into a string, where the
    detokenizer drops it; an empty token is never allowed (EOS is a stop token, allowed where the grammar ends)."""
    stops = sorted(eos_token_ids) or None  # (None: xgrammar finds the tokenizer's own)
    info = xgr.TokenizerInfo.from_huggingface(tokenizer, vocab_size=vocab_size, stop_token_ids=stops)
    special = set(getattr(tokenizer, "all_special_ids", ()))
    special |= {i for i, t in (getattr(tokenizer, "added_tokens_decoder", None) or {}).items() if t.special}
    if not special:
        return info
    vocab = [""] * vocab_size
    for text, i in tokenizer.get_vocab().items():
        if i < vocab_size and i not in special:
            vocab[i] = text
    return xgr.TokenizerInfo(vocab, info.vocab_type, vocab_size=vocab_size, stop_token_ids=info.stop_token_ids,
                             add_prefix_space=info.add_prefix_space)


class XGrammarMatcher:
    """:class:`~accelkit.serve.structured.GrammarMatcher` over an ``xgrammar.GrammarMatcher``. ``start_mask``: its
    grammar's mask at the start, computed once at compile and copied while no token has been accepted."""

    __slots__ = ("eos_token_ids", "failed", "mask_ns", "matcher", "num_accepted", "start_mask")

    def __init__(self, matcher: xgrammar.GrammarMatcher, start_mask: np.ndarray, eos_token_ids: frozenset[int]) -> None:
        self.matcher, self.start_mask, self.eos_token_ids = matcher, start_mask, eos_token_ids
        self.num_accepted = 0
        self.mask_ns = 0  # (not measured: its rows are not drawn before their mask)
        self.failed = False  # a token was refused: the request ends (EOS only), as llguidance's error state

    def accept_tokens(self, token_ids: Sequence[int]) -> bool:
        for token in token_ids:
            if self.failed or self.matcher.is_terminated() or not self.matcher.accept_token(int(token)):
                self.failed = True
                return False
            self.num_accepted += 1
        return True

    def rollback(self, num_tokens: int) -> None:
        num_tokens = min(num_tokens, self.num_accepted)
        if num_tokens > 0:
            self.matcher.rollback(num_tokens)
            self.num_accepted -= num_tokens

    def at_start(self) -> bool:
        """No token accepted (or all rolled back), no failure: the mask is the grammar's start mask."""
        return self.num_accepted == 0 and not self.failed

    def is_terminated(self) -> bool:
        return self.failed or bool(self.matcher.is_terminated())

    def allows(self, token_id: int) -> bool:
        if self.is_terminated():  # (its mask: EOS only, as fill_bitmasks writes it)
            return token_id in self.eos_token_ids
        if not self.matcher.accept_token(int(token_id)):  # (xgrammar has no check without advancing: advance, undo)
            return False
        self.matcher.rollback(1)
        return True


class XGrammarGrammar:
    """A compiled grammar (immutable, shared) and its start mask; each request gets a matcher of its own."""

    __slots__ = ("_compiled", "_eos", "_matcher_class", "_start_mask", "first_draw_share", "num_bytes")

    def __init__(self, compiled: xgrammar.CompiledGrammar, start_mask: np.ndarray, eos_token_ids: frozenset[int]) -> None:
        import xgrammar as xgr

        self._compiled, self._start_mask, self._matcher_class = compiled, start_mask, xgr.GrammarMatcher
        self._eos = eos_token_ids
        self.first_draw_share = SAMPLE_FIRST_MIN  # (xgrammar's rows mask first: kept for the protocol)
        self.num_bytes = int(compiled.memory_size_bytes) + start_mask.nbytes

    def matcher(self) -> XGrammarMatcher:
        return XGrammarMatcher(self._matcher_class(self._compiled), self._start_mask, self._eos)


def _enforceable(schema: Any, kind: str) -> Any:
    """``schema`` as xgrammar is given it (objects closed, rewritten); ValueError naming a keyword it would not
    enforce."""
    found = unenforced_keyword(schema)
    if found is not None:
        keyword, where = found
        raise ValueError(f"structured_outputs.{kind}: the JSON Schema keyword {keyword} (at {where or 'the root'}) "
                         "cannot be enforced by the xgrammar engine (it would let out documents the schema "
                         "rejects); remove it, or serve with --structured-outputs-backend llguidance")
    return rewritten(close_objects(schema))


class XGrammarBackend:
    """:class:`~accelkit.serve.structured.StructuredBackend` on xgrammar for a Hugging Face fast tokenizer."""

    name = "xgrammar"

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: Collection[int]) -> None:
        try:
            import xgrammar as xgr
        except ImportError:
            raise ValueError(f"structured_outputs_backend='xgrammar' needs the xgrammar package, which is not "
                             f"installed; {INSTALL_HINT}, or use the default llguidance") from None
        check_decoder(tokenizer)
        self._xgr = xgr
        self.vocab_size = vocab_size
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.tokenizer_info = _tokenizer_info(xgr, tokenizer, vocab_size, self.eos_token_ids)
        # the texts of the added tokens its config marks special (Mistral's [TOOL_CALLS]; not Qwen's <tool_call>,
        # marked special=False): xgrammar refuses their ids, so a structural tag cannot be triggered by one
        self.special_tokens = frozenset(t.content for t in getattr(tokenizer, "added_tokens_decoder", {}).values()
                                        if getattr(t, "special", False))
        # (no cache of its own: accelkit's compiler caches compiled grammars, bounded by bytes)
        self.compiler = xgr.GrammarCompiler(self.tokenizer_info, max_threads=COMPILE_THREADS, cache_enabled=False)
        self.parallel_fill = parallel_fill()  # (xgrammar's batch filler only where there are cores to spare)
        # no: its masks come mostly from its per-state cache, and a check is an accept and a rollback; drawing first
        # made 4 of 5 kinds slower on the 2-core VM (benchmarks/results/structured_outputs_cpu_xgrammar_draw_first.json)
        self.draws_first = False
        self._batch: Any = None  # (xgrammar's batch filler, made on the first parallel fill)
        self._eos = EosBits(self.eos_token_ids, vocab_size)
        self.width = (vocab_size + 31) // 32
        self._tail = np.uint32((1 << (vocab_size % 32)) - 1) if vocab_size % 32 else None  # (the last word's ids)

    def prepare(self, spec: StructuredOutputs) -> tuple[str, str]:
        """(what to compile: json, regex, ebnf, lark or structural_tag; its text): the Python-side part of a compile
        (see :meth:`GrammarCompiler._compile`); ValueError as :meth:`compile`."""
        kind = spec.kind
        if spec.whitespace_pattern is not None:
            raise ValueError("structured_outputs.whitespace_pattern: the xgrammar engine takes no whitespace pattern; "
                             "send disable_any_whitespace (no whitespace) or leave it out (at most 2 spaces or "
                             "newlines), or serve with --structured-outputs-backend llguidance")
        if kind == "json_object":
            return "json", '{"type": "object"}'
        for text in (spec.regex or "", spec.grammar or "", *(spec.choice or ())):
            try:
                text.encode("utf-8")
            except UnicodeEncodeError as exc:  # (a lone surrogate, as JSON's "\ud800" gives)
                raise ValueError(f"structured_outputs.{kind}: it is not valid Unicode text ({exc.reason} at character "
                                 f"{exc.start} of {text[:40]!r}); send UTF-8 text") from None
        if kind == "json":
            assert spec.json is not None
            schema = json.loads(spec.json)
            if not isinstance(schema, (dict, bool)):
                raise ValueError("structured_outputs.json: a JSON schema is an object (or true/false)")
            check_depth(schema, kind)
            return "json", json.dumps(_enforceable(schema, kind))
        if kind == "structural_tag":  # (xgrammar's own format: tags triggered in free text)
            tag = json.loads(spec.structural_tag or "null")
            check_depth(tag, kind)
            structures = structural_tags(tag)
            tags = [{"type": "tag", "begin": begin, "end": end,
                     "content": {"type": "json_schema", "json_schema": _enforceable(schema, kind)}}
                    for _, begin, schema, end in structures]
            triggers = sorted({trigger for trigger, _, _, _ in structures})
            special = [t for t in triggers if t in self.special_tokens]
            if special:  # (xgrammar refuses a special token's id, and the model writes the trigger as that token)
                raise ValueError(f"structured_outputs.structural_tag: the triggers {special} are special tokens of "
                                 "this model's tokenizer, which the xgrammar engine cannot match; serve with "
                                 "--structured-outputs-backend llguidance")
            answer, separator = structural_tag_answer(tag)
            if answer is not None:  # (the answer, or calls alone: tools beside a response_format)
                return "structural_tag", json.dumps({"type": "structural_tag", "format": {"type": "or", "elements": [
                    {"type": "json_schema", "json_schema": _enforceable(answer, kind)},
                    {"type": "tags_with_separator", "tags": tags, "separator": separator, "at_least_one": True}]}})
            return "structural_tag", json.dumps({"type": "structural_tag", "format": {
                "type": "triggered_tags", "triggers": triggers, "tags": tags}})
        if kind == "regex":
            assert spec.regex is not None
            return "regex", spec.regex
        if kind == "choice":
            assert spec.choice is not None
            return "ebnf", choice_grammar(spec.choice)
        assert spec.grammar is not None
        return ("ebnf" if is_ebnf(spec.grammar) else "lark"), spec.grammar

    def compile(self, spec: StructuredOutputs, prepared: tuple[str, str] | None = None, *,
                native: Native = run_here) -> XGrammarGrammar:
        """``spec`` compiled (xgrammar's C++, no limit of its own: see the module's docstring); ValueError with one
        line naming the field."""
        import torch

        what, text = prepared if prepared is not None else self.prepare(spec)
        compiler = self.compiler
        try:
            if what == "json":
                # compact: both separators without the spaces xgrammar's own default keeps after them
                whitespace: dict[str, Any] = ({"any_whitespace": False, "separators": (",", ":")}
                                              if spec.disable_any_whitespace else
                                              {"any_whitespace": True, "max_whitespace_cnt": MAX_WHITESPACE})
                compiled = native(compiler.compile_json_schema, text, strict_mode=False, **whitespace)
            elif what == "regex":
                compiled = native(compiler.compile_regex, text)
            elif what == "ebnf":
                compiled = native(compiler.compile_grammar, text)
            elif what == "structural_tag":
                compiled = native(compiler.compile_structural_tag, text)
            else:
                compiled = native(compiler.compile_lark, text)
        except Exception as exc:  # (xgrammar raises RuntimeError, and its own errors, from C++)
            message = _one_line(str(exc))
            if spec.kind == "grammar":
                message += (" (the xgrammar engine reads GBNF/EBNF, rules written name ::= ... from root, or Lark, "
                            "rules name: ... from start; llguidance's Lark extensions are not read)")
            raise ValueError(f"structured_outputs.{spec.kind}: {message}") from None
        first = torch.zeros((1, self.width), dtype=torch.int32)
        native(self._xgr.GrammarMatcher(compiled).fill_next_token_bitmask, first, 0)
        if self._tail is not None:
            first[0, -1:].numpy().view(np.uint32)[0] &= self._tail
        if not self._eos.allows_more(first[0]):
            raise ValueError(f"structured_outputs.{spec.kind}: no text matches it")
        start_mask = first[0].numpy().copy()
        start_mask.flags.writeable = False  # (shared by every request of this grammar)
        return XGrammarGrammar(compiled, start_mask, self.eos_token_ids)

    def fill_bitmasks(self, rows: Sequence[tuple[Any, int]], bitmask: torch.Tensor) -> None:
        assert bitmask.dtype.itemsize == 4 and not bitmask.is_floating_point() and bitmask.is_contiguous() and bitmask.is_cpu
        assert bitmask.shape[1] == self.width, (bitmask.shape, self.width)  # (xgrammar's rows are this wide)
        computed = []
        for m, i in rows:
            if m.is_terminated():  # EOS accepted or a token refused: EOS only (xgrammar fills no mask past EOS)
                self._eos.only(bitmask[i])
            elif m.at_start():
                bitmask[i].numpy()[:] = m.start_mask
            else:
                computed.append((m, i))
        if len(computed) > 1 and self.parallel_fill:
            if self._batch is None:
                self._batch = self._xgr.BatchGrammarMatcher(max_threads=2)
            self._batch.batch_fill_next_token_bitmask([m.matcher for m, _ in computed], bitmask,
                                                      [i for _, i in computed])
        else:
            for m, i in computed:
                m.matcher.fill_next_token_bitmask(bitmask, i)
        if self._tail is not None and computed:  # (xgrammar sets the bits past the vocabulary in the last word)
            last = bitmask[:, -1].numpy().view(np.uint32)
            for _, i in computed:
                last[i] &= self._tail
