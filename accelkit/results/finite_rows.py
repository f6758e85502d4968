"""Strict-JSON rows: a result's non-finite figures (inf, -inf, NaN — RFC 8259 JSON has none) stored as null and
named in the payload's ``non_finite`` (JSON Pointer → 'inf', '-inf' or 'nan'), put back when the row is read."""

from __future__ import annotations

import math
from typing import Any

#: the payload key that names a row's non-finite figures (JSON Pointer → 'inf', '-inf' or 'nan')
NON_FINITE = "non_finite"


def take_out(value: Any, pointer: str, found: dict[str, str]) -> Any:
    """``value`` with every non-finite float replaced by None, each one recorded in ``found`` under its JSON
    Pointer (RFC 6901) as 'inf', '-inf' or 'nan'."""
    if isinstance(value, float) and not math.isfinite(value):
        found[pointer] = "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf")
        return None
    if isinstance(value, dict):
        return {k: take_out(v, f"{pointer}/{str(k).replace('~', '~0').replace('/', '~1')}", found)
                for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [take_out(v, f"{pointer}/{i}", found) for i, v in enumerate(value)]
    return value


def put_back(data: dict[str, Any], non_finite: Any) -> dict[str, str]:
    """Put a row's non-finite figures back in place of their nulls (what :func:`take_out` took out); returns the
    ones put back. An entry that names no null in the row (an edited row) is left out: the row still reads."""
    restored: dict[str, str] = {}
    for pointer, spelling in (non_finite.items() if isinstance(non_finite, dict) else ()):
        if spelling not in ("inf", "-inf", "nan") or not isinstance(pointer, str) or not pointer.startswith("/"):
            continue
        *path, last = [t.replace("~1", "/").replace("~0", "~") for t in pointer[1:].split("/")]
        node: Any = data
        for token in path:
            node = node.get(token) if isinstance(node, dict) else (
                node[int(token)] if isinstance(node, list) and token.isdigit() and int(token) < len(node) else None)
        if isinstance(node, dict) and node.get(last, 0) is None:
            node[last] = float(spelling)
        elif isinstance(node, list) and last.isdigit() and int(last) < len(node) and node[int(last)] is None:
            node[int(last)] = float(spelling)
        else:
            continue
        restored[pointer] = spelling
    return restored
