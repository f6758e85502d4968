"""Prompts to send: ``random`` (length-controlled word prompts), ``sharegpt:PATH`` and ``jsonl:PATH``.

No tokenizer is used (the load tester must work against any server without its tokenizer), so lengths
here are *targets*: a random prompt of L words, built from words that are single tokens in common BPE
vocabularies, is about L tokens; a ShareGPT reply's token count is estimated as ceil(chars / 4). The
lengths actually sent are what the server reports in ``usage.prompt_tokens`` / ``completion_tokens``,
and the metrics use those.
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelkit.core import UserError

__all__ = ["SampleRequest", "jsonl_requests", "load_dataset", "parse_dataset", "random_requests", "sharegpt_requests"]

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
    if not file.is_file():
        raise UserError(f"--dataset {spec}: no such file {str(file)!r}")
    return kind, file


def load_dataset(
    spec: str, num_prompts: int, *, input_len: int = 1024, output_len: int = 128, range_ratio: float = 0.0,
    seed: int = 0,
) -> tuple[list[SampleRequest], dict[str, Any]]:
    """``num_prompts`` requests from the dataset ``spec`` and a description of what was drawn."""
    kind, path = parse_dataset(spec)
    rng = random.Random(seed)
    info: dict[str, Any] = {"dataset": spec, "kind": kind}
    if kind == "random":
        requests = random_requests(num_prompts, input_len, output_len, range_ratio, rng)
        info["input_len_unit"] = "words (one token or more each, by the server's tokenizer)"
        info.update(random_input_len=input_len, random_output_len=output_len, random_range_ratio=range_ratio)
        return requests, info
    assert path is not None
    pool = sharegpt_requests(path, rng) if kind == "sharegpt" else jsonl_requests(path, output_len)
    if not pool:
        raise UserError(f"--dataset {spec}: no usable prompts in the file")
    info["input_len_unit"] = f"estimated tokens (chars / {RATIO_CHARS_PER_TOKEN})"
    info["num_available"] = len(pool)
    if kind == "sharegpt":
        rng.shuffle(pool)  # vLLM shuffles with the seed and takes the first N
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


def sharegpt_requests(path: Path, rng: random.Random | None = None) -> list[SampleRequest]:
    """ShareGPT JSON: a list of ``{"conversations": [{"from": "human"|"gpt", "value": str}, …]}``.
    The prompt is the first human turn, max_tokens the estimated length of the gpt reply after it;
    entries with no such pair are skipped (as vLLM skips conversations under two turns). A malformed
    file raises UserError naming the entry and field."""
    where = f"sharegpt:{path}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise UserError(f"{where}: not valid JSON (line {exc.lineno}: {exc.msg})") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{where}: cannot read the file ({exc})") from None
    if not isinstance(data, list):
        raise UserError(f"{where}: expected a JSON list of conversations, got {type(data).__name__}")
    requests = []
    for i, entry in enumerate(data):
        if not isinstance(entry, dict) or "conversations" not in entry:
            raise UserError(f"{where}: entry {i} has no 'conversations' field")
        turns = entry["conversations"]
        if not isinstance(turns, list):
            raise UserError(f"{where}: entry {i} field 'conversations' must be a list of turns")
        for j, turn in enumerate(turns):
            if not isinstance(turn, dict) or not isinstance(turn.get("from"), str) or not isinstance(turn.get("value"), str):
                raise UserError(f"{where}: entry {i} conversations[{j}] needs string fields 'from' and 'value'")
        pair = _first_exchange(turns)
        if pair is not None:
            prompt, reply = pair
            requests.append(SampleRequest(prompt=prompt, input_len=estimate_tokens(prompt), output_len=estimate_tokens(reply)))
    return requests


def _first_exchange(turns: list[dict[str, str]]) -> tuple[str, str] | None:
    for j in range(len(turns) - 1):
        if turns[j]["from"] == "human" and turns[j + 1]["from"] == "gpt" and turns[j]["value"].strip() and turns[j + 1]["value"].strip():
            return turns[j]["value"], turns[j + 1]["value"]
    return None


def jsonl_requests(path: Path, default_output_len: int) -> list[SampleRequest]:
    """One JSON object per line: ``{"prompt": str, "output_len": int (optional, else the default)}``.
    Blank lines are skipped; a bad line raises UserError naming the line number and field."""
    where = f"jsonl:{path}"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise UserError(f"{where}: cannot read the file ({exc})") from None
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
