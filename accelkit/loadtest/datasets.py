"""Prompts to send: ``random`` (length-controlled word prompts), ``sharegpt:PATH`` and ``jsonl:PATH``.

No tokenizer is used (the load tester must work against any server without its tokenizer), so lengths
here are *targets*: a random prompt of L words, built from words that are single tokens in common BPE
vocabularies, is about L tokens; a ShareGPT prompt's or reply's token count is estimated as ceil(chars / 4)
(for vLLM's length filter and max_tokens). The lengths actually sent are what the server reports in
``usage.prompt_tokens`` / ``completion_tokens``, and the metrics use those.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelkit.core import UserError

__all__ = ["SampleRequest", "jsonl_requests", "load_dataset", "parse_dataset", "random_requests", "sharegpt_note",
           "sharegpt_requests", "sharegpt_skip_reason"]

#: common English words; each is one token (with its leading space) in the GPT-2/Llama/Qwen vocabularies
WORDS = (
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from", "his",
    "her", "they", "have", "had", "not", "but", "are", "this", "which", "one", "all", "were", "when", "we",
    "there", "can", "an", "been", "has", "more", "their", "if", "will", "who", "would", "so", "out", "up",
    "into", "no", "time", "some", "them", "other", "than", "then", "its", "only", "new", "about", "may",
    "first", "also", "after", "over", "two", "most", "made", "like", "people", "any", "very", "well", "just",
    "where", "back", "work", "way", "even", "because", "good", "long", "great", "own", "day", "such", "old",
    "world", "little", "year", "still", "last", "never", "man", "place", "life", "part", "under", "same",
    "small", "right", "home", "house", "water", "room", "city", "land", "river", "music", "light", "green",
    "black", "white", "red", "blue", "open", "close", "early", "night", "morning", "paper", "table", "window",
    "garden", "market", "school", "church", "road", "bridge", "train", "ship", "horse", "tree", "stone",
    "fire", "field", "money", "power", "story", "game", "voice", "heart", "mind", "hand", "head", "face",
    "door", "wall", "line", "book", "word", "name", "week", "month",
)

RATIO_CHARS_PER_TOKEN = 4  # OpenAI's rule of thumb for English text, used only where no count exists


@dataclass(frozen=True, slots=True)
class SampleRequest:
    """One prompt and how many tokens to ask for."""

    prompt: str
    input_len: int  #: target prompt length (random: words; others: chars/4 estimate)
    output_len: int  #: max_tokens sent


def parse_dataset(spec: str) -> tuple[str, Path | None]:
    """'random' → ('random', None); 'sharegpt:PATH' / 'jsonl:PATH' → (kind, path). Bad specs raise
    UserError naming --dataset."""
    if spec == "random":
        return "random", None
    kind, sep, path = spec.partition(":")
    if not sep or kind not in ("sharegpt", "jsonl") or not path:
        raise UserError(f"--dataset {spec!r} is not valid; use random, sharegpt:PATH or jsonl:PATH")
    file = Path(path).expanduser()
    if file.is_dir():
        raise UserError(f"--dataset {spec}: {str(file)!r} is a directory; give the {kind} file in it")
    if not file.exists():  # a pipe (jsonl:<(head -100 big.jsonl)) is read as a file is
        raise UserError(f"--dataset {spec}: no such file {str(file)!r}")
    return kind, file


def load_dataset(
    spec: str, num_prompts: int, *, input_len: int = 1024, output_len: int = 128, range_ratio: float = 0.0,
    seed: int = 0, sharegpt_output_len: int | None = None,
) -> tuple[list[SampleRequest], dict[str, Any]]:
    """``num_prompts`` requests from the dataset ``spec`` and a description of what was drawn (ShareGPT: also what
    was skipped, :func:`sharegpt_requests`; ``sharegpt_output_len`` fixes its max_tokens)."""
    kind, path = parse_dataset(spec)
    rng = random.Random(seed)
    info: dict[str, Any] = {"dataset": spec, "kind": kind}
    if kind == "random":
        requests = random_requests(num_prompts, input_len, output_len, range_ratio, rng)
        info["input_len_unit"] = "words (one token or more each, by the server's tokenizer)"
        info.update(random_input_len=input_len, random_output_len=output_len, random_range_ratio=range_ratio)
        return requests, info
    assert path is not None
    if kind == "sharegpt":  # shuffled with the seed, first N taken (vLLM's order)
        pool, selection = sharegpt_requests(path, rng, output_len=sharegpt_output_len)
        info.update(selection)
    else:
        pool = jsonl_requests(path, output_len)
    if not pool:
        raise UserError(f"--dataset {spec}: no usable prompts in the file" + (f": {_skipped(info)}" if kind == "sharegpt" else ""))
    info["input_len_unit"] = f"estimated tokens (chars / {RATIO_CHARS_PER_TOKEN})"
    info["num_available"] = len(pool)
    if len(pool) < num_prompts:
        info["oversampled"] = True  # cycle through the file again: same prompts sent more than once
    return [pool[i % len(pool)] for i in range(num_prompts)], info


def random_requests(
    num_prompts: int, input_len: int, output_len: int, range_ratio: float, rng: random.Random,
) -> list[SampleRequest]:
    """Lengths uniform over the integers in [floor(L·(1−x)), ceil(L·(1+x))] (vLLM's random dataset),
    at least 1; prompts are random words so that no two requests share a cacheable prefix."""
    if not 0.0 <= range_ratio < 1.0:
        raise ValueError(f"random_range_ratio={range_ratio!r} is out of range; expected 0 <= x < 1")

    def bounds(length: int) -> tuple[int, int]:
        return max(1, math.floor(length * (1 - range_ratio))), max(1, math.ceil(length * (1 + range_ratio)))

    in_lo, in_hi = bounds(input_len)
    out_lo, out_hi = bounds(output_len)
    requests = []
    for _ in range(num_prompts):
        n_in = rng.randint(in_lo, in_hi)
        n_out = rng.randint(out_lo, out_hi)
        prompt = " ".join(rng.choice(WORDS) for _ in range(n_in))
        requests.append(SampleRequest(prompt=prompt, input_len=n_in, output_len=n_out))
    return requests


def estimate_tokens(text: str) -> int:
    return max(1, math.ceil(len(text) / RATIO_CHARS_PER_TOKEN))


#: vLLM's ShareGPT filter (``is_valid_sequence`` in vllm/benchmarks/datasets): a pair is kept when its prompt and
#: its output have at least ``SHAREGPT_MIN_TOKENS`` tokens each (the output's minimum is waived when the output length
#: is fixed), the prompt at most ``SHAREGPT_MAX_PROMPT_TOKENS`` and both together at most ``SHAREGPT_MAX_TOTAL_TOKENS``
SHAREGPT_MIN_TOKENS = 4
SHAREGPT_MAX_PROMPT_TOKENS = 1024
SHAREGPT_MAX_TOTAL_TOKENS = 2048
#: why a conversation is skipped, in the order the checks run (the first that applies is counted)
SHAREGPT_SKIP_REASONS = ("under_2_turns", "prompt_under_4_tokens", "output_under_4_tokens", "prompt_over_1024_tokens",
                         "total_over_2048_tokens")

SHAREGPT_SKIP_RULE = (
    f"as vLLM's ShareGPT dataset: prompt = conversations[0], completion = conversations[1]; skipped when under 2 turns, "
    f"a prompt or completion under {SHAREGPT_MIN_TOKENS} tokens (no completion minimum with --sharegpt-output-len), a "
    f"prompt over {SHAREGPT_MAX_PROMPT_TOKENS} or prompt + output over {SHAREGPT_MAX_TOTAL_TOKENS} tokens; tokens "
    f"estimated as chars / {RATIO_CHARS_PER_TOKEN}"
)


def sharegpt_skip_reason(prompt_len: int, output_len: int, *, fixed_output_len: bool = False) -> str | None:
    """Why vLLM's ShareGPT dataset drops a (prompt, output) pair of these token lengths, or None when it keeps it."""
    if prompt_len < SHAREGPT_MIN_TOKENS:
        return "prompt_under_4_tokens"
    if not fixed_output_len and output_len < SHAREGPT_MIN_TOKENS:
        return "output_under_4_tokens"
    if prompt_len > SHAREGPT_MAX_PROMPT_TOKENS:
        return "prompt_over_1024_tokens"
    if prompt_len + output_len > SHAREGPT_MAX_TOTAL_TOKENS:
        return "total_over_2048_tokens"
    return None


def sharegpt_requests(
    path: Path, rng: random.Random, *, output_len: int | None = None,
) -> tuple[list[SampleRequest], dict[str, Any]]:
    """ShareGPT JSON (a list of ``{"conversations": [{"from": …, "value": str}, …]}``), selected as `vllm bench
    serve` selects it: conversations with fewer than two turns are dropped, the rest shuffled with ``rng`` (vLLM seeds
    Python's ``random`` with the same seed: the same order); each gives ``conversations[0]`` as the prompt and
    ``conversations[1]`` as the reference completion, whose length is max_tokens unless ``output_len`` fixes it; a
    pair outside vLLM's length limits (:func:`sharegpt_skip_reason`) is skipped. Token lengths are estimated as
    chars / 4 (no tokenizer). Returns the usable requests in shuffled order and what was skipped, by reason. A
    malformed file raises UserError naming the entry and field."""
    conversations = _sharegpt_conversations(path)
    skipped = dict.fromkeys(SHAREGPT_SKIP_REASONS, 0)
    paired = [turns for turns in conversations if len(turns) >= 2]
    skipped["under_2_turns"] = len(conversations) - len(paired)
    rng.shuffle(paired)
    requests = []
    for turns in paired:
        prompt, completion = turns[0]["value"], turns[1]["value"]
        prompt_len = estimate_tokens(prompt)
        max_tokens = estimate_tokens(completion) if output_len is None else output_len
        reason = sharegpt_skip_reason(prompt_len, max_tokens, fixed_output_len=output_len is not None)
        if reason is not None:
            skipped[reason] += 1
            continue
        requests.append(SampleRequest(prompt=prompt, input_len=prompt_len, output_len=max_tokens))
    info = {"num_conversations": len(conversations), "num_skipped": sum(skipped.values()), "skipped": skipped,
            "skip_rule": SHAREGPT_SKIP_RULE,
            "output_len": "the reference reply's estimated length" if output_len is None else output_len}
    return requests, info


def sharegpt_note(spec: str, info: dict[str, Any]) -> str | None:
    """The line that says how many conversations of a ShareGPT file were skipped and why (None when none were)."""
    if not info.get("num_skipped"):
        return None
    return f"note: --dataset {spec}: {_skipped(info)}; {info['num_available']} usable"


def _skipped(info: dict[str, Any]) -> str:
    why = ", ".join(f"{n} {reason.replace('_', ' ')}" for reason, n in info["skipped"].items() if n)
    return (f"skipped {info['num_skipped']} of {info['num_conversations']} conversations as `vllm bench serve` skips "
            f"them ({why or 'none'}; token lengths estimated as chars / {RATIO_CHARS_PER_TOKEN})")


def _sharegpt_conversations(path: Path) -> list[list[dict[str, Any]]]:
    """Every entry's turns; the two turns a pair is made of must carry a string 'value'."""
    where = f"sharegpt:{path}"
    try:
        data = json.loads(path.read_text(encoding="utf-8-sig"))  # -sig: a BOM (Windows editors) is not JSON
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{where}: cannot read the file ({exc})") from None
    if not isinstance(data, list):
        raise UserError(f"{where}: expected a JSON list of conversations, got {type(data).__name__}")
    conversations = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or "conversations" not in entry:
            raise UserError(f"{where}: entry {i} has no 'conversations' field")
        turns = entry["conversations"]
        if not isinstance(turns, list):
            raise UserError(f"{where}: entry {i} field 'conversations' must be a list of turns")
        for j, turn in enumerate(turns[:2]):  # vLLM reads these two only
            if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
                raise UserError(f"{where}: entry {i} conversations[{j}] needs a string field 'value'")
        conversations.append(turns)
    return conversations


def jsonl_requests(path: Path, default_output_len: int) -> list[SampleRequest]:
    """One JSON object per line: ``{"prompt": str, "output_len": int (optional, else the default)}``.
    Blank lines are skipped; a bad line raises UserError naming the line number and field."""
    where = f"jsonl:{path}"
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: a BOM (Windows editors) is not JSON
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{where}: cannot read the file ({exc})") from None
    # JSON Lines ends a line at \n (\r\n too) only: str.splitlines() also split at U+2028, U+2029 and U+0085, which JSON
    # allows raw inside a string (json.dumps(..., ensure_ascii=False) writes them), and refused a valid line
    lines = [line.removesuffix("\r") for line in text.split("\n")]
    requests = []
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError as exc:
            raise UserError(f"{where} line {lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(obj, dict):
            raise UserError(f"{where} line {lineno}: expected an object {{\"prompt\": …}}")
        prompt = obj.get("prompt")
        if not isinstance(prompt, str) or not prompt.strip():
            raise UserError(f"{where} line {lineno}: field 'prompt' must be a non-empty string")
        output_len = obj.get("output_len", default_output_len)
        if isinstance(output_len, bool) or not isinstance(output_len, int) or output_len < 1:
            raise UserError(f"{where} line {lineno}: field 'output_len' must be an integer >= 1, got {output_len!r}")
        requests.append(SampleRequest(prompt=prompt, input_len=estimate_tokens(prompt), output_len=output_len))
    return requests
