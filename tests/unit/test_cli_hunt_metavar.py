"""A flag read by a parse function (vLLM's spellings taken as well) showed ``<str>`` in --help where its field holds
fixed choices: it shows them."""

from __future__ import annotations

from typing import Literal

from accelkit.cli.spec_options import _metavar


def test_a_parsed_flag_over_fixed_choices_shows_them():
    assert _metavar("kv_cache_dtype", Literal["auto", "fp8", "int8"]) == "<auto|fp8|int8>"
    assert _metavar("quantization", Literal["fp8"] | None) == "<fp8>"
    assert _metavar("max_model_len", int | None) == "<int>"  # (the others as before)
