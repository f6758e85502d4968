"""Completions' ``text_offset`` (where each token's text starts in the text it belongs to) on a real byte-level BPE
built here: the 256 bytes, a piece ``Ġc`` (a space and ``c``) and a piece holding the first two bytes of ``€``."""

import pytest

from accelkit.serve.server.logprobs import LogprobFormatter, _byte_level_table

SPECIALS = ("<unk>", "<s>", "</s>", "<pad>")


def byte_level_table() -> dict[int, str]:
    """GPT-2's bytes_to_unicode, byte → the character a byte-level BPE piece uses for it: the server's own table
    inverted (the ``tokenizers`` ByteLevel decoder built from it checks it)."""
    return {b: c for c, b in _byte_level_table().items()}


TABLE = byte_level_table()
SPACE_C = TABLE[0x20] + "c"
EURO_LEAD = TABLE[0xE2] + TABLE[0x82]


def byte(b: int) -> int:
    return len(SPECIALS) + b


LEAD, CONT = 260, byte(0xAC)  # € = e2 82 | ac


def tokenizer(*, trim_offsets: bool = False):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {tok: i for i, tok in enumerate(SPECIALS)}
    vocab.update({TABLE[b]: byte(b) for b in range(256)})
    vocab[EURO_LEAD] = LEAD
    vocab[SPACE_C] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[(TABLE[0xE2], TABLE[0x82]), (TABLE[0x20], "c")]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    if trim_offsets:  # GPT-2's and GPT-NeoX/Pythia's tokenizer.json have this post-processor
        tok.post_processor = processors.ByteLevel(trim_offsets=True)
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>")


def assert_offsets_index_the_text(fmt: LogprobFormatter, ids: list[int], offsets: list[int], text: str) -> None:
    for token, offset in zip(ids, offsets, strict=True):
        piece = fmt.token_text(token)
        if "\ufffd" not in piece:
            assert text[offset:offset + len(piece)] == piece, (piece, offset, text)


# a, the lone byte e4 (the lead of a three-byte character, never completed), -, b, e4 again, a, € in two pieces, -
IDS = [byte(ord("a")), byte(0xE4), byte(ord("-")), byte(ord("b")), byte(0xE4), byte(ord("a")), LEAD, CONT,
       byte(ord("-"))]


def test_a_byte_that_never_completes_a_character_is_a_character_before_the_token_after_it():
    """Found in review: the ``-`` after a lone e4 took e4's offset (1, not 2), as did every token released with
    held-back text; the pieces of a split character still share that character's start."""
    tok = tokenizer()
    fmt = LogprobFormatter(tok)
    text = tok.decode(IDS)
    assert text == "a\ufffd-b\ufffda€-"
    want = [0, 1, 2, 3, 4, 5, 6, 6, 7]
    assert fmt.offsets([], start=0).add(IDS, final=True) == want
    streamed, chunks = fmt.offsets([], start=0), (IDS[:1], IDS[1:2], IDS[2:7], IDS[7:])
    assert [o for i, chunk in enumerate(chunks)  # chunk by chunk, as a stream feeds them: the same offsets
            for o in streamed.add(chunk, final=i == len(chunks) - 1)] == want
    assert fmt.offsets([], start=10).add(IDS, final=True) == [10 + o for o in want]  # past an echoed prompt
    assert fmt.prompt_offsets(IDS, IDS, add_special_tokens=False) == want  # a prompt of ids, echoed
    assert_offsets_index_the_text(fmt, IDS, want, text)


# (" c€c": the two pieces of € share one span, so they share its start rather than following each other)
@pytest.mark.parametrize("prompt", ["a cc, ccc c", " c€c", "x  c\tcc"])
def test_a_string_prompts_offsets_are_contiguous_when_the_tokenizer_trims_spans(prompt):
    """Found in review: a ByteLevel post-processor with trim_offsets leaves `` c``'s space out of its span, so its
    offset was one past where its text starts, and differed from the same prompt sent as ids."""
    tok = tokenizer(trim_offsets=True)
    fmt = LogprobFormatter(tok)
    ids = tok.encode(prompt, add_special_tokens=False)
    assert tok.convert_tokens_to_ids(SPACE_C) in ids
    offsets = fmt.prompt_offsets(prompt, ids, add_special_tokens=False)
    assert offsets == fmt.prompt_offsets(ids, ids, add_special_tokens=False)
    assert_offsets_index_the_text(fmt, ids, offsets, prompt)
