"""Strict JSON out of documents that may hold inf or NaN.

Python's ``json.dumps`` writes ``Infinity`` and ``NaN`` by default, which RFC 8259 parsers (``jq``, JavaScript's
``JSON.parse``, Go, Rust's serde_json) reject: one stray overflow in a measurement makes a whole ``--json``
document unreadable. :func:`dumps` writes strict JSON instead — a non-finite float becomes ``null`` (no figure;
the document's own notes say why), except where a field's documented spelling of infinity is the string
``'inf'`` (a load test's request rate, ``accelkit.loadtest.config.rate_json``). It never raises on a non-finite
number: a printer must not lose the measurement it prints.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: keys whose +inf is written as the string 'inf' (a request rate of inf = every request at once; rate_json)
INF_AS_STRING = frozenset({"rate", "request_rate", "sweep_rates", "summary_rate"})


def finite_only(value: Any, key: str | None = None) -> Any:
    """``value`` with every non-finite float replaced (recursively through dicts, lists and tuples): ``None``, or
    ``'inf'`` for +inf under a key of :data:`INF_AS_STRING`."""
    if isinstance(value, float):
        if math.isfinite(value):
            return value
        return "inf" if value == math.inf and key in INF_AS_STRING else None
    if isinstance(value, dict):
        return {k: finite_only(v, k if isinstance(k, str) else None) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite_only(v, key) for v in value]
    return value


def dumps(value: Any, **kwargs: Any) -> str:
    """``json.dumps(value, **kwargs)`` as strict JSON (see the module docstring); the document is walked only when
    it holds a non-finite float."""
    try:
        return json.dumps(value, allow_nan=False, **kwargs)
    except ValueError as exc:
        if "Out of range float" not in str(exc):  # e.g. a circular reference: not ours to hide
            raise
    return json.dumps(finite_only(value), allow_nan=False, **kwargs)
