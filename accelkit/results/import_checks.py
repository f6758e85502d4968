"""What an imported record must be beyond what its type checks: a store keeps only what accelkit itself could
have written. Each check returns the sentence that says what is wrong (the record's name and field in it), or None.

- nesting no deeper than :data:`MAX_DEPTH` (the deepest accelkit writes is under 10; 900 levels ran the writer
  out of stack), every string valid Unicode (a lone surrogate cannot be stored as UTF-8);
- the type agrees with the body: a plan is an estimate, a measurement carries its ``samples``;
- ``created_at`` an ISO-8601 time between :data:`EARLIEST` and a day from now;
- ``num_devices`` at most :data:`MAX_NUM_DEVICES`, memory figures whole bytes in SQLite's integer range;
- ``non_finite`` what the export writes: JSON Pointer → 'inf', '-inf' or 'nan', each naming a null of the record.

:func:`loadtest_problem` and :func:`probe_problem` check the figures the report reads of a loadtest and a probe row;
``accelkit.results.store.check_typed`` runs them on import (refused) and on reading (the row skipped, named).
"""

from __future__ import annotations

import datetime as _dt
from typing import Any

from accelkit.results.finite_rows import NON_FINITE, put_back

MAX_DEPTH = 64  # arrays and objects inside one another in a record
MAX_NUM_DEVICES = 1 << 20  # the planner's own ceiling (PlanOptions.max_devices)
MAX_BYTES = 2**63 - 1
EARLIEST = _dt.datetime(2000, 1, 1, tzinfo=_dt.UTC)
_CLOCK_SKEW = _dt.timedelta(days=1)  # a record from a machine whose clock runs ahead is still taken


def _pointer(path: list[str]) -> str:
    return "/".join(path) or "the record"


def _shape(data: Any) -> str | None:
    """Too deep, or a string (or key) that is not valid Unicode; iterative, so that depth costs no stack."""
    stack: list[tuple[list[str], Any]] = [([], data)]
    while stack:
        path, value = stack.pop()
        if len(path) > MAX_DEPTH:
            return f"nests arrays or objects more than {MAX_DEPTH} deep (at {_pointer(path[:3])}/…)"
        if isinstance(value, str):
            if not _is_unicode(value):
                return f"has a string that is not valid Unicode (a lone surrogate) at {_pointer(path)}"
        elif isinstance(value, dict):
            for k, v in value.items():
                if not _is_unicode(str(k)):
                    return f"has a key that is not valid Unicode (a lone surrogate) in {_pointer(path)}"
                stack.append(([*path, str(k)], v))
        elif isinstance(value, list):  # (numbers need no visit: a sample series may hold a million)
            stack.extend(([*path, str(i)], v) for i, v in enumerate(value) if isinstance(v, (str, dict, list)))
    return None


def _is_unicode(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _created_at(value: Any) -> str | None:
    if value is None:
        return None  # the store stamps it now
    if not isinstance(value, str):
        return f"has created_at={value!r}; expected an ISO-8601 UTC time such as '2026-11-29T15:04:05Z'"
    try:
        when = _dt.datetime.fromisoformat(value)
    except ValueError:
        return f"has created_at={value[:40]!r}, which is not an ISO-8601 time such as '2026-11-29T15:04:05Z'"
    when = when if when.tzinfo is not None else when.replace(tzinfo=_dt.UTC)
    latest = _dt.datetime.now(_dt.UTC) + _CLOCK_SKEW
    if not EARLIEST <= when <= latest:
        return (f"has created_at={value!r}, outside {EARLIEST:%Y-%m-%d} to now; a result's time is when it was "
                "made")
    return None


def _numbers(data: dict[str, Any]) -> str | None:
    n = data.get("num_devices")
    if isinstance(n, int) and not isinstance(n, bool) and n > MAX_NUM_DEVICES:
        return f"has num_devices={n}; at most {MAX_NUM_DEVICES} devices"
    memory = data.get("memory_bytes")
    for name, value in (memory.items() if isinstance(memory, dict) else ()):
        if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= MAX_BYTES:
            return f"has memory_bytes.{name}={value}; expected 0 to {MAX_BYTES} bytes"
    return None


def _kind_agrees(data: dict[str, Any], kind: str) -> str | None:
    if kind == "measurement" and data.get("kind") == "plan":
        return "is a plan but has type='measurement'; a plan is an estimate"
    if kind == "measurement" and "samples" not in data:
        return ("has type='measurement' but no samples (an estimate's body?); a measurement keeps its samples, "
                "{} when there are none")
    return None


def _non_finite(data: dict[str, Any]) -> str | None:
    """Takes ``non_finite`` out of ``data`` and puts its figures back, refusing one that is not what export wrote."""
    entries = data.pop(NON_FINITE, None)
    if entries is None:
        return None
    if not isinstance(entries, dict):
        return f"has {NON_FINITE}={entries!r:.60}; expected an object of JSON Pointer → 'inf', '-inf' or 'nan'"
    restored = put_back(data, entries)
    wrong = next((p for p in entries if p not in restored), None)
    if wrong is not None:
        return (f"has {NON_FINITE} entry {wrong!r:.60} → {entries[wrong]!r:.20}, which names no null of the record "
                "as 'inf', '-inf' or 'nan'")
    return None


def check_record(data: dict[str, Any], kind: str) -> str | None:
    """What is wrong with record ``data`` (its id, run_id and type taken out) of type ``kind``, or None; on None,
    the figures ``non_finite`` named are back in place (inf, -inf, NaN) and the key is gone."""
    return (_shape(data) or _kind_agrees(data, kind) or _created_at(data.get("created_at")) or _numbers(data)
            or _non_finite(data))


def _is_number(value: Any) -> bool:
    """An int or float the report can take as a float (JSON reads 1 and 400 zeros as an int: float() overflows)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


#: a loadtest curve point's latency distributions (``accelkit.loadtest.runner.curve_point``): {p50, p90, p99} in ms
CURVE_METRICS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")


def _curve_point(point: Any, where: str) -> str | None:
    if not isinstance(point, dict):
        return f"{where}={point!r:.60} is not an object (rate, request_throughput, ttft_ms, …)"
    for key, fits, expected in (("rate", lambda v: _is_number(v) or v == "inf", "a number or 'inf'"),
                                ("request_throughput", _is_number, "a number")):
        if key not in point:
            return f"{where} has no {key} ({expected})"
        if not fits(point[key]):
            return f"{where}.{key}={point[key]!r:.40} is not {expected}"
    for name in CURVE_METRICS:
        metric = point.get(name, {})
        if metric is None:
            continue
        if not isinstance(metric, dict):
            return f"{where}.{name}={metric!r:.60} is not an object of percentiles ({{p50, p90, p99}} in ms)"
        bad = next((k for k, v in metric.items() if v is not None and not _is_number(v)), None)
        if bad is not None:
            return f"{where}.{name}.{bad}={metric[bad]!r:.40} is not a number (ms) or null"
    return None


def loadtest_problem(details: dict[str, Any]) -> str | None:
    """What the report cannot read in a loadtest row's ``details.curve`` (as ``accelkit loadtest`` writes it: a
    list of points, each a number or 'inf' as its rate, a number as its request_throughput, and its TTFT/TPOT/ITL/E2E
    percentiles numbers or null), or None. One imported point without request_throughput made every report of the
    store an internal error (found in review)."""
    curve = details.get("curve", [])
    if not isinstance(curve, list):
        return f"details.curve={curve!r:.60} is not a list of points (rate, request_throughput, …)"
    return next((p for i, point in enumerate(curve) if (p := _curve_point(point, f"details.curve[{i}]"))), None)


def probe_problem(details: dict[str, Any]) -> str | None:
    """What the report's roofline cannot read in a probe row: a datasheet figure (``bandwidth.catalog_gbps``,
    ``matmul.<dtype>.catalog_peak_tflops``) that is neither a number nor null (found in review: 'x' stopped the
    report), or None."""
    bandwidth, matmul = details.get("bandwidth"), details.get("matmul")
    figures = [("details.bandwidth.catalog_gbps", bandwidth.get("catalog_gbps"))] if isinstance(bandwidth, dict) else []
    figures += [(f"details.matmul.{dtype}.catalog_peak_tflops", row.get("catalog_peak_tflops"))
                for dtype, row in (matmul.items() if isinstance(matmul, dict) else ()) if isinstance(row, dict)]
    return next((f"{where}={value!r:.40} is not a number or null" for where, value in figures
                 if value is not None and not _is_number(value)), None)
