"""The detokenizer's fast paths give exactly the text of ``tokenizer.decode`` and of the plain incremental
algorithm: word-level, byte-level BPE (multi-byte characters split across tokens, clean-up on and off) and
WordPiece with clean-up, on random token streams that include special tokens."""

import random

import pytest

from accelkit.serve.detokenizer import IncrementalDetokenizer, TokenDecoder
from accelkit.serve.testing import build_tokenizer

CORPUS = [
    "The quick brown fox jumps over the lazy dog. Isn't it? It's 3.14, ok!",
    "Grüße aus Köln — naïve café, déjà vu; 東京は晴れ。 Привет, мир! 🙂🚀 ✓ ½",
    "def f(x):\n    return x ** 2  # squares\n\ttabs and  double  spaces",
] * 20


def byte_level_bpe(clean_up: bool):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=420, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   clean_up_tokenization_spaces=clean_up)


def wordpiece_with_clean_up():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=300, special_tokens=["[UNK]", "[CLS]", "[SEP]"], show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", cls_token="[CLS]", sep_token="[SEP]",
                                   clean_up_tokenization_spaces=True)


TOKENIZERS = {
    "word-level": lambda: build_tokenizer(64),
    "byte-level-bpe": lambda: byte_level_bpe(clean_up=False),
    "byte-level-bpe-clean-up": lambda: byte_level_bpe(clean_up=True),
    "wordpiece-clean-up": wordpiece_with_clean_up,
}


class PlainDetokenizer:
    """The algorithm without the fast paths: two ``tokenizer.decode`` calls per token."""

    def __init__(self, tokenizer, prompt):
        self.tokenizer, self.ids = tokenizer, list(prompt[-5:])
        self.prefix_offset, self.read_offset = 0, len(self.ids)

    def add(self, new, final=False):
        self.ids.extend(new)
        prefix = self.tokenizer.decode(self.ids[self.prefix_offset : self.read_offset], skip_special_tokens=True)
        text = self.tokenizer.decode(self.ids[self.prefix_offset :], skip_special_tokens=True)
        if len(text) > len(prefix) and (final or not text.endswith("\ufffd")):
            self.prefix_offset, self.read_offset = self.read_offset, len(self.ids)
            return text[len(prefix) :]
        return ""


def streams(tokenizer, seed, num=40):
    """Random token streams: mostly ids from encoding the corpus (real neighbours), some uniformly random ids
    (split multi-byte characters, special tokens)."""
    rng = random.Random(seed)
    vocab = len(tokenizer)
    encoded = [tokenizer.encode(t, add_special_tokens=False) for t in CORPUS[:3]]
    for _ in range(num):
        src = rng.choice(encoded)
        start = rng.randrange(len(src))
        ids = src[start : start + rng.randrange(1, 40)]
        ids = [rng.randrange(vocab) if rng.random() < 0.15 else t for t in ids]
        yield ids[: rng.randrange(1, len(ids) + 1)], ids


@pytest.fixture(scope="module", params=list(TOKENIZERS))
def tokenizer(request):
    return TOKENIZERS[request.param]()


def test_the_fast_decoder_is_used_and_equals_tokenizer_decode(tokenizer):
    decoder = TokenDecoder(tokenizer)
    assert decoder.is_fast  # these are transformers' fast tokenizers: the backend path runs
    rng = random.Random(0)
    windows = [[rng.randrange(len(tokenizer)) for _ in range(rng.randrange(1, 6))] for _ in range(300)]
    # text that transformers' clean-up rewrites (" ." → ".", " n't" → "n't", ...), where it applies
    tricky = tokenizer.encode("Isn 't it ? It 's ok . Yes , do n't ! I 'm", add_special_tokens=False)
    windows += [tricky[i:j] for i in range(len(tricky)) for j in range(i + 1, min(i + 6, len(tricky)) + 1)]
    for ids in windows:
        assert decoder.decode(ids) == tokenizer.decode(ids, skip_special_tokens=True), ids
        assert decoder.decode(ids) == tokenizer.decode(ids, skip_special_tokens=True)  # memoised single tokens too


def test_incremental_text_equals_the_plain_algorithm(tokenizer):
    decoder = TokenDecoder(tokenizer)
    for prompt, output in streams(tokenizer, seed=1):
        fast, plain = IncrementalDetokenizer(decoder, prompt), PlainDetokenizer(tokenizer, prompt)
        rng = random.Random(len(output))
        i = 0
        while i < len(output):  # one token per step mostly, sometimes several (a step after a wait)
            n = 1 if rng.random() < 0.8 else rng.randrange(1, 4)
            chunk, i = output[i : i + n], i + n
            final = i >= len(output)
            assert fast.add(chunk, final=final) == plain.add(chunk, final=final), (prompt, output, i)


def test_a_tokenizer_that_decodes_its_own_way_goes_through_its_decode():
    base = build_tokenizer(64)

    class Shouting(type(base)):
        def decode(self, ids, skip_special_tokens=False, **kwargs):
            return super().decode(ids, skip_special_tokens=skip_special_tokens, **kwargs).upper()

    tokenizer = Shouting(tokenizer_object=base.backend_tokenizer, unk_token="<unk>", eos_token="</s>")
    decoder = TokenDecoder(tokenizer)
    assert not decoder.is_fast
    assert decoder.decode([10, 11]) == "W10 W11" and decoder.decode([12]) == "W12"
    detok = IncrementalDetokenizer(decoder, [4, 5])
    assert detok.add([6]) == " W6" and detok.add([7], final=True) == " W7"
