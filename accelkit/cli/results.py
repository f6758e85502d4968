"""`accelkit results list|show|export`: read the store (read-only: a store on read-only media lists fine);
--kind and --hardware accept what the rest of the CLI accepts and say so when nothing matches. `results import`
merges another store's export into this one; `results delete ID --yes` removes one row, readable or not."""

from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import Any, Literal

import typer
from typer.core import TyperCommand

from accelkit.cli.helptext import HelpGroup, examples
from accelkit.cli.output import JsonOption, emit, err, fmt_num, out, table
from accelkit.cli.store import reading, refuse_store_file
from accelkit.core import AccelkitError, UnknownNameError, UserError
from accelkit.core.errors import closest
from accelkit.core.terminal import printable
from accelkit.hardware import get_device
from accelkit.hardware.catalog import list_devices, match_device_name
from accelkit.hardware.probe_quality import best_matmul, dtypes_of, probe_quality
from accelkit.results import ResultStore, StoredResult, export, flat_row
from accelkit.results.importing import read_export
from accelkit.results.out_file import write_whole
from accelkit.results.store import MAX_ROW_ID, RESULT_KINDS

app = typer.Typer(cls=HelpGroup, help="The results store: every estimate and measurement.", no_args_is_help=True,
                  epilog=examples("accelkit results list", "accelkit results show 12", "accelkit results export > results.json"))

KindOption = typer.Option(None, "--kind", help=f"Only results of this kind ({', '.join(RESULT_KINDS)}).")
HardwareOption = typer.Option(
    None, "--hardware", help="Only results on this hardware: a catalog name or alias (h100, mi300x), cpu, or the name "
                             "as stored.")
RunOption = typer.Option(None, "--run", help="Only the results of this run id (what `accelkit bench` and `accelkit "
                                              "sweep` print; a sweep's points share it).")


class Filters:
    """--kind / --hardware resolved against the catalog and the store: the stored names they select; --run as given."""

    def __init__(self, store: ResultStore, kind: str | None, hardware: str | None, run: str | None = None):
        self.kind = _kind(store, kind) if kind is not None else None
        self.hardware_flag = hardware
        self.hardware = _hardware(store, hardware) if hardware is not None else None
        if run is not None and not run.strip():  # the store's filter would take '' as no filter at all
            raise UserError("--run '' names no run; give a run id (`accelkit results list` shows them) or leave --run out")
        self.run = run

    @property
    def given(self) -> bool:
        return self.kind is not None or self.hardware is not None or self.run is not None

    def query(self, store: ResultStore, **kwargs: Any) -> list[StoredResult]:
        return store.query(kind=self.kind, hardware=self.hardware, run_id=self.run, **kwargs)

    def count(self, store: ResultStore) -> int:
        return store.count(kind=self.kind, hardware=self.hardware, run_id=self.run)

    def describe(self) -> str:
        parts = []
        if self.kind is not None:
            parts.append(f"--kind {self.kind}")
        if self.hardware is not None:
            shown = f" ({', '.join(self.hardware)})" if self.hardware and self.hardware != [self.hardware_flag] else ""
            parts.append(f"--hardware {self.hardware_flag}{shown}")
        if self.run is not None:
            parts.append(f"--run {self.run}")
        return " ".join(parts)


def _kind(store: ResultStore, kind: str) -> str:
    known = sorted(set(RESULT_KINDS) | set(store.distinct("kind")))
    if kind in known:
        return kind
    near = closest(kind, known)
    hint = f"did you mean {near}? " if near else ""
    raise UserError(f"--kind {kind!r} is not a result kind; {hint}choose from {', '.join(known)}")


def _hardware(store: ResultStore, name: str) -> list[str]:
    """The stored hardware names that ``name`` means: every CPU for 'cpu', a catalog device under any of its
    names or aliases (and as drivers report it), else a stored name containing ``name``."""
    stored = store.distinct("hardware")
    key = name.strip().lower()
    if key == "cpu" or key.startswith("cpu:"):
        return [s for s in stored if s.lower().startswith(key)]
    try:
        spec = get_device(name)
    except UnknownNameError as exc:
        found = [s for s in stored if key and key in s.lower()]
        if found:
            return found
        known = [d.name for d in list_devices()] + [a for d in list_devices() for a in d.aliases]
        # stored names are often catalog names too (every plan stores its device's): each is listed once, in order
        listing = dict.fromkeys(["cpu", *stored, *(d.name for d in list_devices())])
        raise UnknownNameError("hardware", name, [*known, "cpu", *stored], listing=listing) from exc
    return [s for s in stored if s == spec.name or match_device_name(s) is spec]


@app.command("list", epilog=examples(
    "accelkit results list", "accelkit results list --kind bench --limit 50", "accelkit results list --run RUN_ID --json",
))
def list_cmd(
    kind: str | None = KindOption,
    hardware: str | None = HardwareOption,
    run: str | None = RunOption,
    limit: int = typer.Option(20, "--limit", min=1, max=MAX_ROW_ID, help="Newest N results."),
    as_json: bool = JsonOption,
) -> None:
    """List stored results, newest first."""
    with reading() as store:
        filters = Filters(store, kind, hardware, run)
        found = filters.query(store, limit=limit)
        unreadable = len(store.skipped)  # rows within the limit that could not be decoded (warned about above)
        total = store.count()
        matching = filters.count(store) if filters.given else total
        on = store.distinct("hardware") if filters.given and not matching else []
        path = store.path
    shown = f"{len(found)} of {matching} shown, newest first"
    if len(found) + unreadable < matching:  # the limit left some out
        shown += f"; --limit {matching} shows all"
    if unreadable:  # no limit shows them: say so rather than suggest a larger one
        shown += f"; {unreadable} could not be read (see the warnings)"
    if as_json and len(found) < matching:
        err.print(shown, highlight=False)  # stdout is the JSON document

    def render() -> None:
        rows = []
        peaks = _probe_peaks(found)
        for s in found:
            f = flat_row(s)
            headline = (f"{_figure(f['throughput'])} {f['throughput_unit'] or ''}".rstrip()  # no unit: not 'None'
                        if f["throughput"] is not None else None)
            if s.id in peaks:
                headline = f"{headline or '-'} · {peaks[s.id]}"
            mfu = _figure(f["mfu"])
            if f["mfu_above_peak"] is not None:  # explained in full by --json and `results show`
                mfu = f"{mfu} ⚠ above peak"
            rows.append((s.id, f["created_at"], f["type"], f["kind"], f["name"], f["hardware"], headline,
                         mfu, s.run_id))
        where = f" matching {filters.describe()}" if filters.given else ""
        if found:
            out.print(table(f"Results in {path}{where}: {len(found)} of {matching}"
                            + (f" ({total} in all)" if filters.given else ""),
                            ["id", "created (UTC)", "type", "kind", "name", "hardware", "headline", "MFU", "run"],
                            rows))
        if found and len(found) < matching:
            out.print(shown)
        if total == 0:
            out.print(f"No results yet in {path}: `accelkit hw probe --quick` makes one.")
        elif not matching:
            out.print(f"No result matches {filters.describe()}; {total} results in {path}, on hardware: "
                      f"{', '.join(on) or '-'}.", highlight=False)

    roles = _probe_peaks(found)
    emit([{**flat_row(s), **({"peak_role": roles[s.id]} if s.id in roles else {})} for s in found], as_json, render)


def _figure(value: float | None, digits: int = 3) -> str | None:
    """A headline or MFU cell: '1,234.500', or '5.56e-04' for a figure too small for ``digits`` decimals (a CPU
    prefill's MFU of 0.00056 read '0.000', a slow pipeline's 0.0004 images/s '0.000 images/s')."""
    if value is None:
        return None
    if value != 0 and abs(value) < 10 ** -digits:
        return f"{value:.2e}"
    return fmt_num(value, digits)


def _probe_peaks(found: list[StoredResult]) -> dict[int, str]:
    """Per listed probe, what it is to MFU and the report: 'full; the peak of fp32, bf16', or 'quick: no peak (the
    peaks: #3)' — a quicker or smaller probe listed first (newest) is not the machine's headline
    (``accelkit.hardware.probe_quality``). Judged among the probes listed."""
    by_hardware: dict[str | None, list[StoredResult]] = {}
    for s in found:
        if s.result.kind == "probe":
            by_hardware.setdefault(s.result.hardware, []).append(s)
    out: dict[int, str] = {}
    for probes in by_hardware.values():
        best = {dt: b for dt in dtypes_of(probes) if (b := best_matmul(probes, dt)) is not None}
        for s in probes:
            quality = probe_quality(s.result.details)
            mine = [dt for dt, b in best.items() if b.id == s.id]
            others = sorted({b.id for dt, b in best.items() if b.id != s.id})
            if mine:
                out[s.id] = f"{quality}; the peak of {', '.join(mine)}"
            else:
                out[s.id] = f"{quality}: no peak" + (f" (the peaks: {', '.join(f'#{i}' for i in others)})"
                                                     if others else "")
    return out


class _IdCommand(TyperCommand):
    """A command taking a result id: ``-1`` is refused as an id, not parsed as an unknown option ('No such option:
    -1', found in a hunt). Ids count from 1; no negative id counts from the end."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        for arg in args:
            if arg == "--":
                break
            if len(arg) > 1 and arg[0] == "-" and (arg[1].isdigit() or arg[1] == "."):
                raise UserError(f"result id {arg} is not valid: ids are whole numbers from 1 (no negative ids); "
                                "`accelkit results list` shows them")
        return super().parse_args(ctx, args)


@app.command("show", cls=_IdCommand, epilog=examples("accelkit results show 12", "accelkit results show 12 --json"))
def show_cmd(result_id: int = typer.Argument(..., help="Result id from `accelkit results list`."), as_json: bool = JsonOption) -> None:
    """Show one result in full (payload, environment, sample counts)."""
    with reading() as store:
        stored = store.get(result_id)
    data = stored.to_dict()

    def render() -> None:
        r = stored.result
        rows = [(k, v) for k, v in flat_row(stored).items() if v is not None]
        rows += [(f"samples {k}", f"{len(v)} values") for k, v in getattr(r, "samples", {}).items()]
        out.print(table(f"Result {stored.id}", ["field", "value"], rows))
        out.print_json(data=r.details)

    emit(data, as_json, render)


@app.command("export", epilog=examples(
    "accelkit results export --out results.json", "accelkit results export --format csv --kind bench > bench.csv",
))
def export_cmd(
    fmt: Literal["json", "csv"] = typer.Option("json", "--format", help="json (full records with raw samples) or csv (one row each)."),
    kind: str | None = KindOption,
    hardware: str | None = HardwareOption,
    run: str | None = RunOption,
    output: Path | None = typer.Option(None, "--out", help="Write to this file instead of stdout."),
) -> None:
    """Export results as JSON or CSV."""
    if output is not None:
        _check_out(output)
    with reading() as store:
        filters = Filters(store, kind, hardware, run)
        if run is not None and not store.count(run_id=run):
            raise UserError(f"--run {run!r}: no result in {store.path} has this run id; `accelkit results list` shows "
                            "the run ids (leave --run out to export every result)")
        results = filters.query(store, newest_first=False)
        skipped = len(store.skipped)
        total = store.count()
    if not results:  # (an empty export on stdout is otherwise a silent `[]`)
        err.print(f"no result matches {filters.describe()}; {total} results in {store.path}" if filters.describe()
                  else f"no results yet in {store.path}", highlight=False)
    text = export(results, fmt)
    if output is None:  # on a terminal, a name's escape sequence is shown, not run (a file or pipe gets it exact)
        # not typer.echo: off a terminal it strips what looks like an ANSI style ('\x1b[31m') from the text, so a CSV
        # piped to a file lost those characters of a stored name (the JSON escapes them itself)
        sys.stdout.write((printable(text) if sys.stdout.isatty() else text) + ("" if text.endswith("\n") else "\n"))
        sys.stdout.flush()
        return
    _write(output, text)
    err.print(f"wrote {len(results)} results to {output}" + (f" ({skipped} unreadable skipped)" if skipped else ""),
              highlight=False)


@app.command("import", epilog=examples(
    "accelkit results import gpu-results.json   # a GPU machine's `results export`",
    "ssh gpu-box accelkit results export | accelkit results import -",
))
def import_cmd(
    source: str = typer.Argument(..., help="A file `accelkit results export --format json` wrote (another machine's "
                                           "store), or - for standard input."),
    as_json: bool = JsonOption,
) -> None:
    """Import exported results into this store (a GPU machine's into the one your reports read); each result once."""
    name = "standard input" if source == "-" else source
    items = read_export(_read_text(source), name)  # the whole file is checked before anything is stored
    with ResultStore() as store:
        added = store.add_new(items)
        path = store.path
    ids, held, cleared = added.ids, added.held, added.cleared
    summary = {"store": str(path), "imported": len(ids), "already_stored": held, "ids": ids,
               "references_cleared": cleared}

    def render() -> None:
        line = f"imported {len(ids)} of {len(items)} results from {name} into {path}"
        if ids:
            line += f" (ids {ids[0]}–{ids[-1]})" if len(ids) > 1 else f" (id {ids[0]})"
        if held:
            line += f"; {held} already stored, skipped"
        if cleared:  # an export filtered by --kind or --run: what they cite stayed behind
            line += (f"; {cleared} reference{'s' if cleared > 1 else ''} (estimate_id, result_ids) to results not in "
                     f"{name} cleared")
        out.print(line, highlight=False)

    emit(summary, as_json, render)


@app.command("delete", cls=_IdCommand, epilog=examples("accelkit results delete 12 --yes   # the id a `skipped result 12` warning names",
                                        "accelkit results delete 12 --yes --json"))
def delete_cmd(
    result_id: int = typer.Argument(..., help="Result id from `accelkit results list` (or a skipped row's warning)."),
    yes: bool = typer.Option(False, "--yes", help="Delete it: required, as nothing brings a deleted result back."),
    as_json: bool = JsonOption,
) -> None:
    """Delete one result from the store, one that cannot be read too (its id from the warning that skips it)."""
    if not yes:
        raise UserError(f"`results delete {result_id}` removes the result for good; add --yes to delete it "
                        f"(`accelkit results export --out backup.json` keeps a copy of every readable result)")
    with ResultStore() as store:
        kind, name = store.delete(result_id)
        path = store.path
    emit({"store": str(path), "deleted": result_id, "kind": kind, "name": name}, as_json,
         lambda: out.print(f"deleted result {result_id} ({kind} {name!r}) from {path}", highlight=False))


def _read_stdin() -> str:
    """Standard input as text, or a one-line error when it is closed, empty or not UTF-8."""
    fix = "pipe in what `accelkit results export --format json` writes"
    if sys.stdin is None:  # started with standard input closed (`<&-`)
        raise UserError(f"standard input is closed; {fix}")
    stream = getattr(sys.stdin, "buffer", None)
    try:
        text = stream.read().decode("utf-8") if stream is not None else sys.stdin.read()
    except UnicodeDecodeError:
        raise UserError(f"standard input is not UTF-8 text; {fix}") from None
    except OSError as exc:
        raise UserError(f"cannot read standard input ({exc.strerror or exc}); {fix}") from exc
    if not text.strip():
        raise UserError(f"standard input is empty; {fix}, e.g. `accelkit results export --format json | accelkit "
                        "results import -`")
    return text


def _read_text(source: str) -> str:
    if source == "-":
        return _read_stdin()
    path = Path(source)
    try:
        return path.read_text(encoding="utf-8")
    except IsADirectoryError:
        raise UserError(f"{source} is a directory; give the file `accelkit results export --out FILE` wrote") from None
    except FileNotFoundError:
        raise UserError(f"{source} does not exist; give the file `accelkit results export --out FILE` wrote") from None
    except UnicodeDecodeError:
        raise UserError(f"{source} is not UTF-8 text; give the JSON file `accelkit results export` wrote") from None
    except OSError as exc:
        raise UserError(f"cannot read {source} ({exc.strerror or exc}); check the path and its permissions") from exc


def _check_out(path: Path) -> None:
    """--out must name a file in an existing folder: checked before anything is read."""
    if path.is_dir():
        raise UserError(f"--out {path} is a directory; give a file name, e.g. --out {path / 'results.json'}")
    parent = path.parent
    if not parent.exists():
        raise UserError(f"--out {path}: the folder {parent} does not exist; create it (mkdir -p {parent}) or pick "
                        "another path")
    if not parent.is_dir():
        raise UserError(f"--out {path}: {parent} is not a folder; pick another path")
    refuse_store_file(path, "the export", "export.json")


def _write(path: Path, text: str) -> None:
    """Written whole or not at all, through a symlink into its target (``accelkit.results.out_file``)."""
    try:
        write_whole(path, text)
    except OSError as exc:
        why = exc.strerror or str(exc)
        if exc.errno in (errno.ENOSPC, errno.EIO, errno.EDQUOT):
            raise AccelkitError(f"cannot write --out {path} ({why}); nothing was written — free some space or pick "
                                "another path") from exc
        raise UserError(f"cannot write --out {path} ({why}); pick another path") from exc
