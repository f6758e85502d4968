"""`accelkit results list|show|export`."""

from __future__ import annotations

from pathlib import Path

import typer

from accelkit.cli.output import JsonOption, emit, err, fmt_num, out, table
from accelkit.core import UserError
from accelkit.results import ResultStore, export, flat_row

app = typer.Typer(help="The results store: every estimate and measurement.", no_args_is_help=True)

KindOption = typer.Option(None, "--kind", help="Only results of this kind (plan, probe, bench …).")
HardwareOption = typer.Option(None, "--hardware", help="Only results on this hardware name.")


@app.command("list")
def list_cmd(
    kind: str = KindOption,
    hardware: str = HardwareOption,
    limit: int = typer.Option(20, "--limit", min=1, help="Newest N results."),
    as_json: bool = JsonOption,
) -> None:
    """List stored results, newest first."""
    with ResultStore() as store:
        found = store.query(kind=kind, hardware=hardware, limit=limit)
        path, total = store.path, store.count()

    def render() -> None:
        rows = []
        for s in found:
            f = flat_row(s)
            headline = f"{fmt_num(f['throughput'], 3)} {f['throughput_unit']}" if f["throughput"] is not None else None
            rows.append((s.id, f["created_at"], f["type"], f["kind"], f["name"], f["hardware"], headline,
                         fmt_num(f["mfu"], 3)))
        out.print(table(f"Results in {path} ({total} in all)",
                        ["id", "created (UTC)", "type", "kind", "name", "hardware", "headline", "MFU"], rows))
        if not found:
            out.print("No results yet: `accelkit hw probe --quick` makes one.")

    emit([flat_row(s) for s in found], as_json, render)


@app.command("show")
def show_cmd(result_id: int = typer.Argument(..., help="Result id from `accelkit results list`."), as_json: bool = JsonOption) -> None:
    """Show one result in full (payload, environment, sample counts)."""
    with ResultStore() as store:
        stored = store.get(result_id)
    data = stored.to_dict()

    def render() -> None:
        r = stored.result
        rows = [(k, v) for k, v in flat_row(stored).items() if v is not None]
        rows += [(f"samples {k}", f"{len(v)} values") for k, v in getattr(r, "samples", {}).items()]
        out.print(table(f"Result {stored.id}", ["field", "value"], rows))
        out.print_json(data=r.details)

    emit(data, as_json, render)


@app.command("export")
def export_cmd(
    fmt: str = typer.Option("json", "--format", help="json (full records with raw samples) or csv (one row each)."),
    kind: str = KindOption,
    hardware: str = HardwareOption,
    output: Path = typer.Option(None, "--out", help="Write to this file instead of stdout."),
) -> None:
    """Export results as JSON or CSV."""
    if fmt not in ("json", "csv"):
        raise UserError(f"--format {fmt!r} is not supported; use json or csv")
    with ResultStore() as store:
        text = export(store.query(kind=kind, hardware=hardware, newest_first=False), fmt)
    if output is None:
        typer.echo(text, nl=not text.endswith("\n"))
    else:
        output.write_text(text)
        err.print(f"wrote {output}")
