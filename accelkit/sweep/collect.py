"""Collecting a point's outcome on the driver: its rows (copied when it ran against another store), or a
'sweep-error' row; what no store took stays in the point's line (``unstored``)."""

from __future__ import annotations

import socket
from typing import TYPE_CHECKING, Any

from accelkit.core import Estimate, Measurement
from accelkit.results.finite_rows import NON_FINITE
from accelkit.results.references import remap_ids
from accelkit.sweep.grid import Point

if TYPE_CHECKING:
    from accelkit.bench.record import StoreWriter


def collect(point: Point, outcome: dict[str, Any], writer: StoreWriter, run_id: str, sweep: str) -> dict[str, Any]:
    """Land a point's outcome in the driver's store through ``writer`` (nothing is tried once a write failed): its
    rows (copied when it ran against another store), or a 'sweep-error' row. Returns the point's line of the
    summary; what no store took is in the line's ``unstored`` (whole documents: nothing measured is lost), with
    ``store_error``."""
    assert writer.store is not None  # a sweep always stores: the run id groups its rows
    line = {**point.to_dict(), "status": outcome["status"], "host": outcome.get("host"), "result_ids": [],
            "error": outcome.get("error")}
    if outcome.get("failed"):  # bench variants that raised: all of them made the point an error, some are listed
        line["failed"] = list(outcome["failed"])
    unstored: list[dict[str, Any]] = list(outcome.get("unstored") or [])
    store_error = outcome.get("store_error")
    here = {"host": socket.gethostname(), "store": str(writer.store.path.resolve())}
    # a point that ran (even one whose every variant raised) may have stored rows; a point that raised has none
    if "result_ids" in outcome and {"host": outcome["host"], "store": outcome["store"]} == here:
        line["result_ids"] = list(outcome["result_ids"])
        if store_error is not None and writer.error is None:
            writer.error = store_error  # the driver's own store refused the point's write: the driver tries no more
    elif "result_ids" in outcome:
        line["result_ids"] = _copy_rows(outcome, writer, run_id, unstored)
    if outcome["status"] != "ok":
        _add_error_row(point, outcome, line, writer, run_id, sweep, unstored)
    if point.kind == "plan" and outcome["status"] == "ok":  # a plan that does not fit is no candidate, whatever
        plans = [r for r in [*outcome.get("results", []), *unstored] if r.get("kind") == "plan"]  # its tokens/s
        if plans:
            line["fits"] = bool(plans[0]["details"].get("fits"))
    if unstored:
        line["unstored"] = unstored
        if (why := store_error or writer.error) is not None:
            line["store_error"] = why
    return line


def _copy_rows(outcome: dict[str, Any], writer: StoreWriter, run_id: str, unstored: list[dict[str, Any]]) -> list[int]:
    """Copy the rows a point stored in another store (another Ray node) into the driver's, their cross-references
    remapped; the driver's ids of the point's results. A row the driver's store does not take goes to ``unstored``."""
    mapping: dict[int, int] = {}
    for row in outcome["results"]:  # in id order: estimates come before the measurements that cite them
        data = {k: v for k, v in row.items() if k not in ("id", "run_id", "type", NON_FINITE)}
        data["details"] = remap_ids(data.get("details", {}), mapping)
        result = Measurement.from_dict(data) if row["type"] == "measurement" else Estimate.from_dict(data)
        copied = writer.add(result, run_id=run_id)
        if copied is None:
            unstored.append(row)
        else:
            mapping[row["id"]] = copied
    return [mapping[i] for i in outcome["result_ids"] if i in mapping]


def _add_error_row(point: Point, outcome: dict[str, Any], line: dict[str, Any], writer: StoreWriter, run_id: str,
                   sweep: str, unstored: list[dict[str, Any]]) -> None:
    """Store a failed point's 'sweep-error' row (its id joins the line's ``result_ids``; unstored: ``unstored``)."""
    error = Measurement(kind="sweep-error", name=f"{sweep} · point {point.index} · {point.key}", details={
        "sweep": sweep, "point": point.to_dict(), "error": outcome.get("error"),
        "traceback": outcome.get("traceback"), "host": outcome.get("host"),
        **({"failed": line["failed"]} if "failed" in line else {})})
    error_id = writer.add(error, run_id=run_id)
    if error_id is None:
        unstored.append(error.to_dict())
    else:
        line["result_ids"].append(error_id)
