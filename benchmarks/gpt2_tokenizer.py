"""GPT-2's own 50,257-token byte-level BPE as a Hugging Face tokenizer folder, built without a model hub.

The structured-output benchmarks measure llguidance's mask time over a whole vocabulary, and that time depends on
the vocabulary: a BPE trained on JSON-schema text has many tokens that cross JSON's lexemes (``": "``, ``"type"``),
each of which the grammar's lexer must walk. GPT-2's vocabulary is what published structured-output comparisons use
(JSONSchemaBench among them). Its ranks ship, MIT-licensed, in the ``openai-whisper`` source distribution on PyPI
(``whisper/assets/gpt2.tiktoken``); transformers' ``TikTokenConverter`` (which needs ``tiktoken``) rebuilds the
merges from the ranks. The result encodes as GPT-2 does ("Hello world" → 15496, 995; checked below).

    pip download --no-deps --no-binary :all: openai-whisper -d /tmp/whisper   # the sdist, ~0.8 MB
    .venv/bin/pip install tiktoken
    .venv/bin/python benchmarks/gpt2_tokenizer.py /tmp/whisper/openai_whisper-*.tar.gz /tmp/gpt2-tokenizer
    .venv/bin/python benchmarks/structured_coverage.py --data … --tokenizer /tmp/gpt2-tokenizer
"""

from __future__ import annotations

import argparse
import tarfile
import tempfile
from pathlib import Path

#: GPT-2's pre-tokenizer pattern (tiktoken's "gpt2" encoding)
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
EOS = "<|endoftext|>"


def ranks_file(sdist: Path, workdir: Path) -> Path:
    """``gpt2.tiktoken`` out of the openai-whisper sdist (or the file itself when given one)."""
    if sdist.suffix == ".tiktoken":
        return sdist
    with tarfile.open(sdist) as tar:
        member = next((m for m in tar.getmembers() if m.name.endswith("whisper/assets/gpt2.tiktoken")), None)
        if member is None:
            raise SystemExit(f"error: {sdist} has no whisper/assets/gpt2.tiktoken; give openai-whisper's sdist")
        tar.extract(member, workdir, filter="data")
        return workdir / member.name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("source", type=Path, help="openai-whisper's sdist (.tar.gz) or its gpt2.tiktoken")
    ap.add_argument("out", type=Path, help="folder to write the tokenizer to")
    args = ap.parse_args()
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    with tempfile.TemporaryDirectory() as tmp:
        path = ranks_file(args.source, Path(tmp))
        backend = TikTokenConverter(vocab_file=str(path), pattern=GPT2_PATTERN, extra_special_tokens=[EOS]).converted()
    tok = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token=EOS)
    if len(tok) != 50_257 or tok.encode("Hello world") != [15496, 995]:
        raise SystemExit(f"error: the result does not encode as GPT-2 ({len(tok)} tokens, 'Hello world' → "
                         f"{tok.encode('Hello world')}); is {args.source} openai-whisper's gpt2.tiktoken?")
    tok.save_pretrained(args.out)
    print(f"wrote {args.out}: {len(tok):,} tokens, EOS {tok.eos_token_id}")


if __name__ == "__main__":
    main()
