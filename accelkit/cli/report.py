"""`accelkit report`: the self-contained HTML report of the results store (no torch import)."""

from __future__ import annotations

from pathlib import Path

import typer

from accelkit.cli.output import JsonOption, emit, err, out


def report_cmd(
    out_path: Path = typer.Option(Path("report.html"), "--out", help="Where to write the HTML file."),
    run: str = typer.Option(None, "--run", help="Only the results of this run id (default: all)."),
    open_: bool = typer.Option(False, "--open", help="Open it in the default browser afterwards."),
    as_json: bool = JsonOption,
) -> None:
    """Write one self-contained HTML report (tables and plots, no network needed) from the results store."""
    from accelkit.report import write_report
    from accelkit.results import ResultStore

    with ResultStore() as store:
        path = write_report(out_path, store=store, run_id=run)
        total = store.count()
    data = {"path": str(path.resolve()), "bytes": path.stat().st_size, "results_in_store": total}

    def render() -> None:
        out.print(f"wrote {path} ({path.stat().st_size / 2**20:.1f} MiB, {total} results in the store)", highlight=False)

    emit(data, as_json, render)
    if open_:
        import webbrowser

        if not webbrowser.open(path.resolve().as_uri()):
            err.print(f"could not open a browser; open {path.resolve()} yourself", highlight=False)
