"""`accelkit report`: the self-contained HTML report of the results store (no torch import)."""

from __future__ import annotations

import io
import os
import sys
from pathlib import Path

import typer

from accelkit.cli.helptext import examples
from accelkit.cli.output import JsonOption, emit, err, out
from accelkit.cli.store import reading, refuse_store_file
from accelkit.core import UserError
from accelkit.results.store import MAX_ROW_ID


def is_stdout(path: Path) -> bool:
    """``--out -``, or a path that is this process's stdout (``/dev/stdout``, ``/dev/fd/1``, the file stdout is
    redirected to): the report goes to stdout, and what the command says goes to stderr, not into the HTML."""
    if str(path) == "-":
        return True
    try:
        return os.path.samestat(os.stat(path), os.fstat(sys.stdout.fileno()))
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):  # no such path; a stdout with no fd
        return False


def check_out_path(path: Path) -> None:
    """Refuse, before any work, an --out that is a directory, lies in a directory that does not exist, or cannot
    be written — one line naming the path and the fix (nothing is created on the way)."""
    if path.is_dir():
        raise UserError(f"--out {path} is a directory; give a file path such as {path / 'report.html'}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        # the nearest part of the path that exists: a file there (`--out results.db/report.html`) is named as one,
        # not as a directory that "does not exist"
        blocking = next((p for p in (parent, *parent.parents) if p.exists()), None)
        if blocking is not None and not blocking.is_dir():
            raise UserError(f"--out {path}: {blocking} is a file, not a directory; choose a path in a directory")
        raise UserError(f"--out {path}: the directory {parent} does not exist; create it first or choose another path")
    if not os.access(parent, os.W_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise UserError(f"--out {path} cannot be written (permission denied); choose a path you can write")


EXAMPLES = examples(
    "accelkit report --out report.html",
    "accelkit report --run RUN_ID --out run.html --open   # one run (the id `accelkit bench` prints)",
)

def report_cmd(
    out_path: Path = typer.Option(Path("report.html"), "--out", help="Where to write the HTML file (- for stdout)."),
    run: str | None = typer.Option(None, "--run", help="Only the results of this run id (default: all)."),
    limit: int = typer.Option(500, "--limit", min=1, max=MAX_ROW_ID,
                              help="The newest N benchmark results in the runs table (the figures draw the newest 60)."),
    open_: bool = typer.Option(False, "--open", help="Open it in the default browser afterwards."),
    as_json: bool = JsonOption,
) -> None:
    """Write one self-contained HTML report (tables and plots, no network needed) from the results store."""
    # lazy: report's modules load to write a report, not at every command's start-up
    from accelkit.report.html import build_report, write_html

    to_stdout = is_stdout(out_path)
    if to_stdout and as_json:
        raise UserError(f"--out {out_path} writes the report to stdout, where --json writes its document; give --out "
                        "a file path, or leave --json out")
    if to_stdout and open_:
        raise UserError(f"--open opens a file, and --out {out_path} writes the report to stdout; give --out a file "
                        "path to open it")
    if not to_stdout:
        check_out_path(out_path)
        refuse_store_file(out_path, "the report", "report.html")
    with reading() as store:  # read-only: never waits on a writer's lock, creates no store, reports skipped rows
        if run is not None and (not run.strip() or not store.count(run_id=run)):
            raise UserError(f"--run {run!r}: no result in {store.path} has this run id; `accelkit bench` prints the "
                            "run id of what it stores (leave --run out to report every result)")
        html = build_report(store, run_id=run, limit=limit)
        total = store.count()
    path = out_path
    if to_stdout:  # a closed reader (`| head`) is the CLI's quiet BrokenPipeError, not a path to blame
        size = _to_stdout(html)
        err.print(f"wrote the report to stdout ({size / 2**20:.1f} MiB, {total} results in the store)",
                  highlight=False)
        return
    try:
        size = write_html(path, html)
    except OSError as exc:  # e.g. a full disk (/dev/full): the report is rebuilt from the store on a rerun
        raise UserError(f"--out {out_path}: cannot write the report ({exc.strerror or exc}); "
                        "choose another path") from exc
    data = {"path": str(path.resolve()), "bytes": size, "results_in_store": total}

    def render() -> None:
        out.print(f"wrote {path} ({size / 2**20:.1f} MiB, {total} results in the store)", highlight=False)

    emit(data, as_json, render)
    if open_:
        import webbrowser

        if not webbrowser.open(path.resolve().as_uri()):
            err.print(f"could not open a browser; open {path.resolve()} yourself", highlight=False)


def _to_stdout(html: str) -> int:
    data = html.encode("utf-8")
    stream = getattr(sys.stdout, "buffer", None)
    sys.stdout.flush()
    if stream is not None:
        stream.write(data)
        stream.flush()
    else:
        sys.stdout.write(html)
        sys.stdout.flush()
    return len(data)
