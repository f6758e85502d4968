"""A loadtest option error names the flag the user typed, not the LoadTestConfig field behind it: `--timeout inf`
said `timeout_s=inf is out of range`, `--burstiness 0` `burstiness=0.0 …` (while `--request-rate -1`, checked by its
parse function, named its flag)."""

from __future__ import annotations

import re

import pytest

from accelkit.cli.app import main
from accelkit.cli.loadtest import FLAGS
from accelkit.cli.spec_options import in_flag_words

BASE = ("loadtest", "--base-url", "http://127.0.0.1:9", "--model", "m", "--no-save")


def _error(capsys, *args: str) -> str:
    with pytest.raises(SystemExit) as info:
        main([*BASE, *args])
    assert info.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


@pytest.mark.parametrize(("args", "expected"), [
    (("--timeout", "inf"), "error: --timeout inf is out of range; expected a finite number of seconds > 0"),
    (("--warmup-timeout", "inf"), "error: --warmup-timeout inf is out of range"),
    (("--burstiness", "0"), "error: --burstiness 0.0 is out of range; expected a finite number > 0"),
    (("--burstiness", "inf"), "error: --burstiness inf is out of range"),
    (("--random-range-ratio", "1.5"), "error: --random-range-ratio 1.5 is out of range; expected 0 <= x < 1"),
    (("--sweep-rates", "1,2,1"), "error: --sweep-rates item 3 = 1.0 repeats --sweep-rates item 1 = 1.0"),
    (("--model", " "), "error: --model is empty"),
    (("--base-url", "http://h:99999"), "error: --base-url 'http://h:99999' is not valid: the port must be"),
    (("--num-prompts", "1000000", "--random-input-len", "1000000"),
     "error: (--num-prompts 1000000 + --warmup 1) × --random-input-len 1000000 × (1 + --random-range-ratio 0) = "
     "1,000,001,000,000 words"),
    (("--request-rate", "-1"), "error: --request-rate '-1' is not valid"),
    # a rate whose schedule runs past 7 days: its first gap alone once kept the command waiting without a word
    (("--request-rate", "2.6e-235"), "error: --request-rate 2.6e-235 spreads 1000 requests over"),
    (("--sweep-rates", "1,0.0001"), "error: --sweep-rates item 2 = 0.0001 spreads 1000 requests over 116 days"),
    # the user's own value is quoted back as typed: 'model=' and 'seed=' inside it were turned into flags
    (("--base-url", "ftp://h/?model=x&seed=3"), "error: --base-url 'ftp://h/?model=x&seed=3' is not valid"),
])
def test_each_error_names_its_flag(capsys, args, expected):
    line = _error(capsys, *args)
    assert line.startswith(expected), line
    fields = [f for f in FLAGS if "_" in f]
    assert not re.search(rf"\b({'|'.join(fields)})\b", line), line  # no config field name is left


def test_in_flag_words():
    flags = {"timeout_s": "--timeout", "model": "--model", "seed": "--seed", "percentiles": "--percentiles"}
    assert in_flag_words("timeout_s=inf is out of range", flags) == "--timeout inf is out of range"
    assert in_flag_words("percentiles[0]=0.0 is out of range", flags) == "--percentiles item 1 = 0.0 is out of range"
    assert in_flag_words("model is empty; give the model's name", flags) == "--model is empty; give the model's name"
    # an English word that happens to be a field is left alone inside a sentence; so are flags and longer names
    assert in_flag_words("the seed of the model", flags) == "the seed of the model"
    assert in_flag_words("--timeout and timeout_sx stay", flags) == "--timeout and timeout_sx stay"
