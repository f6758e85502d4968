"""How commands use the results store: reading never writes (a read-only store lists fine) and says which
rows it had to skip; measuring commands open the store *before* measuring (an unwritable store fails in a
second, not after an hour of measuring), and a result that still cannot be stored is printed, not lost."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from accelkit.cli.output import err
from accelkit.core import AccelkitError, UserError, strict_json
from accelkit.results import ResultStore
from accelkit.results.store import default_path

#: skipped rows named one by one before the rest are summed up
MAX_NAMED_SKIPS = 10


def report(store: ResultStore) -> None:
    """Notes and skipped rows on stderr (stdout stays the command's document)."""
    for note in store.notes:
        err.print(f"note: {note}", highlight=False, markup=False, soft_wrap=True)
    skipped = sorted(store.skipped.items())
    for rid, why in skipped[:MAX_NAMED_SKIPS]:
        err.print(f"warning: skipped result {rid}: {why}", highlight=False, markup=False, soft_wrap=True)
    if len(skipped) > MAX_NAMED_SKIPS:
        rest = [rid for rid, _ in skipped[MAX_NAMED_SKIPS:]]
        err.print(f"warning: skipped {len(rest)} more results that cannot be read (ids {_ranges(rest)})",
                  highlight=False, markup=False, soft_wrap=True)


def _ranges(ids: list[int]) -> str:
    """[3, 4, 5, 9] → '3-5, 9'."""
    parts: list[str] = []
    start = prev = ids[0]
    for i in [*ids[1:], None]:
        if i is not None and i == prev + 1:
            prev = i
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if i is not None:
            start = prev = i
    return ", ".join(parts)


def refuse_store_file(path: Path, what: str, example: str) -> None:
    """Refuse an ``--out`` that is the results store's own file (or its WAL/SHM/journal): ``what`` was written over
    it, and every later command said "not an SQLite database" — `results export --out ~/.accelkit/results.db` and
    `report --out` alike (found in a hunt)."""
    store = default_path()
    target = os.path.realpath(path)
    for suffix in ("", "-wal", "-shm", "-journal"):
        if target == os.path.realpath(f"{store}{suffix}"):
            raise UserError(f"--out {path} is the results store's own file {store}{suffix}; writing {what} there "
                            f"would destroy the store — pick another path, e.g. --out {store.parent / example}")


@contextmanager
def reading() -> Iterator[ResultStore]:
    """The store opened read-only; what could not be read is reported when the block ends."""
    store = ResultStore(readonly=True)
    try:
        yield store
        report(store)  # not after an error: its one line says what went wrong
    finally:
        store.close()


def open_for_saving(save: bool, *, no_save: bool = True) -> ResultStore | None:
    """The writable store for a measuring command, opened before it measures (None with --no-save). ``no_save``:
    the command has --no-save, which the error offers (`accelkit sweep` has none: it always stores, and its error
    offered a flag that the command refused)."""
    if not save:
        return None
    try:
        return ResultStore()
    except AccelkitError as exc:
        # (the same kind: a bad ACCELKIT_HOME is the user's to fix, exit 2; a store that fails is exit 1)
        raise (UserError if isinstance(exc, UserError) else AccelkitError)(
            f"{exc}; or pass --no-save to measure without storing" if no_save else str(exc)) from exc


@contextmanager
def measuring(save: bool) -> Iterator[ResultStore | None]:
    """The store for a measuring command that also reads it (stored probes), closed when the block ends: writable
    with ``save`` (opened before measuring, as :func:`open_for_saving`); with --no-save read-only, so nothing is
    written or created, or None (with a note) when it cannot be read — measuring without storing needs no store."""
    if save:
        store = open_for_saving(True)
    else:
        try:
            store = ResultStore(readonly=True)
        except AccelkitError as exc:
            err.print(f"note: {exc}; measuring without it (--no-save: nothing is stored)", highlight=False,
                      markup=False, soft_wrap=True)
            store = None
    try:
        yield store
    finally:
        if store is not None:
            store.close()


def print_unsaved(document: dict[str, Any], exc: Exception, *, stored: Sequence[str] = (),
                  unstored: Sequence[str] = (), interrupted: str | None = None, importable: bool = False) -> NoReturn:
    """The measurement could not be (wholly) stored: its JSON goes to stdout, the reason to stderr, exit 1.
    ``stored`` names what made it into the store before the failure (e.g. 'fp32 · forward (result 12)') and
    ``unstored`` what did not; ``interrupted`` (what Ctrl-C left unfinished) makes it exit 130, as an interrupted
    run whose store took everything does. ``importable``: `accelkit results import` takes the document as it is —
    one Measurement, or a document whose ``unstored_results`` hold what was not stored — and the message says so
    (the way to store it once the store takes writes again)."""
    sys.stdout.write(strict_json.dumps(document, indent=2, default=str) + "\n")
    sys.stdout.flush()
    if stored:
        what = (f"Stored before the failure: {', '.join(stored)}; not stored: "
                f"{', '.join(unstored) or 'the rest of the document'}. The JSON of the whole run is printed on "
                "stdout above")
    else:
        what = "The measurement was not stored; its JSON is printed on stdout above"
    keep = ("redirect stdout to a file to keep it, and `accelkit results import FILE` stores it later" if importable
            else "redirect stdout to keep it")
    message = f"{exc}. {what} ({keep})"
    if unstored and not stored:  # several results, none stored: name them all
        message += f"; not stored: {', '.join(unstored)}"
    if interrupted is not None:
        err.print(f"interrupted ({interrupted}): {message}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(130)
    raise AccelkitError(message)


def print_unstored(document: dict[str, Any], error: str, *, name: str | None = None,
                   importable: bool = False) -> NoReturn:
    """One result the store refused, as `accelkit bench` reports it: the command's JSON document (``result_id``
    None, ``store_error`` why) on stdout whatever --json says, why (and ``name``, what was not stored) on stderr,
    exit 1 (``importable``: see :func:`print_unsaved`)."""
    print_unsaved({**document, "result_id": None, "store_error": error}, AccelkitError(error),
                  unstored=[name] if name else (), importable=importable)
