"""Integer fields take whole floats (`"max_tokens": 4.0`), as vLLM does — up to 2**53, where a whole float is the
integer it reads as. `"n": 1e300` became a 301-digit integer that the 400 quoted in full, twice; past 2**53 the value
is refused as any float is."""

from __future__ import annotations

import json

import pytest

from accelkit.serve.server.errors import APIError
from accelkit.serve.server.protocol import CompletionRequest, parse_body


def _parse(**fields: object) -> CompletionRequest:
    body = json.dumps({"model": "m", "prompt": "x", **fields}).encode()
    return parse_body(CompletionRequest, body, "application/json", max_model_len=256)[0]


@pytest.mark.parametrize("field", ["n", "max_tokens", "seed"])
def test_a_float_past_2_53_is_refused_in_a_short_line(field: str) -> None:
    with pytest.raises(APIError) as info:
        _parse(**{field: 1e300})
    assert info.value.status == 400
    assert str(info.value) == f"{field}: Input should be a valid integer"


def test_whole_floats_up_to_2_53_are_integers() -> None:
    assert _parse(max_tokens=4.0, seed=2.0**53).max_tokens == 4
    assert _parse(seed=2.0**53).seed == 2**53
