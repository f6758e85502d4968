"""The llguidance backend of structured outputs (vLLM's ``guidance``): a lazy lexer and an Earley parser over the
tokenizer's token trie, in Rust. What it enforces is what accelkit promises; its limits bound every compile and
every mask (:data:`PARSER_LIMITS`)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from accelkit.serve.sampling import StructuredOutputs, structural_tag_answer, structural_tags
from accelkit.serve.structured import SAMPLE_FIRST_MIN, EosBits, Native, parallel_fill, run_here
from accelkit.serve.structured_schema import (
    TOO_DEEP,
    check_decoder,
    check_depth,
    close_objects,
    keyword_path,
    map_subschemas,
)

if TYPE_CHECKING:
    import llguidance
    import torch

# Work bounds (llguidance's units; its docs give the speeds: lexer fuel ~50K/ms to build, ~14K/ms per step).
# The defaults let one step of ``a{100000}`` take 0.1 s on the engine thread; these keep a step within a few
# milliseconds and a lexer within ~100 MB (1–2 KB a state). A grammar past them fails: at compile time a 400
# naming the limit, mid-generation the request ends (EOS only).
STEP_LEXER_FUEL = 50_000
INITIAL_LEXER_FUEL = 200_000
MAX_LEXER_STATES = 50_000
MAX_GRAMMAR_SIZE = 500_000  # symbols in the grammar's productions (llguidance's default)

# JSON: whitespace between tokens as before (at most 2 spaces or newlines in a row: `{"a": 1}` and a newline of
# pretty-printing fit, and a model cannot pad forever)
JSON_OPTIONS = {"whitespace_pattern": r"[\x20\x0A]{0,2}"}


def json_options(spec: StructuredOutputs) -> dict[str, Any]:
    """llguidance's JSON options for ``spec``: its whitespace_pattern, none at all (disable_any_whitespace: the
    separators alone, ``,`` and ``:``), or :data:`JSON_OPTIONS`."""
    if spec.disable_any_whitespace:
        return {"whitespace_flexible": False}
    if spec.whitespace_pattern is not None:
        return {"whitespace_pattern": spec.whitespace_pattern}
    return JSON_OPTIONS


_UNIMPLEMENTED = re.compile(r"Unimplemented keys: \[(.*?)\]")
_UNKNOWN_FORMAT = re.compile(r"Unknown format: (.*)")
_MAX_FORMATS_DROPPED = 16


def _drop_format(schema: Any, name: str) -> Any:
    """``schema`` without ``"format": name`` wherever it is a keyword (schema positions only: a ``const`` or an
    ``enum`` value holding such a key stays as it is, and so does a property named ``format``)."""
    if not isinstance(schema, dict):
        return schema
    out = map_subschemas(schema, lambda sub: _drop_format(sub, name))
    if out.get("format") == name:
        del out["format"]
    return out


_LARK_AT = re.compile(r"^at (\d+)\(\d+\): ")
# a zero-width assertion llguidance's regex lexer has no state for (regex-syntax's Look names)
_LOOK = re.compile(r"lookarounds not supported yet; (\w+) in regex")
_LOOK_NAMES = {"WordUnicode": "the word boundary \\b", "WordAscii": "the word boundary \\b",
               "WordUnicodeNegate": "the non-boundary \\B", "WordAsciiNegate": "the non-boundary \\B",
               "StartLF": "^ in multi-line mode", "EndLF": "$ in multi-line mode", "StartCRLF": "^ in multi-line mode",
               "EndCRLF": "$ in multi-line mode"}
_TAG_RULE = re.compile(r"^(?:tag|call)_(\d+)\b|^answer\b")


def _where(schema: Any, keyword: str, tag: bool) -> str | None:
    """Where ``keyword`` first appears in ``schema`` (:func:`keyword_path`; "" its root), or in a structural tag's
    (``tag``) schemas: ``structures[1].schema.properties.n``."""
    if not tag:
        return keyword_path(schema, keyword)
    for i, structure in enumerate(schema.get("structures") or [] if isinstance(schema, dict) else []):
        where = keyword_path(structure.get("schema") if isinstance(structure, dict) else None, keyword)
        if where is not None:
            return f"structures[{i}].schema" + (f".{where}" if where else "")
    where = keyword_path(schema.get("answer"), keyword) if isinstance(schema, dict) else None
    return None if where is None else "answer" + (f".{where}" if where else "")


def _one_line(error: str, schema: Any = None, *, tag_grammar: str | None = None) -> str:
    """llguidance's error (a parse error may draw a caret diagram over several lines, and a parser state dump may
    follow) as one line: the line that names the problem; an unenforceable JSON Schema keyword with where it is.
    ``tag_grammar``: a structural tag's Lark (:func:`structural_tag_lark`), whose line an error locates is said as
    the structure it builds (``structures[1].schema: …``, not ``at 8(8): …``)."""
    tag = tag_grammar is not None
    if m := _UNIMPLEMENTED.search(error):
        keys = json.loads(f"[{m.group(1)}]")
        where = _where(schema, keys[0], tag) if keys else None
        at = f" (at {where or 'the root'})" if where is not None else ""
        return (f"the JSON Schema keyword {', '.join(keys)}{at} cannot be enforced by the llguidance engine (ignoring "
                "it could let out a document the schema rejects); remove it")
    if "oneOf constraints are not supported" in error:
        where = _where(schema, "oneOf", tag)
        return (f"the JSON Schema keyword oneOf (at {where or 'the root'}) has branches one document could match "
                "together, and the llguidance engine cannot enforce that exactly one matches; make the branches "
                "disjoint (a const or enum discriminator) or use anyOf")
    if m := _LOOK.search(error):  # (its own words name regex-syntax's enum: "WordUnicode in regex /\bab/")
        what = _LOOK_NAMES.get(m.group(1), f"the zero-width assertion {m.group(1)}")
        return f"{what} is a look-around, which the llguidance engine cannot enforce; remove it"
    if tag_grammar is not None and (m := _LARK_AT.match(error)):
        lines = tag_grammar.splitlines()
        rule = _TAG_RULE.match(lines[int(m.group(1)) - 1]) if 0 < int(m.group(1)) <= len(lines) else None
        if rule is not None:
            where = "answer" if rule.group(1) is None else f"structures[{rule.group(1)}].schema"
            return _one_line(f"{where}: {error[m.end():]}")
    lines = [line.strip() for line in error.splitlines() if line.strip()]
    named = next((line[len("error: "):] for line in lines if line.startswith("error: ")), None)
    first = lines[0] if lines else "it does not compile"
    if first.startswith("NoExtensionBias"):  # (llguidance's stop reason when no token can begin a match)
        return "no text matches it"
    if first.startswith("recursion limit exceeded"):  # (serde_json reading the grammar: 128 levels of JSON)
        return TOO_DEEP
    if "too many expressions" in first or "fuel" in first or "limit" in first:
        first += (f" (the compile limits: {INITIAL_LEXER_FUEL:,} lexer fuel, {MAX_LEXER_STATES:,} lexer states, "
                  f"{MAX_GRAMMAR_SIZE:,} grammar symbols)")
    return (named or first)[:400]


def _refused(spec: StructuredOutputs, exc: ValueError, schema: Any, grammar: str) -> ValueError:
    """The one-line error of a spec llguidance refused (``grammar``: what it was given, read for a structural tag's
    error location)."""
    tag_grammar = grammar if spec.kind == "structural_tag" else None
    return ValueError(f"structured_outputs.{spec.kind}: {_one_line(str(exc), schema, tag_grammar=tag_grammar)}")


def _special_pattern(special: dict[str, int]) -> re.Pattern[str] | None:
    """A pattern finding ``special``'s token texts (the longest first where one begins another), or None."""
    return re.compile("|".join(map(re.escape, sorted(special, key=len, reverse=True)))) if special else None


def _token_items(special: dict[str, int]) -> Callable[[str], str]:
    """A function writing a text as Lark items: its added tokens llguidance matches as tokens (``special``: text →
    id) as those tokens (``<[id]>``), the rest as strings."""
    found = _special_pattern(special)

    def items(text: str) -> str:
        out, at = [], 0
        for m in found.finditer(text) if found is not None else ():
            out += [json.dumps(text[at:m.start()])] if m.start() > at else []
            out.append(f"<[{special[m.group()]}]>")
            at = m.end()
        return " ".join(out + ([json.dumps(text[at:])] if at < len(text) else []))

    return items


def _json_item(schema: Any) -> str:
    """A schema as a Lark item (``%json``, objects closed, JSON's whitespace)."""
    return "%json " + json.dumps({**close_objects(schema), "x-guidance": JSON_OPTIONS})


def structural_tag_lark(structures: Sequence[tuple[str, str, Any, str]], special: dict[str, int],
                        text_token_ids: Iterable[int] = (), answer: tuple[dict[str, Any], str] | None = None) -> str:
    """A structural tag as llguidance's Lark: free text (``TAG_TEXT``), in which each structure's trigger begins
    it — a lazy lexeme, so the text ends at the trigger's first occurrence —, then the rest of its begin, its schema
    (``%json``, objects closed, JSON's whitespace) and its end. llguidance's own ``StructTag.to_grammar`` writes the
    same but refers to a special token only as a whole ``<…>`` trigger: here every occurrence of an added token
    llguidance matches as a token (``special``: its text → id) in a trigger, begin or end is that token (``<[id]>``),
    as the model writes it — Qwen's ``</tool_call>`` at the end of a call, Mistral's ``[TOOL_CALLS]`` as a trigger.
    ValueError where a trigger holds such a token among other text (a lazy trigger is matched as text).

    Those tokens are no text to llguidance, so the free text matches none of them: a rule of its own lets the model
    write those of ``text_token_ids`` — the ids of ``special`` the tokenizer does not mark special, which are in
    the text — between calls (``free_token``), all but the triggers: Qwen3's ``</think>``, that ends its thinking
    before it answers.

    ``answer`` ((schema, separator): :func:`~accelkit.serve.sampling.structural_tag_answer`): no free text — the
    output is one JSON document valid under the schema, or one or more structures, the separator between them."""
    items = _token_items(special)
    if answer is not None:
        calls = [f"call_{i}: {' '.join(x for x in (items(begin), _json_item(schema), items(end)) if x)}"
                 for i, (_, begin, schema, end) in enumerate(structures)]
        separator = items(answer[1])
        return "\n".join(["%llguidance {}", "start: answer | calls", f"answer: {_json_item(answer[0])}",
                          f"calls: call ({separator} call)*" if separator else "calls: call+",
                          f"call: {' | '.join(f'call_{i}' for i in range(len(structures)))}", *calls]) + "\n"
    found = _special_pattern(special)
    rules = []
    for i, (trigger, begin, schema, end) in enumerate(structures):
        body = " ".join(x for x in (items(begin[len(trigger):]), _json_item(schema), items(end)) if x)
        inside = found.search(trigger) if found is not None else None
        if trigger in special:
            rules.append(f"tag_{i}: TAG_TEXT <[{special[trigger]}]> {body}")
        elif inside is not None:
            raise ValueError(f"structured_outputs.structural_tag.triggers: {trigger!r} holds the special token "
                             f"{inside.group()!r} among other text; make the token a trigger of its own and the "
                             "rest part of the begin")
        else:
            rules += [f"tag_{i}_trigger[lazy]: TAG_TEXT {json.dumps(trigger)}", f"tag_{i}: tag_{i}_trigger {body}"]
    alternatives = [f"tag_{i}" for i in range(len(structures))]
    triggers = {special[trigger] for trigger, *_ in structures if trigger in special}
    free = sorted(set(text_token_ids) - triggers)
    if free:
        alternatives.append("free_token")
        rules.append(f"free_token: TAG_TEXT <[{','.join(map(str, free))}]>")
    return "\n".join(["%llguidance {}", f"start: ({' | '.join(alternatives)})* tag_end", "tag_end: TAG_TEXT",
                      "TAG_TEXT: /(.|\\n)*/", *rules]) + "\n"


class LLGuidanceMatcher:
    """:class:`~accelkit.serve.structured.GrammarMatcher` over an ``llguidance.LLMatcher``. ``start_mask``: its
    grammar's mask at the start (computed once, at compile), what :meth:`LLGuidanceBackend.fill_bitmasks` copies
    while no token has been accepted instead of computing it again."""

    __slots__ = ("_eos_after_stop", "eos_token_ids", "mask_ns", "matcher", "num_accepted", "start_mask")

    def __init__(self, matcher: llguidance.LLMatcher, eos_token_ids: frozenset[int],
                 start_mask: np.ndarray | None = None) -> None:
        self.matcher, self.eos_token_ids, self.start_mask = matcher, eos_token_ids, start_mask
        self._eos_after_stop = 0  # EOS accepted where llguidance had stopped by itself (it does not count them)
        self.num_accepted = 0
        self.mask_ns = 0  # what computing its last mask took (timed when filled row by row, not on the pool; else 0)

    def accept_tokens(self, token_ids: Sequence[int]) -> bool:
        for token in token_ids:
            if self.matcher.is_stopped():  # (a grammar that cannot go on stops by itself: EOS is all it takes)
                if token not in self.eos_token_ids:
                    return False
                self._eos_after_stop += 1
            elif not self.matcher.consume_token(token):
                return False
            self.num_accepted += 1
        return True

    def rollback(self, num_tokens: int) -> None:
        self.num_accepted = max(0, self.num_accepted - num_tokens)
        uncounted = min(num_tokens, self._eos_after_stop)
        self._eos_after_stop -= uncounted
        if num_tokens > uncounted:
            self.matcher.rollback(num_tokens - uncounted)

    def at_start(self) -> bool:
        """No token accepted (or all rolled back), no error: the mask is the grammar's start mask."""
        return self.num_accepted == 0 and self.start_mask is not None and not self.matcher.is_error()

    def is_terminated(self) -> bool:
        return bool(self.matcher.is_stopped())

    def allows(self, token_id: int) -> bool:
        # failed (its mask: EOS only, as fill_bitmasks writes it), or stopped by itself (it takes EOS: accept_tokens)
        if self.matcher.is_error() or self.matcher.is_stopped():
            return token_id in self.eos_token_ids
        return self.matcher.validate_tokens([token_id]) == 1


class LLGuidanceGrammar:
    """A compiled grammar: a matcher at the start, with its first mask computed; requests get deep copies (which
    share its lexer and its parser tables) and that first mask. llguidance computes every mask anew, and a start
    state can be the costliest one — ``a{100000}``'s walks every token made of a's, each time it is computed — so a
    request's first step copies the mask computed at compile instead (on the compile thread, not the engine's)."""

    __slots__ = ("_eos", "_start_mask", "_template", "first_draw_share", "num_bytes")

    def __init__(self, template: llguidance.LLMatcher, grammar: str, eos_token_ids: frozenset[int],
                 start_mask: np.ndarray | None = None) -> None:
        self._template, self._eos, self._start_mask = template, eos_token_ids, start_mask
        self.first_draw_share = SAMPLE_FIRST_MIN
        # the grammar's text ×16, plus a floor: what a lexer holds beyond the text is not visible from Python
        self.num_bytes = 16 * len(grammar) + (64 << 10) + (start_mask.nbytes if start_mask is not None else 0)

    def matcher(self) -> LLGuidanceMatcher:
        return LLGuidanceMatcher(self._template.deep_copy(), self._eos, self._start_mask)


class LLGuidanceBackend:
    """:class:`~accelkit.serve.structured.StructuredBackend` on llguidance for a Hugging Face fast tokenizer."""

    name = "llguidance"

    def __init__(self, tokenizer: Any, vocab_size: int, eos_token_ids: Collection[int]) -> None:
        import llguidance
        import llguidance.hf

        check_decoder(tokenizer)
        self._llg = llguidance
        self.vocab_size = vocab_size
        self.eos_token_ids = frozenset(int(t) for t in eos_token_ids)
        self.tokenizer = llguidance.hf.from_tokenizer(tokenizer, n_vocab=vocab_size,
                                                      eos_token=sorted(int(t) for t in eos_token_ids))
        # the added tokens llguidance matches as tokens, not as their text (every added token it calls special,
        # Qwen's <tool_call> among them though its tokenizer marks it special=False): a structural tag refers to these
        added = getattr(tokenizer, "added_tokens_decoder", {})
        self.added_token_ids = {t.content: int(i) for i, t in added.items()
                               if int(i) < vocab_size and self.tokenizer.is_special_token(int(i))}
        # those of them in the text (the tokenizer does not mark them special): Qwen3's <think> and </think>
        self.text_token_ids = frozenset(i for t, i in self.added_token_ids.items() if not added[i].special)
        self.limits = llguidance.LLParserLimits(
            step_lexer_fuel=STEP_LEXER_FUEL, initial_lexer_fuel=INITIAL_LEXER_FUEL,
            max_lexer_states=MAX_LEXER_STATES, max_grammar_size=MAX_GRAMMAR_SIZE, verbose_errors=False,
        )
        self._executor = llguidance.LLExecutor(num_threads=2)
        self.parallel_fill = parallel_fill()  # (the executor's threads only where there are cores to spare)
        # a mask walks the vocabulary each time (tens to hundreds of µs), a check of one token takes under 1 µs
        self.draws_first = True
        self._eos = EosBits(eos_token_ids, vocab_size)

    def grammar_text(self, spec: StructuredOutputs, schema: Any = None) -> str:
        """The spec as an llguidance grammar (its JSON); ``schema``: the JSON schema (or the structural tag) to use
        in place of the spec's text (parsed, with what :meth:`compile` dropped)."""
        llg = self._llg
        kind = spec.kind
        if kind == "json_object":
            return str(llg.LLMatcher.grammar_from_json_schema({"type": "object"}, defaults=json_options(spec)))
        if kind == "json":
            if schema is False:  # (the schema no document is valid under)
                raise ValueError("no text matches it")
            if schema is True:  # (any document: the empty schema's meaning)
                schema = {}
            if not isinstance(schema, dict):
                raise ValueError("a JSON schema is an object (or true/false)")
            if isinstance(schema, dict) and "x-guidance" in schema:  # llguidance's own options, read at the root:
                # the client's would override the server's whitespace and separators, and "lenient" would let
                # keywords through unenforced; an x- key, it is an annotation to a validator
                schema = {k: v for k, v in schema.items() if k != "x-guidance"}
            return str(llg.LLMatcher.grammar_from_json_schema(close_objects(schema), defaults=json_options(spec)))
        if kind == "choice":
            assert spec.choice is not None
            return str(llg.grammar_from("choice", json.dumps(list(spec.choice))))
        if kind == "regex":
            assert spec.regex is not None
            return str(llg.LLMatcher.grammar_from_regex(spec.regex))
        if kind == "structural_tag":
            answer, separator = structural_tag_answer(schema)
            return str(llg.LLMatcher.grammar_from_lark(structural_tag_lark(
                structural_tags(schema), self.added_token_ids, self.text_token_ids,
                None if answer is None else (answer, separator))))
        assert spec.grammar is not None
        return str(llg.grammar_from("grammar", spec.grammar))

    def prepare(self, spec: StructuredOutputs) -> tuple[Any, str]:
        """(the parsed JSON schema or None, the grammar's text): the Python-side part of a compile, which holds the
        interpreter lock (see :meth:`GrammarCompiler._compile`); ValueError as :meth:`compile`."""
        text = spec.json if spec.json is not None else spec.structural_tag  # (a tag's schemas are rewritten as one)
        schema = json.loads(text) if text is not None else None
        check_depth(schema, spec.kind)
        try:
            return schema, self.grammar_text(spec, schema)
        except ValueError as exc:  # (a tag's grammar is not written yet: "" for no line to name)
            raise _refused(spec, exc, schema, "") from None

    def compile(self, spec: StructuredOutputs, prepared: tuple[Any, str] | None = None, *,
                native: Native = run_here) -> LLGuidanceGrammar:
        import torch

        schema, grammar = prepared if prepared is not None else self.prepare(spec)
        try:
            for _ in range(_MAX_FORMATS_DROPPED + 1):
                matcher = native(self._llg.LLMatcher, self.tokenizer, grammar, log_level=0, limits=self.limits)
                unknown = _UNKNOWN_FORMAT.search(matcher.get_error()) if matcher.is_error() else None
                if unknown is None:
                    break
                # a format llguidance does not know is an annotation, as a validator reads it: it constrains nothing
                dropped = _drop_format(schema, unknown.group(1))
                if dropped == schema:
                    break
                schema = dropped
                grammar = self.grammar_text(spec, schema)
            if not matcher.is_error():  # the first mask: it is where a lexer past its limits or matching nothing shows
                first = torch.zeros((self.vocab_size + 31) // 32, dtype=torch.int32)
                native(matcher.unsafe_compute_mask_ptr, first.data_ptr(), first.numel() * 4)
                if not matcher.is_error() and not self._eos.allows_more(first):
                    raise ValueError("no text matches it")
            if matcher.is_error():
                raise ValueError(matcher.get_error())  # (made one line below, with every other error here)
        except ValueError as exc:
            raise _refused(spec, exc, schema, grammar) from None
        start_mask = first.numpy().copy()
        start_mask.flags.writeable = False  # (shared by every request of this grammar)
        return LLGuidanceGrammar(matcher, grammar, self.eos_token_ids, start_mask)

    def fill_bitmasks(self, rows: Sequence[tuple[Any, int]], bitmask: torch.Tensor) -> None:
        # (llguidance.torch.fill_next_token_bitmask_par's call, without importing that module: it builds a
        # torch.compile kernel at import, which pulls in dynamo)
        assert bitmask.element_size() == 4 and not bitmask.is_floating_point() and bitmask.is_contiguous() and bitmask.is_cpu
        row_bytes = bitmask.shape[1] * 4
        computed = []
        for m, i in rows:  # a matcher at its start: the mask computed at compile (bitmask rows are that wide)
            if m.at_start() and m.start_mask.shape[0] == bitmask.shape[1]:
                bitmask[i].numpy()[:] = m.start_mask
            else:
                computed.append((m, i))
        if len(computed) == 1 or not self.parallel_fill:  # on this thread: no hand-off to the executor's pool
            base = bitmask.data_ptr()  # (and no wake-up of its threads, milliseconds at times on a loaded machine)
            for m, i in computed:
                start = time.perf_counter_ns()
                m.matcher.unsafe_compute_mask_ptr(base + i * row_bytes, row_bytes)
                m.mask_ns = time.perf_counter_ns() - start
        elif computed:
            matchers = [(m.matcher, i) for m, i in computed]
            self._executor.unsafe_compute_mask_ptr(matchers, bitmask.data_ptr(), row_bytes, bitmask.shape[0])
        for m, i in rows:  # a matcher past its step limit (or fed a token it refused): EOS only, the request ends
            if m.matcher.is_error():
                self._eos.only(bitmask[i])
