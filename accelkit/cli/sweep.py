"""`accelkit sweep SWEEP.yaml [--ray auto|ADDRESS|local] [--workers N]`: a thin shell over
``accelkit.sweep``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from accelkit.cli.output import JsonOption, emit, err, fmt_num, out, table


def sweep_cmd(
    path: Path = typer.Argument(..., help="Sweep file (YAML): name, kind, workloads, precisions, batch_sizes, layouts, rates."),
    ray: str = typer.Option(None, "--ray", help="Run the points as Ray tasks: auto (the running cluster), ADDRESS, or local."),
    workers: int = typer.Option(None, "--workers", min=1, help="Local process-pool size (default: the file's workers, 1)."),
    as_json: bool = JsonOption,
) -> None:
    """Run a grid of bench / plan / loadtest points; every result lands in the store under one run id."""
    from accelkit.results import ResultStore
    from accelkit.sweep import load_sweep, run_sweep

    spec = load_sweep(path)

    def progress(line: dict[str, Any]) -> None:
        what = f"stored {', '.join(map(str, line['result_ids']))}" if line["status"] == "ok" else f"FAILED: {line['error']}"
        err.print(f"point {line['index']} ({line['key']}): {what}", highlight=False, markup=False, soft_wrap=True)

    with ResultStore() as store:
        run = run_sweep(spec, ray=ray, workers=workers, store=store, on_point=progress)
        rows_by_id = {i: store.get(i).result for p in run.points for i in p["result_ids"]}

    def render() -> None:
        by_workload: dict[str, list[dict[str, Any]]] = {}
        for p in run.points:
            by_workload.setdefault(p["workload"], []).append(p)
        for workload, points in by_workload.items():
            rows = []
            for p in points:
                results = [rows_by_id[i] for i in p["result_ids"] if rows_by_id[i].kind != "sweep-error"]
                shown = next((r for r in results if type(r).__name__ == "Measurement"), results[0] if results else None)
                value = f"{fmt_num(shown.throughput, 1)} {shown.throughput_unit}" if shown and shown.throughput else "-"
                rows.append((p["index"], p["key"], p["status"], value,
                             ", ".join(map(str, p["result_ids"])), (p["error"] or "")[:80]))
            out.print(table(f"sweep {run.name} · {workload}", ["#", "point", "status", "throughput", "result ids", "error"],
                            rows, right=(0,)))
        err.print(f"sweep {run.name}: {len(run.points)} points, {len(run.failed)} failed; run {run.run_id} "
                  f"({run.executor}); summary stored as result {run.summary_id}", highlight=False)

    emit(run.to_json(), as_json, render)
    if run.points and len(run.failed) == len(run.points):
        raise typer.Exit(1)
