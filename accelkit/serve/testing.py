"""Fixtures for tests and benchmarks: tiny models and a tokenizer built locally (nothing is downloaded).

``save_tiny_model(dir, "tiny-llama")`` writes a random-init transformers model with ``save_pretrained``
plus a word-level tokenizer whose vocabulary matches it; ``train_tiny_model`` first fits the model for a
few hundred steps on synthetic Markov-chain text, so that its predictions are peaked (what KV-cache
quantization quality is measured on). The HTTP server tests reuse these.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from accelkit.models import get_preset
from accelkit.models.build import _CLASSES, hf_config
from accelkit.serve.sampling import SamplingParams

SPECIAL_TOKENS = ("<unk>", "<s>", "</s>", "<pad>")  # ids 0..3: bos=1, eos=2 as the tiny presets say


def word(i: int) -> str:
    return f"w{i}"


def build_tokenizer(vocab_size: int = 512) -> Any:
    """A word-level tokenizer: ``<unk> <s> </s> <pad> w4 w5 …``; text is words separated by spaces."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({word(i): i for i in range(len(SPECIAL_TOKENS), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##", cleanup=False)  # joins words with spaces
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers leaves __init__ untyped
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        chat_template=(
            "{% for m in messages %}{{ m['role'] }} {{ m['content'] }} {% endfor %}"
            "{% if add_generation_prompt %}assistant{% endif %}"
        ),
    )


def hf_model(preset: str = "tiny-llama", *, seed: int = 0, **overrides: Any) -> Any:
    """A random-init transformers model for an accelkit preset (``overrides`` go to its config)."""
    import torch
    import transformers

    spec = get_preset(preset)
    config = hf_config(spec, **overrides)
    if config.eos_token_id is None:
        config.bos_token_id, config.eos_token_id = 1, 2
    torch.manual_seed(seed)
    model = getattr(transformers, _CLASSES[spec.family][1])(config)
    model.generation_config.bos_token_id = config.bos_token_id
    model.generation_config.eos_token_id = config.eos_token_id
    model.generation_config.pad_token_id = 3
    return model.eval()


def save_tiny_model(
    path: str | Path, preset: str = "tiny-llama", *, seed: int = 0, max_shard_size: str | None = None, **overrides: Any
) -> Path:
    """Save a random-init model + matching tokenizer to ``path`` (a Hugging Face-format directory)."""
    path = Path(path)
    model = hf_model(preset, seed=seed, **overrides)
    save_model_dir(model, path, max_shard_size=max_shard_size)
    return path


def save_model_dir(model: Any, path: str | Path, *, max_shard_size: str | None = None) -> Path:
    path = Path(path)
    kwargs = {"max_shard_size": max_shard_size} if max_shard_size else {}
    model.save_pretrained(path, **kwargs)
    build_tokenizer(model.config.vocab_size).save_pretrained(path)
    return path


def markov_corpus(
    num_sequences: int, length: int, *, vocab_size: int = 512, seed: int = 0, p_main: float = 0.9
) -> list[list[int]]:
    """Token sequences from a fixed random Markov chain: each word's next word is one fixed successor with
    probability ``p_main`` and one of three others otherwise — learnable, so a trained model is peaked."""
    rng = random.Random(1234)  # the chain itself is fixed; ``seed`` only picks the walks
    first = len(SPECIAL_TOKENS)
    words = range(first, vocab_size)
    succ = {w: [rng.randrange(first, vocab_size) for _ in range(4)] for w in words}
    walk = random.Random(seed)
    out = []
    for _ in range(num_sequences):
        w = walk.randrange(first, vocab_size)
        seq = [w]
        for _ in range(length - 1):
            nxt = succ[w]
            w = nxt[0] if walk.random() < p_main else walk.choice(nxt[1:])
            seq.append(w)
        out.append(seq)
    return out


def train_tiny_model(
    path: str | Path, preset: str = "tiny-llama", *, steps: int = 300, seed: int = 0, batch_size: int = 16,
    seq_len: int = 64, lr: float = 3e-3, **overrides: Any,
) -> Path:
    """Fit a tiny model on :func:`markov_corpus` for ``steps`` AdamW steps, then save it with its tokenizer."""
    import torch

    model = hf_model(preset, seed=seed, **overrides).train()
    data = torch.tensor(markov_corpus(steps * batch_size, seq_len, vocab_size=model.config.vocab_size, seed=seed))
    opt = torch.optim.AdamW(model.parameters(), lr=lr)
    for i in range(steps):
        batch = data[i * batch_size : (i + 1) * batch_size]
        loss = model(input_ids=batch, labels=batch).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    return save_model_dir(model, path)


def random_prompts(num: int, *, min_len: int, max_len: int, vocab_size: int = 512, seed: int = 0) -> list[list[int]]:
    """Prompts of uniformly random lengths over the word ids (no special tokens)."""
    rng = random.Random(seed)
    first = len(SPECIAL_TOKENS)
    return [[rng.randrange(first, vocab_size) for _ in range(rng.randint(min_len, max_len))] for _ in range(num)]


def hf_greedy(model: Any, prompt_ids: list[int], max_new_tokens: int) -> list[int]:
    """The reference: ``transformers`` greedy ``generate`` on one unpadded prompt → new token ids."""
    import torch

    with torch.inference_mode():
        out = model.generate(
            torch.tensor([prompt_ids]), attention_mask=torch.ones(1, len(prompt_ids), dtype=torch.long),
            do_sample=False, max_new_tokens=max_new_tokens,
        )
    tokens: list[int] = out[0, len(prompt_ids) :].tolist()
    return tokens


def forced_top1_agreement(engine: Any, prompts: list[list[int]], continuations: list[list[int]]) -> tuple[int, int]:
    """Teacher-forced decoding through ``engine``'s real steps: every request is fed the tokens of its
    reference continuation, and at each *decode* step (the first token comes from the prefill) the engine's
    own argmax is compared with the reference token. Returns ``(num_agreeing, num_decode_steps)``.

    Forcing keeps the comparison per step: one early disagreement does not make every later step differ.
    """
    runner = engine.runner
    real_sampler = runner.sampler
    forced: dict[int, list[int]] = {}
    position: dict[int, int] = {}
    counts = [0, 0]

    class ForcedSampler:  # the runner's sampler interface: launch() → device tensor of ids, forget()
        def forget(self, seq_id: int) -> None:
            real_sampler.forget(seq_id)

        def launch(self, logits: Any, params: Any, seq_ids: list[int], extras: Any = None, *, scratch: bool = False) -> Any:
            import torch

            top1 = logits.argmax(dim=-1).tolist()
            out = []
            for seq_id, token in zip(seq_ids, top1, strict=True):
                i = position[seq_id]
                ref = forced[seq_id]
                if i > 0:
                    counts[0] += int(token == ref[i])
                    counts[1] += 1
                position[seq_id] = i + 1
                out.append(ref[i])
            return torch.tensor(out)

    runner.sampler = ForcedSampler()
    try:
        for prompt, cont in zip(prompts, continuations, strict=True):
            seq = engine.make_request(prompt, SamplingParams.greedy(len(cont), ignore_eos=True))
            forced[seq.seq_id], position[seq.seq_id] = cont, 0
            engine.add_sequence(seq)
        while engine.has_unfinished_requests():
            engine.step()
    finally:
        runner.sampler = real_sampler
    return counts[0], counts[1]


def _structured_corpus(num_lines: int = 400, seed: int = 0) -> list[str]:
    """JSON-ish lines (keys, numbers, quotes, braces, escapes) with some non-ASCII, for the byte-level BPE below."""
    rng = random.Random(seed)
    words = ["name", "age", "city", "value", "items", "id", "ok", "true", "false", "null", "café", "中文", "naïve",
             "data", "type", "text", "é", "中", "x", "y"]
    lines = []
    for _ in range(num_lines):
        fields = []
        for _ in range(rng.randint(1, 4)):
            key = rng.choice(words)
            kind = rng.random()
            if kind < 0.3:
                value = str(rng.randint(-999, 99999))
            elif kind < 0.4:
                value = f"{rng.uniform(-10, 10):.{rng.randint(1, 4)}f}"
            elif kind < 0.5:
                value = rng.choice(["true", "false", "null", "[]", "{}", '"\\n"', '"\\"q\\""'])
            elif kind < 0.6:
                value = "[" + ", ".join(str(rng.randint(0, 9)) for _ in range(rng.randint(1, 3))) + "]"
            else:
                value = '"' + " ".join(rng.choice(words) for _ in range(rng.randint(1, 3))) + '"'
            fields.append(f'"{key}": {value}')
        sep = rng.choice([", ", ",", ",\n  "])
        lines.append("{" + sep.join(fields) + "}")
    return lines


def build_bytelevel_tokenizer(vocab_size: int = 512, corpus: Iterable[str] | None = None) -> Any:
    """A byte-level BPE (GPT-2 / Llama 3 style: 256-byte initial alphabet, ByteLevel pre-tokenizer and decoder),
    trained in-process on ``corpus`` (default: JSON-ish text with non-ASCII (é, 中), so multi-byte tokens exist —
    some end mid-character); at most ``vocab_size`` tokens (fewer when the corpus has fewer merges).
    Special tokens ``<unk> <s> </s> <pad>`` are ids 0..3 as in :func:`build_tokenizer`; eos is ``</s>``.
    Deterministic (the corpus is seeded; training breaks ties by order)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_structured_corpus() if corpus is None else corpus, trainer)
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers leaves __init__ untyped
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>",
    )


def build_euro_splitting_tokenizer() -> Any:
    """A byte-level BPE whose vocabulary holds ``€`` (e2 82 ac) only as the piece e2 82 (id 260) plus the byte ac:
    specials 0–3, the 256 bytes 4–259 (byte b is id 4 + b), and that one merge — a character split across tokens,
    on demand. Its chat template writes the messages' contents one after another."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    # lazy: the server package's import brings in FastAPI; its byte table is GPT-2's bytes_to_unicode
    from accelkit.serve.server.logprobs import _byte_level_table

    table = {b: c for c, b in _byte_level_table().items()}  # byte → the character a byte-level piece uses for it
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    vocab.update({table[b]: len(SPECIAL_TOKENS) + b for b in range(256)})
    vocab[table[0xE2] + table[0x82]] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(table[0xE2], table[0x82])]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers leaves __init__ untyped
        tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>", pad_token="<pad>",
        chat_template="{% for m in messages %}{{ m['content'] }}{% endfor %}",
    )


def save_bytelevel_model(path: str | Path, *, seed: int = 0, added_tokens: Sequence[str] = (),
                         special_tokens: Sequence[str] = (), **overrides: Any) -> Path:
    """:func:`save_tiny_model` with :func:`build_bytelevel_tokenizer` (and a plain chat template) in place of the
    word-level tokenizer: a model structured outputs can guide (they need a byte-level or SentencePiece decoder).
    ``added_tokens``: ordinary added tokens (ids 512 on, not special: in the text), as Qwen's ``<tool_call>`` and
    ``</tool_call>`` are; ``special_tokens``: special ones after them (left out of the text unless a request keeps
    special tokens), as Mistral's ``[TOOL_CALLS]`` is; the model's vocabulary grows to hold them. ``overrides`` go
    to the model's config (``head_dim=64`` with ``num_attention_heads=1``: a shape vLLM's CPU attention runs)."""
    from tokenizers import AddedToken

    extra = len(added_tokens) + len(special_tokens)
    if extra:
        overrides["vocab_size"] = 512 + extra
    path = save_tiny_model(path, seed=seed, **overrides)
    tokenizer = build_bytelevel_tokenizer(vocab_size=512)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in added_tokens])
    tokenizer.add_tokens([AddedToken(t, special=True, normalized=False) for t in special_tokens], special_tokens=True)
    tokenizer.chat_template = ("{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}"
                               "{% if add_generation_prompt %}assistant:{% endif %}")
    tokenizer.save_pretrained(path)  # replaces the word-level tokenizer
    return path


# ---- hostile structured-output specs (issue #28): each must compile or be refused within the compile limit ------

def nested_properties(depth: int) -> dict[str, Any]:
    """An object schema ``depth`` levels deep, one property per level (a recursion-depth probe)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


def optional_levels(levels: int, width: int = 4) -> dict[str, Any]:
    """The shape of the 2.3 KB JSONSchemaBench schema that once became a 20-million-character regex: objects of
    optional properties, nested ``levels`` deep."""
    schema: dict[str, Any] = {"type": "string", "maxLength": 20}
    for level in range(levels):
        props = {f"p{level}_{i}": schema if i == 0 else {"type": ["integer", "null"]} for i in range(width)}
        schema = {"type": "object", "properties": props}
    return schema


def wide_optional(levels: int, width: int) -> dict[str, Any]:
    """Like :func:`optional_levels`, ``width`` properties a level, each optional and of a union type: 2–9 KB."""
    schema: dict[str, Any] = {"type": "string"}
    for level in range(levels):
        schema = {"type": "object", "properties": {f"field_{level}_{i}": schema if i == 0 else
                                                   {"type": ["string", "integer", "null"], "maxLength": 40}
                                                   for i in range(width)}}
    return schema


HOSTILE_SPECS: dict[str, dict[str, Any]] = {  # name → StructuredOutputs(**spec)
    "dfa-blowup": {"regex": "(a|b)*a(a|b){22}"},
    "counted-32-bit": {"regex": "a{4294967295}"},
    "counted-100k": {"regex": "a{100000}"},
    "any-char-then-x": {"regex": "[\\x00-\\U0010ffff]x"},
    "matches-nothing": {"regex": "[^\\x00-\\U0010ffff]"},
    "nested-repeats": {"regex": "(x{1,1000}){1,1000}"},
    "unanchored-pattern": {"json": {"type": "string", "pattern": "a.{12}"}},
    "properties-450-deep": {"json": nested_properties(450)},
    "optional-8-levels": {"json": optional_levels(8)},
    "256-long-choices": {"choice": [f"{i:03d}" + "x" * 197 for i in range(256)]},
}


def hostile_request_fields() -> list[dict[str, Any]]:
    """The request fields (each under the name a client would use) of every hostile spec above, six 31-character
    DFA-blow-up regexes at once, non-finite JSON, and three 2–9 KB all-optional schemas as ``response_format``."""
    out: list[dict[str, Any]] = [{"structured_outputs": spec} for spec in HOSTILE_SPECS.values()]
    out += [{"guided_regex": "(a|b)*a(a|b){22}" + "c" * i} for i in range(6)]
    out += [{"guided_json": '{"enum": [NaN, Infinity]}'}, {"guided_json": nested_properties(450)}]
    for levels, width in ((8, 4), (6, 12), (4, 30)):
        out.append({"response_format": {"type": "json_schema",
                                        "json_schema": {"name": "s", "schema": wide_optional(levels, width)}}})
    out.append({"guided_json": optional_levels(8)})
    return out
