"""Reading what ``accelkit results export --format json`` wrote — a list of records, or the one record of
``accelkit results show --json`` — back into results, so that a store on one machine (a rented GPU box) can be
merged into another (a laptop that makes the reports)."""

from __future__ import annotations

import json
from typing import Any

from accelkit.core import Estimate, Measurement, UserError
from accelkit.results.finite_rows import NON_FINITE, put_back

_WHAT = "import takes what `accelkit results export --format json` writes"


def read_export(text: str, source: str) -> list[tuple[str | None, Estimate | Measurement]]:
    """(run id, result) for each record of ``text``, in order; a UserError naming ``source``, the record and the
    fix for anything else (nothing is half-read: a bad record fails the whole file)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        first = text.lstrip().split("\n", 1)[0]
        hint = ("; this looks like CSV, which has no raw samples — " if first.startswith("id,") else "; ") + _WHAT
        raise UserError(f"{source} is not JSON ({exc.msg}, line {exc.lineno} column {exc.colno}){hint}") from None
    if isinstance(data, dict):  # one record: `accelkit results show ID --json`
        data = [data]
    if not isinstance(data, list):
        raise UserError(f"{source} holds a JSON {type(data).__name__}, not a list of results; {_WHAT}")
    return [_record(record, i, source) for i, record in enumerate(data)]


def _record(record: Any, index: int, source: str) -> tuple[str | None, Estimate | Measurement]:
    where = f"{source}: record {index}"
    if not isinstance(record, dict):
        raise UserError(f"{where} is a JSON {type(record).__name__}, not an object; {_WHAT}")
    data = dict(record)
    data.pop("id", None)  # the exporting store's id: this store gives its own
    run_id, kind = data.pop("run_id", None), data.pop("type", None)
    if run_id is not None and not isinstance(run_id, str):
        raise UserError(f"{where} has run_id={run_id!r}; a run id is a string or null")
    classes: dict[str, type[Estimate] | type[Measurement]] = {"measurement": Measurement, "estimate": Estimate}
    cls = classes.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise UserError(f"{where} has type={kind!r}; expected 'measurement' or 'estimate' ({_WHAT})")
    put_back(data, data.pop(NON_FINITE, None))  # the figures strict JSON wrote as null
    try:
        return run_id, cls.from_dict(data)
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise UserError(f"{where} does not describe a {kind} ({exc}); {_WHAT}") from None
