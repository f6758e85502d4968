"""`accelkit plan --model sdxl-base --task infer --compare h100,H100-SXM5-80GB` planned one card twice: two identical
rows, where `plan --compare` of an LLM refuses it (found in a hunt). Now the text-to-image plan refuses it too, in
one line naming the card and both spellings, before planning anything."""

from __future__ import annotations

import pytest

from accelkit.cli.text_to_image import plan
from accelkit.core import UserError


def _plan(compare: str) -> list[dict]:
    return plan("tiny-sdxl", {"task": "infer", "compare": compare}, {}, {}, {}, as_json=True)


@pytest.mark.parametrize(("compare", "card", "spellings"), [
    ("h100,h100", "H100-SXM5-80GB", "(h100 and h100)"),
    ("h100,H100-SXM5-80GB", "H100-SXM5-80GB", "(h100 and H100-SXM5-80GB)"),
    ("mi300x,h200,MI300X", "MI300X", "(mi300x and MI300X)"),
])
def test_one_card_named_twice_is_refused(compare, card, spellings):
    with pytest.raises(UserError, match=rf"^--compare {compare} names {card} twice \({spellings[1:-1]}\); drop one$"):
        _plan(compare)


def test_two_cards_plan_one_row_each(capsys):
    docs = _plan("h100,h200")
    assert [d["hardware"]["name"] for d in docs] == ["H100-SXM5-80GB", "H200-SXM-141GB"]
