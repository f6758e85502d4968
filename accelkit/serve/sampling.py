"""Per-request sampling settings (pure Python; the on-device sampler lives in ``sampler.py``).

Every field is checked here, in the caller's thread, against what the engine can run: a value the sampler
would choke on inside the engine thread (a seed ``torch.Generator.manual_seed`` refuses, a NaN or infinite
temperature) is a ``ValueError`` naming the field before the request is queued.
"""

from __future__ import annotations

import functools
import json
import math
import re
from dataclasses import dataclass
from typing import Any, TypeVar

from accelkit.core.errors import closest
from accelkit.core.spec import Spec, spec_field

SEED_MIN, SEED_MAX = -(2**63), 2**64 - 1  # the range torch.Generator.manual_seed accepts
GREEDY_BELOW = 1e-5  # a temperature under this is argmax, as in vLLM: logits / 1e-40 overflow float32
MAX_STOP_STRINGS = 64  # each is searched for after every token, on the engine thread
MAX_BAD_WORDS = 128  # each is compared with the output's last tokens at every step, on the engine thread
MAX_BAD_WORD_CHARS = 256
MAX_STOP_TOKEN_IDS = 1024
MAX_LOGPROBS = 20  # OpenAI's top_logprobs limit (and vLLM's default max_logprobs)
MAX_LOGIT_BIAS = 300  # OpenAI's limit on logit_bias entries
MAX_N = 256  # choices per prompt (each its own engine request, so each holds its own KV blocks)
PENALTY_RANGE = 2.0  # presence/frequency penalties lie in [-2, 2], as in OpenAI and vLLM
LOGIT_BIAS_RANGE = 100.0
# repetition_penalty divides or multiplies float32 logits: 1e-300 rounds to 0 there (logits become inf, the
# probabilities NaN, and the sampler picks token 0), 1e300 to inf; past these bounds it only saturates anyway
REPETITION_PENALTY_RANGE = (1e-4, 1e4)


def derived_seed(seed: int | None, choice: int) -> int | None:
    """Choice ``choice``'s seed: distinct per choice (so n choices differ), fixed by the request's seed (so the
    request is reproducible) — vLLM's ``seed + index``, wrapped into the range a generator takes."""
    if seed is None or choice == 0:
        return seed
    return (seed + choice - SEED_MIN) % (SEED_MAX - SEED_MIN + 1) + SEED_MIN


class FrozenBias(dict[int, float]):
    """``SamplingParams.logit_bias``: a dict that refuses changes. The engine reads the params of a running request
    at every step, so a caller's later ``params.logit_bias[t] = …`` would change (or, with an id past the vocabulary
    checked at submission, break) a request already running; params are frozen, this field too. Still a dict for
    readers, ``==`` and JSON; hashable, picklable and copyable."""

    __slots__ = ()

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise TypeError("SamplingParams.logit_bias is read-only (a running request may be using it); make new "
                        "params with params.replace(logit_bias={...})")

    __setitem__ = __delitem__ = __ior__ = clear = pop = popitem = setdefault = update = _refuse  # type: ignore[assignment]

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))

    def __reduce__(self) -> tuple[type[FrozenBias], tuple[dict[int, float]]]:
        # pickle and copy would otherwise rebuild it item by item through __setitem__
        return FrozenBias, (dict(self),)


MAX_CACHE_SALT_CHARS = 1024  # cache_salt: hashed into a request's first prompt block
MAX_CHOICES = 256  # structured_outputs.choice: each choice is a branch of the request's grammar
MAX_STRUCTURES = 256  # structured_outputs.structural_tag: structures and triggers each (past ~1,000 llguidance's
# per-step limits stop a request mid-generation instead of refusing it at compile)
MAX_SPEC_CHARS = 262_144  # a regex's, a grammar's or a JSON schema's text, and all choices together


#: the constraints given as text (the choice is a list, json_object a flag)
_TEXT_KINDS = ("json", "regex", "grammar", "structural_tag")
MAX_WHITESPACE_PATTERN_CHARS = 256  # structured_outputs.whitespace_pattern: a regex for the gaps between JSON tokens
_TAG_FIELD = "structured_outputs.structural_tag"
_TAG_SHAPE = '{"structures": [{"begin": "<function=f>", "schema": {...}, "end": "</function>"}], "triggers": ["<function="]}'


def _short_json(value: Any) -> str:
    text = json.dumps(value)
    return text if len(text) <= 80 else text[:77] + "..."


def _strict_json(text: str, field: str, give: str) -> Any:
    """``text`` parsed as strict JSON (no NaN or Infinity, which Python's reader takes and no grammar engine
    writes back as JSON); ValueError naming ``field`` and what to ``give``."""
    def no_constant(name: str) -> float:
        raise _NotJSON(f"{field} holds {name}, which is not JSON; give finite numbers")

    try:
        return json.loads(text, parse_constant=no_constant)
    except _NotJSON:
        raise
    except ValueError as exc:
        raise ValueError(f"{field} is not valid JSON ({exc}); give {give}") from None


class _NotJSON(ValueError):
    pass


# what a whitespace_pattern may be built of: JSON's four whitespace characters (as themselves or escaped), groups,
# alternation, classes of those characters and quantifiers; nothing that could match another character
_WS_ESCAPES = re.compile(r"\\(?:[ ntr]|x(?:20|09|0[aAdD]))")
_WS_CHARS = " \t\n\r"
_WS_COUNT = re.compile(r"\{[0-9]{1,4}(,[0-9]{0,4})?\}")  # a {m} or {m,n} quantifier (outside a class)


def _check_whitespace_pattern(pattern: str) -> None:
    """ValueError unless ``pattern`` can match JSON whitespace only (a token mask lets through whatever it
    matches: ``x`` would put x between the document's tokens, and the output would not be JSON)."""
    i, in_class = 0, False
    while i < len(pattern):
        c = pattern[i]
        escape = _WS_ESCAPES.match(pattern, i)
        if escape is not None or (not in_class and pattern.startswith("(?:", i)):
            i = escape.end() if escape is not None else i + 3
            continue
        quantifier = _WS_COUNT.match(pattern, i) if not in_class else None
        if quantifier is not None:
            i = quantifier.end()
            continue
        if in_class:  # (a class closes, but not empty: "[]" is not one)
            allowed = _WS_CHARS if pattern[i - 1] == "[" else _WS_CHARS + "]"
        else:
            allowed = _WS_CHARS + "[()|?*+"
        if c not in allowed:  # (a "(?" other than "(?:" fails at what follows it: i, =, !, <, P; "[]" and "[^" too)
            raise ValueError(f"structured_outputs.whitespace_pattern {pattern!r}: {pattern[i:i + 8]!r} at character "
                             f"{i} may match more than JSON's whitespace; build it from spaces, \\t, \\n and \\r (or "
                             "\\x20 \\x09 \\x0a \\x0d), (?:groups), |, [classes] of those and ?, *, +, {m,n} (counts up "
                             "to 9999)")
        in_class = c == "[" or (in_class and c != "]")
        i += 1
    try:  # (what is left to get wrong is the structure: groups and classes closed, counts in order)
        re.compile(pattern)
    except (re.error, OverflowError) as exc:
        raise ValueError(f"structured_outputs.whitespace_pattern {pattern!r} is not a regular expression ({exc}); "
                         "fix it or leave it out") from None


@dataclass(frozen=True, slots=True, kw_only=True)
class StructuredOutputs(Spec):
    """vLLM's ``StructuredOutputsParams``: the output must match exactly one of these (the sampler masks every token
    that would leave it). Compiled (by llguidance) on first use and shared by requests with the same spec."""

    json: str | None = spec_field(
        None, doc="A JSON schema (its JSON text; a dict is stored as compact JSON, its key order kept): the output is "
        "one JSON document valid under it. Keywords the engine cannot enforce are refused, not ignored "
        "(docs/serve.md).",
    )
    regex: str | None = spec_field(None, doc="A regular expression (Rust regex syntax) the whole output must match.")
    choice: tuple[str, ...] | None = spec_field(
        None, doc=f"The output is exactly one of these strings (1..{MAX_CHOICES}, non-empty, distinct)."
    )
    grammar: str | None = spec_field(
        None, doc="A context-free grammar, in llguidance's Lark syntax (or GBNF/EBNF, converted to it): the output "
        "is one sentence of it.",
    )
    json_object: bool = spec_field(False, doc="The output is one JSON object, any keys and values (JSON mode).")
    structural_tag: str | None = spec_field(
        None, doc="vLLM's structural tag (its JSON text; a dict is stored as compact JSON): {\"structures\": [{\"begin\", "
        "\"schema\", \"end\"}, ...], \"triggers\": [...]}. The output is free text in which each structure's begin "
        "(which starts with one of the triggers) is followed by one JSON document valid under its schema, then its "
        "end: tool calls in the middle of running text.",
    )
    whitespace_pattern: str | None = spec_field(
        None, doc="json and json_object only: a regular expression for the whitespace allowed between the JSON "
        "document's tokens (vLLM's whitespace_pattern, guided_whitespace_pattern); None = at most 2 spaces or "
        "newlines. The llguidance engine only.",
    )
    disable_any_whitespace: bool = spec_field(
        False, doc="json and json_object only: no whitespace between the JSON document's tokens — compact JSON, "
        "`{\"a\":1}` (vLLM's disable_any_whitespace).",
    )

    def __post_init__(self) -> None:
        for name in ("json", "structural_tag"):  # a dict (vLLM's json=...): its text, in its key order
            if isinstance(getattr(self, name), dict):
                object.__setattr__(self, name, json.dumps(getattr(self, name), separators=(",", ":")))
        if isinstance(self.choice, str):
            raise ValueError(f"choice={self.choice!r} is one string; give a list of strings")
        Spec.__post_init__(self)

    def validate(self) -> None:
        given = [name for name in (*_TEXT_KINDS, "choice") if getattr(self, name) is not None]
        given += ["json_object"] if self.json_object else []
        if len(given) != 1:
            raise ValueError(f"structured_outputs sets {', '.join(given) or 'nothing'}; set exactly one of json, "
                             "regex, choice, grammar, structural_tag or json_object")
        for name in _TEXT_KINDS:
            text = getattr(self, name)
            if text is not None and not text:
                raise ValueError(f"structured_outputs.{name} is empty; give a non-empty {name}")
            if text is not None and len(text) > MAX_SPEC_CHARS:
                raise ValueError(f"structured_outputs.{name} has {len(text):,} characters; the size limit is "
                                 f"{MAX_SPEC_CHARS:,}")
        if self.json is not None:
            _strict_json(self.json, "structured_outputs.json", "a JSON schema")
        self._check_whitespace()
        if self.structural_tag is not None:
            self.structural_tags()
        if self.choice is not None:
            if not 1 <= len(self.choice) <= MAX_CHOICES:
                raise ValueError(f"structured_outputs.choice has {len(self.choice)} strings; give 1 to {MAX_CHOICES}")
            if any(not c for c in self.choice):
                raise ValueError("structured_outputs.choice contains an empty string; give non-empty choices")
            if len(set(self.choice)) != len(self.choice):
                raise ValueError("structured_outputs.choice repeats a string; give distinct choices")
            total = sum(map(len, self.choice))
            if total > MAX_SPEC_CHARS:
                raise ValueError(f"structured_outputs.choice has {total:,} characters in all; the size limit is "
                                 f"{MAX_SPEC_CHARS:,}")

    def _check_whitespace(self) -> None:
        asked = [n for n in ("whitespace_pattern", "disable_any_whitespace") if getattr(self, n) not in (None, False)]
        if not asked:
            return
        if len(asked) > 1:
            raise ValueError("structured_outputs sets both whitespace_pattern and disable_any_whitespace; send one of "
                             "them (disable_any_whitespace: no whitespace at all)")
        if self.kind not in ("json", "json_object"):
            raise ValueError(f"structured_outputs.{asked[0]} applies to JSON outputs (json, json_object), not to "
                             f"{self.kind}; leave it out")
        pattern = self.whitespace_pattern
        if pattern is not None:
            if not 1 <= len(pattern) <= MAX_WHITESPACE_PATTERN_CHARS:
                raise ValueError(f"structured_outputs.whitespace_pattern has {len(pattern)} characters; give a regular "
                                 f"expression of 1 to {MAX_WHITESPACE_PATTERN_CHARS}")
            _check_whitespace_pattern(pattern)

    @property
    def kind(self) -> str:
        """Which constraint this is: json, regex, choice, grammar, structural_tag or json_object."""
        return next(name for name in (*_TEXT_KINDS, "choice") if getattr(self, name) is not None) if (
            not self.json_object) else "json_object"

    def structural_tags(self) -> list[tuple[str, str, Any, str]]:
        """The structural tag's structures (:func:`structural_tags`, its answer checked too:
        :func:`structural_tag_answer`); ValueError naming what is malformed."""
        tag = _strict_json(self.structural_tag or "", _TAG_FIELD, _TAG_SHAPE)
        structural_tag_answer(tag)
        return structural_tags(tag)


def structural_tags(tag: Any) -> list[tuple[str, str, Any, str]]:
    """A parsed structural tag's structures as (trigger, begin, schema, end), each begin's trigger the first listed
    that it starts with; ValueError naming what is malformed."""
    structures = tag.get("structures") if isinstance(tag, dict) else None
    triggers = tag.get("triggers") if isinstance(tag, dict) else None
    if isinstance(tag, dict) and "format" in tag and structures is None:
        raise ValueError(f"{_TAG_FIELD}: the {{\"format\": ...}} form (xgrammar's newer one) is not served; give "
                         f"{_TAG_SHAPE}")
    if not isinstance(structures, list) or not structures or not isinstance(triggers, list) or not triggers:
        raise ValueError(f"{_TAG_FIELD} needs a non-empty list of structures and one of triggers; give {_TAG_SHAPE}")
    if len(structures) > MAX_STRUCTURES or len(triggers) > MAX_STRUCTURES:
        raise ValueError(f"{_TAG_FIELD} has {len(structures)} structures and {len(triggers)} triggers; give at most "
                         f"{MAX_STRUCTURES} of each")
    _check_triggers(triggers)
    return [_structure(i, st, triggers) for i, st in enumerate(structures)]


MAX_SEPARATOR_CHARS = 16


def structural_tag_answer(tag: Any) -> tuple[dict[str, Any] | None, str]:
    """(answer, separator) of accelkit's extension of a structural tag, or (None, "") without it: with ``"answer"``
    (a JSON schema) the output is either one JSON document valid under it or one or more of the structures with
    ``"separator"`` (text, none by default) between them — no free text (what tools and a ``response_format``
    together ask). ValueError naming what is malformed."""
    if not isinstance(tag, dict) or ("answer" not in tag and "separator" not in tag):
        return None, ""
    answer, separator = tag.get("answer"), tag.get("separator", "")
    if not isinstance(answer, dict):
        raise ValueError(f"{_TAG_FIELD}.answer is {_short_json(answer)}; give a JSON schema object (the answer the "
                         "output is when it makes no call), or leave answer and separator out")
    if not isinstance(separator, str) or len(separator) > MAX_SEPARATOR_CHARS:
        raise ValueError(f"{_TAG_FIELD}.separator is {_short_json(separator)}; give the text between calls, at most "
                         f"{MAX_SEPARATOR_CHARS} characters")
    return answer, separator


def _check_triggers(triggers: list[Any]) -> None:
    if not all(isinstance(t, str) and t for t in triggers):
        raise ValueError(f"{_TAG_FIELD}.triggers holds {_short_json(triggers)}; give non-empty strings")
    for t in triggers:
        longer = next((u for u in triggers if u != t and u.startswith(t)), None)
        if longer is not None:  # (a trigger fires at its first occurrence in the text: the longer one never would)
            raise ValueError(f"{_TAG_FIELD}.triggers: {t!r} begins {longer!r}, which could then never be written; "
                             "give triggers none of which begins another (put the rest in the structures' begins)")


def _structure(i: int, st: Any, triggers: list[str]) -> tuple[str, str, Any, str]:
    where = f"{_TAG_FIELD}.structures[{i}]"
    if not isinstance(st, dict) or not isinstance(st.get("begin"), str) or not isinstance(st.get("end"), str) \
            or not isinstance(st.get("schema"), dict):
        raise ValueError(f"{where} is {_short_json(st)}; give {{\"begin\": text, \"schema\": a JSON schema "
                         "object, \"end\": text}")
    trigger = next((t for t in triggers if st["begin"].startswith(t)), None)
    if trigger is None:
        raise ValueError(f"{where}.begin {st['begin']!r} starts with none of the triggers "
                         f"{_short_json(triggers)}; make each begin start with a trigger")
    return trigger, st["begin"], st["schema"], st["end"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SamplingParams(Spec):
    """How one request picks its tokens and when it stops. ``temperature=0`` is greedy decoding."""

    n: int = spec_field(
        1, min=1, max=MAX_N,
        doc=f"vLLM's: outputs per prompt (1..{MAX_N}); LLM.generate and LLM.chat return them in one RequestOutput's "
        "``outputs`` (each choice is its own engine request; with a seed, choice i samples with seed + i). An engine "
        "request (LLMEngine, EngineLoop) makes one output: it refuses n > 1.",
    )
    temperature: float = spec_field(
        1.0, min=0.0, doc=f"Softmax temperature, finite; 0 (or anything below {GREEDY_BELOW}) = greedy (argmax)."
    )
    top_p: float = spec_field(1.0, doc="Nucleus sampling: keep the smallest set of tokens with this much mass, in (0, 1].")
    top_k: int | None = spec_field(
        None, min=1, doc="Keep only the k most likely tokens; None (or vLLM's 0 and -1, stored as None) = no limit."
    )
    max_tokens: int | None = spec_field(
        16, min=1, doc="Most tokens to generate for this request; None = up to the context limit (vLLM's).",
    )
    stop: tuple[str, ...] = spec_field(
        (), doc=f"Up to {MAX_STOP_STRINGS} strings that end generation; the text is cut before the first to "
        "complete (after it with include_stop_str_in_output)."
    )
    stop_token_ids: tuple[int, ...] = spec_field(
        (), doc=f"Up to {MAX_STOP_TOKEN_IDS} token ids that end generation: the one that does is in the token ids, "
        "its text left out unless include_stop_str_in_output (vLLM's)."
    )
    ignore_eos: bool = spec_field(False, doc="Keep generating after the end-of-sequence token.")
    seed: int | None = spec_field(
        None, min=SEED_MIN, max=SEED_MAX,
        doc="Seed of this request's own random stream, in [-2**63, 2**64 - 1]; None = the engine's stream.",
    )

    presence_penalty: float = spec_field(
        0.0, min=-PENALTY_RANGE, max=PENALTY_RANGE,
        doc="OpenAI's: subtracted from the logit of every token already generated (once), in [-2, 2].",
    )
    frequency_penalty: float = spec_field(
        0.0, min=-PENALTY_RANGE, max=PENALTY_RANGE,
        doc="OpenAI's: subtracted from a token's logit once per time it was generated, in [-2, 2].",
    )
    repetition_penalty: float = spec_field(
        1.0, doc="vLLM's (HF's): a token in the prompt or the output has its logit divided by this when positive, "
        f"multiplied when negative; in [{REPETITION_PENALTY_RANGE[0]:g}, {REPETITION_PENALTY_RANGE[1]:g}], 1 = off.",
    )
    min_p: float = spec_field(
        0.0, min=0.0, max=1.0,
        doc="Drop tokens less likely than min_p × the most likely one's probability (after temperature), in [0, 1].",
    )
    bad_words: tuple[str, ...] = spec_field(
        (), doc=f"vLLM's: up to {MAX_BAD_WORDS} words (each 1 to {MAX_BAD_WORD_CHARS} characters) the output never "
        "holds as tokens: each word is tokenized alone and after a space, and the last token of either is masked "
        "wherever the output's last tokens are the rest of it (a one-token word: everywhere). Not with "
        "structured_outputs.",
    )
    min_tokens: int = spec_field(
        0, min=0, doc="Generate at least this many tokens: EOS and stop_token_ids cannot be sampled before, and "
        "stop strings do not end generation within them (vLLM's); <= max_tokens.",
    )
    logit_bias: dict[int, float] | None = spec_field(
        None, doc=f"Token id → bias in [-{LOGIT_BIAS_RANGE:g}, {LOGIT_BIAS_RANGE:g}] added to its logit before "
        f"sampling (at most {MAX_LOGIT_BIAS} ids; the engine checks them against the vocabulary).",
    )
    allowed_token_ids: tuple[int, ...] | None = spec_field(
        None, doc="vLLM's: sampling (greedy too) picks only among these token ids; None = any. Non-empty, ids >= 0 "
        "(the engine checks them against the vocabulary). EOS too: unless it is listed, only max_tokens or a stop "
        "string ends generation. Each running request keeps a vocabulary-sized bool mask on the device (1 byte per "
        "token: 125 KiB at V=128,256).",
    )
    include_stop_str_in_output: bool = spec_field(
        False, doc="vLLM's: the stop string (or stop token) that ends generation stays at the end of the text (cut "
        "after it, not before). Streamed text is then handed out as it comes (nothing is held back for a stop "
        "string's start).",
    )
    skip_special_tokens: bool = spec_field(
        True, doc="vLLM's: special tokens (the tokenizer's, EOS and control tokens such as Mistral's [TOOL_CALLS]) are "
        "left out of the text; False keeps them — but for the stop token that ended the output, left out as vLLM "
        "does unless include_stop_str_in_output. The token ids are the same either way.",
    )
    spaces_between_special_tokens: bool = spec_field(
        True, doc="vLLM's; accepted for its clients and has no effect: the text is the tokenizer's own decode at its "
        "own spacing, and a fast (tokenizers) tokenizer — what transformers 5 loads from a tokenizer.json — places "
        "special tokens by its decoder whatever this is (transformers' decode and vLLM's fast detokenizer ignore it "
        "too).",
    )
    detokenize: bool = spec_field(
        True, doc="vLLM's: False (text left empty, token ids only) is refused — accelkit always decodes the text; the "
        "token ids are in every output as well.",
    )
    truncate_prompt_tokens: int | None = spec_field(
        None, min=1, doc="vLLM's: only the last k prompt tokens run (a shorter prompt runs whole); None = all of "
        "it. Applied after tokenizing, before the context-length check; RequestOutput.prompt_token_ids are the "
        "kept ones (RequestOutput.prompt stays the text as given).",
    )
    structured_outputs: StructuredOutputs | None = spec_field(
        None, doc="vLLM's: the output must match a JSON schema, a regex, one of some strings, or be a JSON object "
        "(see StructuredOutputs); tokens that would leave the match are masked before sampling (greedy too), and "
        "EOS is allowed only where the text so far is a complete match. Not with min_tokens or allowed_token_ids.",
    )
    structured_outputs_after_token_id: int | None = spec_field(
        None, min=0, doc="With structured_outputs: the constraint starts after this token's first occurrence in the "
        "output — a reasoning model's </think>: it thinks freely, then answers in the format (an output that never "
        "writes the token is not constrained at all); None: from the first token.",
    )
    structured_outputs_deferred_by_token_id: int | None = spec_field(
        None, min=0, doc="With structured_outputs_after_token_id: the constraint waits for that token only when the "
        "output's first token is this one — a hybrid reasoning model's <think>, which thinks or not as it decides; "
        "the first token may then be this one or one the constraint allows, and any other starts the constraint at "
        "once. None: it always waits.",
    )
    logprobs: int | None = spec_field(
        None, min=0, max=MAX_LOGPROBS,
        doc=f"Return each generated token's log-probability and the k most likely ones (0..{MAX_LOGPROBS}); None = "
        "none. Raw log-probabilities of the model (before penalties, temperature, top-k/p), as vLLM's default.",
    )
    prompt_logprobs: int | None = spec_field(
        None, min=0, max=MAX_LOGPROBS,
        doc=f"Return each prompt token's log-probability given the tokens before it, and the k most likely there "
        f"(0..{MAX_LOGPROBS}); the first token has none. None = not computed. The request then skips the prefix "
        "cache (a cached token has no logits), as vLLM's does.",
    )

    cache_salt: str | None = spec_field(
        None, doc=f"vLLM's: prompt blocks cached for a request with a salt serve only requests with the same salt (1 to "
        f"{MAX_CACHE_SALT_CHARS} characters), so tenants that share a server cannot time each other's prompts through "
        "the prefix cache; None = shared with every request without one.",
    )

    def __post_init__(self) -> None:
        if type(self.top_k) is int and self.top_k in (0, -1):  # vLLM's "no limit", as the server maps it
            object.__setattr__(self, "top_k", None)
        elif type(self.top_k) is int and self.top_k < -1:
            raise ValueError(f"top_k={self.top_k} is out of range; expected an integer >= 1, or 0, -1 or None for "
                             "no limit")
        if isinstance(self.stop, str):  # one stop string, as vLLM and OpenAI take it
            object.__setattr__(self, "stop", (self.stop,))
        for name in ("logprobs", "prompt_logprobs"):  # vLLM's -1: every token of the vocabulary
            if type(getattr(self, name)) is int and getattr(self, name) == -1:
                raise ValueError(f"{name}=-1 (vLLM's whole vocabulary) is not supported; give k in 0..{MAX_LOGPROBS} "
                                 "(the k most likely tokens beside each token)")
        if type(self.truncate_prompt_tokens) is int and self.truncate_prompt_tokens == -1:
            raise ValueError("truncate_prompt_tokens=-1 (vLLM's: cut to the model's context length) is not supported; "
                             "give the number of prompt tokens to keep (>= 1), or leave it out")
        Spec.__post_init__(self)  # (it checks each field and stores a copy of logit_bias: a caller's dict stays theirs)
        if self.logit_bias is not None:
            object.__setattr__(self, "logit_bias", FrozenBias(self.logit_bias))

    def validate(self) -> None:
        if not math.isfinite(self.temperature):
            raise ValueError(f"temperature={self.temperature!r} is not finite; expected a number >= 0 (0 = greedy)")
        if not 0.0 < self.top_p <= 1.0:
            raise ValueError(f"top_p={self.top_p!r} is out of range; expected 0 < top_p <= 1")
        if any(not s for s in self.stop):
            raise ValueError("stop contains an empty string; give non-empty stop strings")
        if len(self.stop) > MAX_STOP_STRINGS:
            raise ValueError(f"stop has {len(self.stop)} strings; at most {MAX_STOP_STRINGS} are allowed")
        if len(self.stop_token_ids) > MAX_STOP_TOKEN_IDS:
            raise ValueError(
                f"stop_token_ids has {len(self.stop_token_ids)} ids; at most {MAX_STOP_TOKEN_IDS} are allowed"
            )
        if any(t < 0 for t in self.stop_token_ids):
            raise ValueError(f"stop_token_ids={list(self.stop_token_ids)!r} has a negative id; token ids are >= 0")
        low, high = REPETITION_PENALTY_RANGE
        if not low <= self.repetition_penalty <= high:  # (NaN fails it too)
            raise ValueError(f"repetition_penalty={self.repetition_penalty!r} is out of range; expected a number in "
                             f"[{low:g}, {high:g}] (1 = off)")
        if self.max_tokens is not None and self.min_tokens > self.max_tokens:
            raise ValueError(f"min_tokens={self.min_tokens} is larger than max_tokens={self.max_tokens}; expected "
                             "min_tokens <= max_tokens")
        if self.logit_bias:
            if len(self.logit_bias) > MAX_LOGIT_BIAS:
                raise ValueError(f"logit_bias has {len(self.logit_bias)} entries; at most {MAX_LOGIT_BIAS} are allowed")
            for token, bias in self.logit_bias.items():
                if token < 0:
                    raise ValueError(f"logit_bias has the negative token id {token}; token ids are >= 0")
                if not -LOGIT_BIAS_RANGE <= bias <= LOGIT_BIAS_RANGE:
                    raise ValueError(f"logit_bias[{token}]={bias!r} is out of range; expected a bias in "
                                     f"[-{LOGIT_BIAS_RANGE:g}, {LOGIT_BIAS_RANGE:g}]")
        if self.cache_salt is not None and not 1 <= len(self.cache_salt) <= MAX_CACHE_SALT_CHARS:
            raise ValueError(f"cache_salt has {len(self.cache_salt)} characters; give 1 to {MAX_CACHE_SALT_CHARS} (or "
                             "leave it out to share the prefix cache)")
        if not self.detokenize:  # (the output processor decodes every request: a 200 with text would ignore it)
            raise ValueError("detokenize=False is not supported: accelkit always decodes the output text (the token "
                             "ids are in every output as well); leave detokenize out")
        self._check_masks()
        self._check_structured()

    def _check_masks(self) -> None:
        """bad_words and allowed_token_ids (what the sampler masks)."""
        if len(self.bad_words) > MAX_BAD_WORDS:
            raise ValueError(f"bad_words has {len(self.bad_words)} words; at most {MAX_BAD_WORDS} are allowed")
        long = next((w for w in self.bad_words if not 1 <= len(w.strip()) <= MAX_BAD_WORD_CHARS), None)
        if long is not None:
            raise ValueError(f"bad_words has {long[:40]!r}{'…' if len(long) > 40 else ''} ({len(long)} characters); "
                             f"give words of 1 to {MAX_BAD_WORD_CHARS} characters, not only spaces")
        if self.allowed_token_ids is not None:
            if not self.allowed_token_ids:  # nothing could be sampled
                raise ValueError("allowed_token_ids is empty; give at least one token id, or None to allow any")
            negative = next((t for t in self.allowed_token_ids if t < 0), None)
            if negative is not None:
                raise ValueError(f"allowed_token_ids has the negative token id {negative}; token ids are >= 0")

    def _check_structured(self) -> None:
        after, deferred_by = self.structured_outputs_after_token_id, self.structured_outputs_deferred_by_token_id
        if deferred_by is not None and (after is None or after == deferred_by):
            raise ValueError(f"structured_outputs_deferred_by_token_id={deferred_by} needs a different "
                             f"structured_outputs_after_token_id (got {after}): the token that opens a reasoning "
                             "block, and the one that closes it")
        if self.structured_outputs is None:
            if after is not None:
                raise ValueError(f"structured_outputs_after_token_id={after} needs structured_outputs (it says where "
                                 "their constraint starts); give both, or neither")
            return
        # the constraint decides where the output may end: min_tokens could forbid the only token left (EOS), and
        # allowed_token_ids could leave none of the tokens it allows; either would make a row all -inf
        if self.min_tokens:
            raise ValueError(f"min_tokens={self.min_tokens} cannot be combined with structured_outputs (the "
                             "constraint decides where the output ends); leave min_tokens out")
        if self.allowed_token_ids is not None:
            raise ValueError("allowed_token_ids cannot be combined with structured_outputs (the constraint decides "
                             "which tokens are allowed); leave allowed_token_ids out")
        if self.bad_words:
            raise ValueError("bad_words cannot be combined with structured_outputs (the constraint decides which "
                             "tokens are allowed: a masked word could leave none); leave bad_words out")

    @property
    def needs_processing(self) -> bool:
        """Anything beyond temperature/top-k/top-p/seed: the sampler's slower path (read once per request, when its
        sequence is made, so that a batch without any costs nothing). include_stop_str_in_output and
        truncate_prompt_tokens are not the sampler's."""
        return bool(
            self.presence_penalty or self.frequency_penalty or self.repetition_penalty != 1.0 or self.min_p
            or self.min_tokens or self.logit_bias or self.allowed_token_ids is not None or self.logprobs is not None
            or self.structured_outputs is not None or self.bad_words
        )

    @property
    def is_greedy(self) -> bool:
        return self.temperature < GREEDY_BELOW

    def clone(self) -> SamplingParams:
        """vLLM's ``SamplingParams.clone()``: an equal copy (params are frozen: change one with :meth:`replace`)."""
        return self.replace()

    @classmethod
    def greedy(cls, max_tokens: int = 16, **kwargs: object) -> SamplingParams:
        """Argmax decoding — what the exactness tests compare against ``transformers.generate``."""
        return cls(temperature=0.0, max_tokens=max_tokens, **kwargs)  # type: ignore[arg-type]


_S = TypeVar("_S", bound=type)

#: vLLM's fields these classes do not have, and what to do instead (a script ported from vLLM names them)
_VLLM_ONLY = {
    "SamplingParams": {
        "guided_decoding": "guided_decoding is vLLM's older name for structured_outputs; give "
        "structured_outputs=StructuredOutputs(json=..., regex=..., choice=[...], grammar=...)",
        "output_kind": "LLM.generate and LLM.chat return each request's final output (vLLM's FINAL_ONLY); leave "
        "output_kind out (EngineLoop streams per-step outputs)",
        "logits_processors": "custom logits processors are not supported; use logit_bias, allowed_token_ids, "
        "bad_words or structured_outputs, or leave logits_processors out",
        "best_of": "best_of is not supported offline; generate n choices and "
        "rank them, or send best_of to the server's /v1/completions",
        "extra_args": "extra_args is not supported; leave it out",
    },
    "StructuredOutputs": {
        "backend": "the backend is the engine's, not the request's: EngineConfig(structured_outputs_backend=...) "
        "(LLM(..., structured_outputs_backend=...)); leave backend out",
    },
}


def _name_unknown_keywords(cls: _S) -> _S:
    """``cls(**kwargs)`` with a keyword it has no field for: one line naming it and the closest field (the
    dataclass's own TypeError, "__init__() got an unexpected keyword argument", named no field it has; a hunt)."""
    init = vars(cls)["__init__"]  # (the dataclass's own)
    known = [f for f in cls.__dataclass_fields__ if not f.startswith("_")]  # type: ignore[attr-defined]

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        for key in kwargs:
            if key not in cls.__dataclass_fields__:  # type: ignore[attr-defined]
                if key in _VLLM_ONLY.get(cls.__name__, {}):
                    raise TypeError(f"{cls.__name__} has no field {key!r}: {_VLLM_ONLY[cls.__name__][key]}")
                near = closest(key, known)
                hint = f"did you mean {near!r}?" if near else f"its fields are {', '.join(known)}"
                raise TypeError(f"{cls.__name__} has no field {key!r}; {hint}")
        init(self, *args, **kwargs)

    setattr(cls, "__init__", __init__)  # noqa: B010  (mypy refuses assigning to a method)
    return cls


_name_unknown_keywords(StructuredOutputs)
_name_unknown_keywords(SamplingParams)

#: vLLM's name for :class:`StructuredOutputs` (``from vllm.sampling_params import StructuredOutputsParams``)
StructuredOutputsParams = StructuredOutputs
