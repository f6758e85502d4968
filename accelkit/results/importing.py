"""Reading what ``accelkit results export --format json`` wrote — a list of records, or the one record of
``accelkit results show --json`` — back into results, so that a store on one machine (a rented GPU box) can be
merged into another (a laptop that makes the reports)."""

from __future__ import annotations

import json
from typing import Any

from accelkit.core import Estimate, Measurement, UserError
from accelkit.core.json_ints import max_int_digits, overlong_int
from accelkit.results.import_checks import check_record
from accelkit.results.store import MAX_ROW_ID, UNSTORED_KEY, check_typed

_WHAT = "import takes what `accelkit results export --format json` writes"
#: columns of `results list --json` (the CSV's flat rows) that no exported record has
_FLAT_ONLY = frozenset({"latency_median_s", "latency_n", "memory_total_bytes", "mfu_above_peak"})


def read_export(text: str, source: str) -> list[tuple[int | None, str | None, Estimate | Measurement]]:
    """(its id in the exporting store, run id, result) for each record of ``text``, in id order (a row after the
    rows it cites); a UserError naming ``source``, the record and the
    fix for anything else (nothing is half-read: a bad record fails the whole file)."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        first = text.lstrip().split("\n", 1)[0]
        hint = ("; this looks like CSV, which has no raw samples — " if first.startswith("id,") else "; ") + _WHAT
        raise UserError(f"{source} is not JSON ({exc.msg}, line {exc.lineno} column {exc.colno}){hint}") from None
    except RecursionError:
        raise UserError(f"{source} nests JSON arrays or objects too deeply to be an export; {_WHAT}") from None
    except ValueError:  # an integer literal past Python's limit (4,300 digits by default)
        found = overlong_int(text)
        path, digits = found if found is not None else ("", 0)
        index, _, name = path.partition(".")
        where = f"record {index} has {name or 'a field'}" if index.isdigit() else "has an integer"
        raise UserError(f"{source}: {where} of {digits} digits; no figure of a result is longer than "
                        f"{max_int_digits()} digits ({_WHAT})") from None
    unstored = unstored_in(data) if isinstance(data, dict) else []
    if unstored:  # a bench/tune/suite document printed because the store refused it: the rows it could not store
        data = unstored
    elif isinstance(data, dict):  # one record: `accelkit results show ID --json`
        data = [data]
    if not isinstance(data, list):
        raise UserError(f"{source} holds a JSON {type(data).__name__}, not a list of results; {_WHAT}")
    records = [_record(record, i, source) for i, record in enumerate(data)]
    return sorted(records, key=lambda r: -1 if r[0] is None else r[0])  # (stable: records without an id keep order)


def unstored_in(document: dict[str, Any]) -> list[Any]:
    """The records under every ``unstored_results`` of a command's document (a suite's are in each of its runs), in
    document order."""
    found: list[Any] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key == UNSTORED_KEY and isinstance(value, list):
                    found.extend(value)
                else:
                    walk(value)
        elif isinstance(node, list):
            for item in node:
                walk(item)

    try:
        walk(document)
    except RecursionError:
        raise UserError(f"the document nests JSON arrays or objects too deeply to be an export; {_WHAT}") from None
    return found


def _record(record: Any, index: int, source: str) -> tuple[int | None, str | None, Estimate | Measurement]:
    where = f"{source}: record {index}"
    if not isinstance(record, dict):
        raise UserError(f"{where} is a JSON {type(record).__name__}, not an object; {_WHAT}")
    data = dict(record)
    old_id = data.pop("id", None)  # the exporting store's id: this store gives its own (and rewrites references)
    if old_id is not None and (not isinstance(old_id, int) or isinstance(old_id, bool)):
        raise UserError(f"{where} has id={old_id!r}; a result id is an integer")
    run_id, kind = data.pop("run_id", None), data.pop("type", None)
    if kind is None and "result_id" in data and "samples" in data:
        # a measuring command's --json document (`accelkit loadtest --json`, `hw probe --json`): the Measurement
        # plus its result_id, and store_error when the store refused it — the JSON printed "rather than lost",
        # which must go back into a store as it is
        data.pop("result_id")
        data.pop("store_error", None)
        kind = "measurement"
    if run_id is not None and not isinstance(run_id, str):
        raise UserError(f"{where} has run_id={run_id!r}; a run id is a string or null")
    classes: dict[str, type[Estimate] | type[Measurement]] = {"measurement": Measurement, "estimate": Estimate}
    cls = classes.get(kind) if isinstance(kind, str) else None
    if cls is None:
        raise UserError(f"{where} has type={kind!r}; expected 'measurement' or 'estimate' ({_WHAT})")
    if old_id is not None and not 0 < old_id <= MAX_ROW_ID:
        raise UserError(f"{where} has id={old_id}; a result id is between 1 and {MAX_ROW_ID}")
    if _FLAT_ONLY & data.keys() and "latency_s" not in data:  # `results list --json`: flat rows, no samples
        raise UserError(f"{where} is a row of `accelkit results list --json` (flat columns, no raw samples), not an "
                        f"exported result; {_WHAT}")
    problem = check_record(data, kind)
    if problem is not None:
        raise UserError(f"{where} {problem}; {_WHAT}")
    try:
        result = cls.from_dict(data)
    except (TypeError, KeyError, AttributeError, ValueError) as exc:
        raise UserError(f"{where} does not describe {'an' if kind == 'estimate' else 'a'} {kind} ({exc}); "
                        f"{_WHAT}") from None
    try:
        check_typed(result)  # as the store reads it back: a row every listing would skip is refused here
    except ValueError as exc:
        raise UserError(f"{where} ({result.kind} {result.name[:60]!r}): {exc}; {_WHAT}") from None
    return old_id, run_id, result
