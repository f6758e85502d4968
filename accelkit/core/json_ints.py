"""Integer literals longer than Python converts (``sys.get_int_max_str_digits()``, 4,300 digits by default): where
in a JSON document the first one is, so that the error (the server's 400, an import's one line) names its field.
``json.loads`` only says that one exceeded the limit, not where; this second parse runs only for a document that
already failed that way."""

from __future__ import annotations

import json
import sys
from typing import Any


class _Overlong:
    """Stands in for an integer literal too long to convert."""

    __slots__ = ("num_digits",)

    def __init__(self, num_digits: int) -> None:
        self.num_digits = num_digits


def max_int_digits() -> int:
    """The longest integer literal (in digits) that converts; 0 means no limit."""
    return sys.get_int_max_str_digits()


def _parse_int(text: str) -> int | _Overlong:
    digits = len(text.lstrip("-"))
    limit = max_int_digits()
    return _Overlong(digits) if limit and digits > limit else int(text)


def overlong_int(raw: bytes | str) -> tuple[str, int] | None:
    """(dotted path of the first too-long integer literal, its number of digits), or None when there is none.
    The path is ``body`` for a literal at the top, ``logit_bias.<key>`` or ``prompt.3`` inside."""
    data = json.loads(raw, parse_int=_parse_int)
    stack: list[tuple[list[str], Any]] = [([], data)]
    while stack:  # iterative: the document may nest as deep as json.loads allows
        path, value = stack.pop()
        if isinstance(value, _Overlong):
            return ".".join(path) or "body", value.num_digits
        items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
        stack.extend(reversed([([*path, str(k)], v) for k, v in items]))
    return None


def int_literal_too_long(text: str) -> bool:
    """Whether the digits ``text`` (a string of ASCII digits, e.g. a logit_bias key) are too many to convert."""
    limit = max_int_digits()
    return bool(limit) and len(text.lstrip("+-")) > limit
