"""`accelkit sweep SWEEP.yaml [--ray auto|ADDRESS|local] [--workers N]`: a thin shell over
``accelkit.sweep``; --workers overrides the file's ``workers`` (a flag generated from SweepSpec)."""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import typer

from accelkit.cli.bench import exit_stopped, sigterm_as_interrupt
from accelkit.cli.helptext import examples
from accelkit.cli.output import JsonOption, Progress, ProgressOption, emit, err, fmt_num, out, table
from accelkit.cli.spec_options import spec_options
from accelkit.cli.store import open_for_saving, print_unsaved
from accelkit.core import AccelkitError, UserError
from accelkit.core.spec import finite_fix
from accelkit.core.units import fmt_bytes
from accelkit.sweep import load_sweep, run_sweep
from accelkit.sweep.point import failure_text
from accelkit.sweep.run import refuse_replaced_rates
from accelkit.sweep.spec import SweepSpec

EXAMPLES = examples(
    "accelkit sweep sweep.yaml                # the file's grid, on a local process pool",
    "accelkit sweep sweep.yaml --ray auto     # on the Ray cluster this machine belongs to",
)

@spec_options(SweepSpec, into="override", only=("workers",), optional=("workers",),
              helps={"workers": "Local process-pool size (default: the file's workers, 1); timed points should not "
                                "overlap on one machine."})
def sweep_cmd(
    path: Path = typer.Argument(..., help="Sweep file (YAML): name, kind, workloads, precisions, batch_sizes, layouts, rates."),
    ray: str | None = typer.Option(None, "--ray", help="Run the points as Ray tasks: auto (the running cluster), ADDRESS, or local."),
    as_json: bool = JsonOption,
    progress: bool | None = ProgressOption,
    *,
    override: dict[str, Any],
) -> None:
    """Run a grid of bench / plan / loadtest points; every result lands in the store under one run id."""
    spec = load_sweep(path)
    _refuse_infinite(path, spec)
    try:  # (run_sweep checks it too; here it is refused before the store is opened, naming the file)
        refuse_replaced_rates(spec)
    except UserError as exc:
        raise UserError(f"{path}: {exc}") from None
    # before the first point; a sweep always stores (its run id groups the rows), so it has no --no-save to offer
    store = open_for_saving(True, no_save=False)
    assert store is not None
    try:
        # SIGTERM stops the sweep as Ctrl-C does (the points finished and the summary kept, its workers stopped); it
        # ended the driver silently and left its pool worker running, holding stdout (found in review)
        with sigterm_as_interrupt() as received, Progress(f"sweep {spec.name}", show=progress) as bar:
            def on_point(line: dict[str, Any]) -> None:
                ids = ", ".join(map(str, line["result_ids"]))
                what = f"stored {ids}" if line["status"] == "ok" and ids else (
                    f"FAILED: {line['error']}" if line["status"] != "ok" else "")
                if line["status"] == "ok" and line.get("failed"):  # the variants that raised; the others were stored
                    what += "; FAILED " + "; ".join(map(failure_text, line["failed"]))
                if line.get("fits") is False:
                    what += "; does not fit in memory"
                if line.get("unstored"):
                    what += ("; " if what else "") + f"not stored ({line.get('store_error') or 'saving was off'})"
                bar.log(f"point {line['index']} ({line['key']}): {what}")

            run = run_sweep(spec, ray=ray, workers=override.get("workers"), store=store, on_point=on_point,
                            terminated=lambda: "SIGTERM" in received)
            bar.stopped = run.interrupted
        rows_by_id = {} if run.store_error else {i: store.get(i).result for p in run.points for i in p["result_ids"]}
    finally:
        store.close()
    data = run.to_json()
    unfinished = unfinished_text(run.unfinished)
    if run.store_error is not None:  # every point's figures are in the document: print it rather than lose them
        print_unsaved(
            data, AccelkitError(run.store_error),
            stored=[f"point {p['index']} · {p['key']} (result {', '.join(map(str, p['result_ids']))})"
                    for p in run.points if p["result_ids"]],
            unstored=[f"point {p['index']} · {p['key']}" for p in run.points if p.get("unstored")]
            + ([] if run.summary_id is not None else ["the sweep summary"]),
            interrupted=f"not finished: {unfinished}" if run.interrupted else None)

    def render() -> None:
        by_workload: dict[str, list[dict[str, Any]]] = {}
        for p in run.points:
            by_workload.setdefault(p["workload"], []).append(p)
        plan = run.kind == "plan"
        for workload, points in by_workload.items():
            rows = []
            for p in points:
                results = [rows_by_id[i] for i in p["result_ids"] if rows_by_id[i].kind != "sweep-error"]
                shown = next((r for r in results if type(r).__name__ == "Measurement"), results[0] if results else None)
                value = (f"{fmt_num(shown.throughput, 1)} {shown.throughput_unit}"
                         if p["status"] == "ok" and shown and shown.throughput else "-")  # not a failed point's prediction
                # an ok point whose other variants raised says which (`bench` would have exited 1 for them)
                error = p["error"] or "; ".join(f"FAILED {failure_text(f)}" for f in p.get("failed", []))
                row = [p["index"], p["key"], p["status"], value]
                if plan:  # a layout that does not fit is no candidate, however high its tokens/s
                    row += _memory(p, shown)
                rows.append((*row, ", ".join(map(str, p["result_ids"])), _cell(error, p, rows_by_id, run.summary_id)))
            cols = ["#", "point", "status", "throughput", *(["fits", "memory / device"] if plan else []), "result ids",
                    "error"]
            out.print(table(f"sweep {run.name} · {workload}", cols, rows, right=(0,)))
        partly = sum(1 for p in run.points if p["status"] == "ok" and p.get("failed"))
        too_big = sum(1 for p in run.points if p.get("fits") is False)
        err.print(f"sweep {run.name}: {len(run.points)} points, {len(run.failed)} failed"
                  + (f", {partly} with failed variants" if partly else "")
                  + (f", {too_big} do not fit in memory" if too_big else "")
                  + f"; run {run.run_id} ({run.executor}); summary stored as result {run.summary_id}", highlight=False)

    emit(data, as_json, render)
    if run.interrupted:
        exit_stopped("SIGTERM" in received, f"kept {len(run.points)} finished point(s) in the store (summary "
                                            f"result {run.summary_id}); not finished: {unfinished}")
    if run.points and len(run.failed) == len(run.points):
        raise typer.Exit(1)


#: the longest error a table cell shows whole; a longer one is cut, and the cell names where the whole text is
ERROR_CELL = 80


def _cell(error: str, point: dict[str, Any], rows: dict[int, Any], summary_id: int | None) -> str:
    """A point's error for its table cell: cut to ``ERROR_CELL`` characters it lost its fix without a mark (`… run
    `accelkit hw probe --d`; found in the hunt), so a cut one ends in … and names the stored row with the whole text
    (the point's sweep-error row, else the sweep summary, which lists every point's error; --json has them too)."""
    if len(error) <= ERROR_CELL:
        return error
    row = next((i for i in point["result_ids"] if rows[i].kind == "sweep-error"), summary_id)
    where = f"`accelkit results show {row}`" if row is not None else "--json"
    return f"{error[:ERROR_CELL - 1]}… (whole error: {where})"


#: how many unfinished points the stop message names; the rest are counted (all are in the summary and --json)
SHOWN_UNFINISHED = 10


def unfinished_text(unfinished: list[str]) -> str:
    """The points an interrupt left, for one stderr line: a 10,000-point grid stopped early printed all 9,967 of
    them, one ~430 KB line (found in review); the first few are named, the rest counted."""
    if not unfinished:
        return "none"
    shown = ", ".join(unfinished[:SHOWN_UNFINISHED])
    rest = len(unfinished) - SHOWN_UNFINISHED
    return shown if rest <= 0 else (f"{shown} … and {rest} more ({len(unfinished)} in all; the summary's "
                                    "unfinished, or --json, lists every one)")


#: the keys of a sweep file whose numbers may be inf: request rates (inf sends every request at once)
RATE_KEYS = ("rates", "request_rate", "sweep_rates")


def _refuse_infinite(path: Path, spec: SweepSpec) -> None:
    """A number in a sweep file is finite, as its flag is (`bench llm-train --lr inf` is refused), but for a request
    rate: YAML reads `.inf` (and 1.0e+400) as infinity, and `workloads: {llm-train: {lr: .inf}}` trained at lr=inf."""
    for where, key, value in _numbers(spec.to_dict(), ""):
        if math.isinf(value):
            raise UserError(f"{path}: {where}={value:g} is not a finite number; give {finite_fix(key)}")


def _numbers(value: Any, where: str, key: str = "") -> Iterator[tuple[str, str, float]]:
    """(where, the key it is under, value) of every float under ``value``; ``where`` as the sweep's errors spell it:
    workloads['llm-train'].lr, layouts[0].collective_timeout_s. A rate list's items are not walked."""
    if isinstance(value, float):
        yield where, key, value
    elif isinstance(value, dict):
        for k, v in value.items():
            if str(k) not in RATE_KEYS:
                inner = f"{where}[{k!r}]" if where == "workloads" else f"{where}.{k}" if where else str(k)
                yield from _numbers(v, inner, str(k))
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _numbers(v, f"{where}[{i}]", key)


def _memory(point: dict[str, Any], shown: Any) -> list[str]:
    """A plan point's fits and memory / device cells (the planner's per-device total of its capacity)."""
    if "fits" not in point:
        return ["-", "-"]
    total = (shown.memory_bytes or {}).get("total") if shown is not None else None
    capacity = shown.details.get("memory_capacity_bytes") if shown is not None else None
    memory = f"{fmt_bytes(total)} of {fmt_bytes(capacity)}" if total is not None and capacity else "-"
    return ["yes" if point["fits"] else "NO", memory]
