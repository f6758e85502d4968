"""The results store: one SQLite file (``$ACCELKIT_HOME/results.db``, default ``~/.accelkit``) with a row
per estimate or measurement — its JSON payload, raw samples and environment.

Durability: WAL journal, every write in its own ``BEGIN IMMEDIATE`` transaction, so concurrent writers
queue on the lock (``busy_timeout``) instead of failing, and a writer killed mid-run leaves either all of
a transaction or none of it. The schema is versioned with ``PRAGMA user_version``; ``MIGRATIONS[i]``
takes version i to i+1 and runs inside the same transaction as the version bump. A new store is built in a
temporary file and linked into place, so a store file is never seen half-made: an empty (0-byte) file at
the store's path is somebody else's doing (a truncated copy, a full disk) and is refused, not overwritten.
Every column is strict JSON (RFC 8259, which has no Infinity or NaN): a non-finite figure is stored as null and
named in the payload's ``non_finite`` (JSON Pointer → 'inf', '-inf' or 'nan'), and reading puts it back.

Recovery (reading never needs write access, and one bad row never hides the others):
  * ``ResultStore(readonly=True)`` opens ``mode=ro`` and never sets WAL or migrates; on a read-only folder,
    where SQLite cannot create the WAL index, it falls back to ``immutable=1`` (rows still only in the WAL
    are then not visible, which ``notes`` says).
  * a row whose JSON (or UTF-8) cannot be decoded is skipped and recorded in ``skipped`` (id → reason);
  * a damaged page (``database disk image is malformed``) switches reading to one row at a time, by the
    ids the index or the id sequence still know, so every row on an intact page is still read; a read-only
    open also gets past a truncated file (``writable_schema``), which SQLite otherwise refuses outright.
"""

from __future__ import annotations

import csv
import errno
import io
import json
import operator
import os
import sqlite3
import urllib.parse
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from accelkit.core import AccelkitError, Estimate, Measurement, UserError, strict_json
from accelkit.core.bench_result import BenchResult
from accelkit.hardware.probe_quality import probe_quality
from accelkit.results.finite_rows import NON_FINITE, put_back, take_out
from accelkit.results.import_checks import loadtest_problem, probe_problem
from accelkit.results.references import remap_ids

MIGRATIONS: list[str] = [
    # 0 → 1: the results table
    """
    CREATE TABLE results (
        id          INTEGER PRIMARY KEY AUTOINCREMENT,
        type        TEXT NOT NULL CHECK (type IN ('estimate', 'measurement')),
        kind        TEXT NOT NULL,          -- what produced it: plan, probe, bench, loadtest …
        name        TEXT NOT NULL,
        hardware    TEXT,
        created_at  TEXT NOT NULL,          -- UTC ISO-8601
        run_id      TEXT,                   -- groups rows written together (bench variants, a sweep)
        payload     TEXT NOT NULL,          -- JSON of the Estimate/Measurement less samples and environment
        samples     TEXT NOT NULL,          -- JSON: series name → raw values
        environment TEXT NOT NULL           -- JSON
    );
    CREATE INDEX results_kind_time ON results (kind, created_at);
    CREATE INDEX results_run ON results (run_id);
    """,
]
SCHEMA_VERSION = len(MIGRATIONS)
#: the results table's columns at version 1, in order (what a store rebuilt without its user_version must have)
_V1_COLUMNS = ("id", "type", "kind", "name", "hardware", "created_at", "run_id", "payload", "samples", "environment")

#: what produces rows (the ``kind`` column); `results list --kind` also accepts any kind already stored
RESULT_KINDS = ("plan", "probe", "collectives", "bench", "tune", "profile", "loadtest", "sweep", "sweep-error")


def accelkit_home() -> Path:
    """``$ACCELKIT_HOME`` or ``~/.accelkit``; a leading ~ is the home folder (a quoted ACCELKIT_HOME='~/acc' reaches
    us unexpanded, and made a folder named '~' in the working directory)."""
    return Path(os.path.expanduser(os.environ.get("ACCELKIT_HOME") or "~/.accelkit"))


def default_path() -> Path:
    return accelkit_home() / "results.db"


@dataclass(frozen=True, slots=True)
class StoredResult:
    """A result with its row id and group."""

    id: int
    run_id: str | None
    result: Estimate | Measurement
    #: the figures that were not finite, by JSON Pointer into :meth:`to_dict` ('/details/ratio' → 'inf'): strict JSON
    #: (an export, ``--json``) writes them as null, and this says which nulls were inf, -inf or NaN
    non_finite: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        data = {"id": self.id, "run_id": self.run_id, "type": _type_of(self.result), **self.result.to_dict()}
        if self.non_finite:
            data[NON_FINITE] = dict(self.non_finite)
        return data


@dataclass(frozen=True, slots=True)
class Added:
    """What :meth:`ResultStore.add_new` did: the new rows' ids, how many items were held already (or repeated), and
    how many references it cleared because they named a result that was not among the items."""

    ids: list[int]
    held: int
    cleared: int


def _type_of(result: Estimate | Measurement) -> str:
    return "measurement" if isinstance(result, Measurement) else "estimate"


#: the key under which a command's JSON document, printed because the store refused a write, holds the results it
#: could not store — each as `accelkit results export` writes a record, so `accelkit results import` stores them later
UNSTORED_KEY = "unstored_results"


def unstored_record(result: Estimate | Measurement, run_id: str | None) -> dict[str, Any]:
    """``result`` as an exported record (no id: it has none yet), raw samples included."""
    return {"run_id": run_id, "type": _type_of(result), **result.to_dict()}


def check_typed(result: Estimate | Measurement) -> None:
    """A ValueError when ``result`` cannot be read the way its consumers read it: a bench row's details as a
    :class:`BenchResult` (``results list``, the CSV, the report), a loadtest row's curve and a probe row's datasheet
    figures as the report reads them (``accelkit.results.import_checks``). Checked on import (refused) and on reading
    (skipped with a warning): one bench row with ``mfu.value = "41%"``, one loadtest curve point without its
    request_throughput, made every listing or report of the whole store an internal error (found in review)."""
    if not isinstance(result, Measurement):
        return
    if result.kind == "bench":
        try:
            BenchResult.from_measurement(result)
        except (TypeError, KeyError, AttributeError, ValueError) as exc:
            raise ValueError(f"details do not read as a bench result ({exc})") from None
    problem = {"loadtest": loadtest_problem, "probe": probe_problem}.get(result.kind)
    found = problem(result.details) if problem is not None else None
    if found is not None:
        raise ValueError(f"{found}, which the report reads")


DEFAULT_TIMEOUT_S = 60.0  # how long a write waits for another writer's lock
MAX_ROW_ID = 2**63 - 1  # SQLite's INTEGER range; a larger id cannot name a row

# SQLite's primary result codes that mean "this file (or a page of it) is damaged", not "busy" or "denied"
_DAMAGE_CODES = (10, 11, 26)  # SQLITE_IOERR, SQLITE_CORRUPT, SQLITE_NOTADB
_DENIED_CODES = (8, 14, 23)  # SQLITE_READONLY, SQLITE_CANTOPEN, SQLITE_AUTH
_FULL_CODE = 13  # SQLITE_FULL
# extended SQLITE_IOERR codes of the WAL index (results.db-shm) that cannot be created, grown or mapped: what a full
# disk gives on opening a WAL store (even read-only: SQLite builds its -shm first), not damage to the store
_SHM_CODES = (4618, 4874, 5386)  # SQLITE_IOERR_SHMOPEN, SQLITE_IOERR_SHMSIZE, SQLITE_IOERR_SHMMAP


T = TypeVar("T")
_IDENTITY = "type, kind, name, hardware, created_at, run_id"  # the first columns: add_new compares the rest too
_INSERT = f"INSERT INTO results ({_IDENTITY}, payload, samples, environment) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"


class _Undecodable(bytes):
    """A TEXT value that is not valid UTF-8: decoding it fails that row, not the whole query."""


def _text(raw: bytes) -> str | bytes:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return _Undecodable(raw)


def _code(exc: sqlite3.Error) -> int | None:
    code = getattr(exc, "sqlite_errorcode", None)
    return None if code is None else code & 0xFF


def _is_full(exc: sqlite3.Error) -> bool:
    """A full disk (SQLITE_FULL), or a WAL index SQLite could not make or grow — on a full disk, as a rule."""
    code = getattr(exc, "sqlite_errorcode", None)
    if code is not None:
        return code in _SHM_CODES or code & 0xFF == _FULL_CODE
    return "disk is full" in str(exc)


def _is_damage(exc: sqlite3.Error) -> bool:
    if _is_full(exc):
        return False
    code = _code(exc)
    if code is not None:
        return code in _DAMAGE_CODES
    return "malformed" in str(exc) or "not a database" in str(exc)


def _has_utf8(value: Any) -> bool:
    try:
        str(value).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _names(value: str | Iterable[str] | None, field: str = "kind") -> list[str] | None:
    """A filter of one name or several; anything else is a TypeError naming the argument (``kind=3`` was a bare
    "'int' object is not iterable")."""
    if value is None:
        return None
    names = [value] if isinstance(value, str) else list(value) if isinstance(value, Iterable) else None
    if names is None or not all(isinstance(n, str) for n in names):
        raise TypeError(f"{field}={value!r} is not valid; give a name, a list of names, or None for all")
    return names


def _check_run_id(run_id: object) -> None:
    """A run id is text (the CLI's --run): an int was stored as an integer that no ``run_id="…"`` filter matches."""
    if run_id is not None and not isinstance(run_id, str):
        raise TypeError(f"run_id={run_id!r} is not valid; give a string (e.g. a uuid4 hex), or None")


class ResultStore:
    """The store at ``path`` (default ``$ACCELKIT_HOME/results.db``).

    Writable (the default): created and migrated as needed, and the write lock is taken once on opening, so
    a store that cannot be written fails here — before a measurement starts, not after it ends.
    ``readonly=True``: reads what is there without writing anything (a missing file reads as empty and is not
    created). Rows that cannot be read are skipped and listed in ``skipped``; ``notes`` says how it was opened
    when that matters (immutable, damaged).
    """

    def __init__(self, path: str | Path | None = None, *, timeout_s: float | None = None, readonly: bool = False):
        self.path = Path(path) if path is not None else default_path()
        self.readonly = readonly
        self.timeout_s = DEFAULT_TIMEOUT_S if timeout_s is None else timeout_s
        self.skipped: dict[int, str] = {}  # row id → why it could not be read
        self.notes: list[str] = []
        self._damaged = False
        self._scan_cache: list[tuple[Any, ...]] | None = None
        self._check_file()
        self._conn = self._open_readonly() if readonly else self._open_writable()
        self._conn.text_factory = _text

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- opening ----------------------------------------------------------------------------------
    def _check_file(self) -> None:
        """Refuse what SQLite would silently take as a new database (an empty file) or fail on obscurely."""
        if self.path.is_dir():
            raise AccelkitError(f"the results store {self.path} is a directory, not a file; move it away or set "
                                "ACCELKIT_HOME to another folder")
        folder = next((p for p in self.path.parents if p.exists()), None)
        if folder is not None and not folder.is_dir():  # reading said 'No results yet', writing '(File exists)'
            # the user's setting (ACCELKIT_HOME), not a failure: exit 2, as any bad input (was exit 1)
            raise UserError(f"{folder} is a file, not a folder, so the results store {self.path} cannot be there; "
                                "set ACCELKIT_HOME to a folder")
        if self.path.is_file() and self.path.stat().st_size == 0:
            raise AccelkitError(
                f"the results store {self.path} is an empty (0-byte) file, not a database: a truncated copy or a full "
                f"disk? accelkit does not start a new store over it; restore it from a backup, or move it aside "
                f"(mv {self.path} {self.path}.empty) and a new store is created")

    def _open_writable(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise AccelkitError(f"cannot create the results store's folder {self.path.parent} "
                                f"({exc.strerror or exc}); set ACCELKIT_HOME to a writable folder") from exc
        if not self.path.exists():
            self._create()
        self._check_writable()
        conn = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
            conn.execute("PRAGMA journal_mode = WAL")
            conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: safe against process death
            self._migrate(conn)  # takes the write lock: an unwritable store fails here
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise AccelkitError(self._failure("open", exc)) from exc
        except BaseException:
            conn.close()
            raise
        return conn

    def _check_writable(self) -> None:
        """Refuse a store file (or its -wal/-shm) this process may not write. SQLite opens such a file read-only
        without a word, and the write lock taken on opening writes nothing, so it passed, and the first add failed
        — after the measurement the store was opened for. Not a test write: opening must not need free space (a
        store whose next write fails is a failure of that write, reported with the result kept)."""
        for path in (self.path, Path(f"{self.path}-wal"), Path(f"{self.path}-shm")):
            if path.exists() and not os.access(path, os.W_OK):  # mode, read-only mount, immutable flag
                raise AccelkitError(f"cannot open the results store {self.path}: {path} cannot be written (a read-only "
                                    "file or mount); make it writable or set ACCELKIT_HOME to a writable folder "
                                    "(`accelkit results list` can still read this one)")

    def _create(self) -> None:
        """Build a new store in a temporary file and link it into place: never a half-made file at ``path``,
        and two processes creating it at once end with one store (the second one's link fails)."""
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}-{uuid.uuid4().hex[:8]}.new")
        try:
            conn = sqlite3.connect(tmp, isolation_level=None)
            try:
                conn.execute("PRAGMA journal_mode = WAL")
                self._migrate(conn)
            finally:
                conn.close()
            try:
                os.link(tmp, self.path)
            except FileExistsError:
                pass  # another process created it first: use theirs
            except OSError:  # a filesystem without hard links
                if not self.path.exists():
                    os.replace(tmp, self.path)
        except (OSError, sqlite3.DatabaseError) as exc:
            if _is_full(exc) if isinstance(exc, sqlite3.Error) else exc.errno in (errno.ENOSPC, errno.EDQUOT):
                raise AccelkitError(f"cannot create the results store {self.path}: disk full ({exc}); free some "
                                    "space, or set ACCELKIT_HOME to a folder on another disk") from exc
            raise AccelkitError(f"cannot create the results store {self.path} ({exc}); set ACCELKIT_HOME to a "
                                "writable folder") from exc
        finally:
            for suffix in ("", "-wal", "-shm", "-journal"):
                with suppress(OSError):
                    os.unlink(f"{tmp}{suffix}")

    def _open_readonly(self) -> sqlite3.Connection:
        if not self.path.is_file():
            return self._empty()  # nothing stored yet; reading creates nothing
        uri = "file:" + urllib.parse.quote(str(self.path.absolute())) + "?mode=ro"
        immutable = writable_schema = False
        while True:
            conn = sqlite3.connect(uri + ("&immutable=1" if immutable else ""), uri=True, timeout=self.timeout_s,
                                   isolation_level=None)
            try:
                if writable_schema:  # lets SQLite open a truncated file; harmless on a read-only connection
                    conn.execute("PRAGMA writable_schema = ON")
                version, tables = self._schema(conn)
                break
            except sqlite3.DatabaseError as exc:
                conn.close()
                full = _is_full(exc)
                if (full or _code(exc) in _DENIED_CODES) and not immutable:
                    # a WAL store in a folder we cannot write, or on a full disk: SQLite cannot create (or grow) the
                    # WAL index there; immutable reads the database file alone
                    immutable = True
                    why = f"the disk of {self.path.parent} is full" if full else f"{self.path.parent} is read-only"
                    wal = Path(f"{self.path}-wal")
                    if wal.is_file() and wal.stat().st_size > 0:
                        self.notes.append(f"{why}: the store was opened immutable, so the rows still in {wal.name} "
                                          "(not yet checkpointed) are not visible")
                    elif full:
                        self.notes.append(f"{why} (SQLite cannot make the store's WAL index): read without it; "
                                          "nothing can be stored there until space is freed")
                    continue
                if _is_damage(exc) and not writable_schema:
                    writable_schema = True
                    continue
                raise AccelkitError(self._failure("read", exc)) from exc
        if writable_schema:
            self._mark_damaged("truncated: the file is shorter than its header says")
        if version > SCHEMA_VERSION:
            conn.close()
            raise AccelkitError(self._newer(version))
        if "results" not in tables:
            conn.close()
            self._not_ours(tables)
            return self._empty()
        return conn

    def _empty(self) -> sqlite3.Connection:
        conn = sqlite3.connect(":memory:", isolation_level=None)
        self._migrate(conn)
        return conn

    @staticmethod
    def _schema(conn: sqlite3.Connection) -> tuple[int, set[str]]:
        version = int(conn.execute("PRAGMA user_version").fetchone()[0])
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_schema WHERE type = 'table'")}
        return version, tables - {"sqlite_sequence"}

    def _not_ours(self, tables: set[str]) -> None:
        if tables - {"results"}:
            raise AccelkitError(f"{self.path} is an SQLite file but not an accelkit results store (its tables: "
                                f"{', '.join(sorted(tables))}); set ACCELKIT_HOME to another folder")

    def _newer(self, version: int) -> str:
        return (f"{self.path} has schema version {version}, newer than this accelkit knows ({SCHEMA_VERSION}); "
                "upgrade accelkit or point ACCELKIT_HOME elsewhere")

    def _failure(self, action: str, exc: sqlite3.Error) -> str:
        """One sentence for an SQLite error: what happened to which file, and what to do."""
        if isinstance(exc, sqlite3.ProgrammingError) and "closed database" in str(exc):  # not the file's fault:
            # "check that it is readable" sent the user to look at a file that is fine (found by the Python API hunt)
            return (f"cannot {action} the results store {self.path}: this ResultStore was closed (close() or the end "
                    "of its `with` block); open a new ResultStore(...)")
        code = _code(exc)
        if code == 26 or (code is None and "not a database" in str(exc)):  # SQLITE_NOTADB
            return (f"the results store {self.path} is not an SQLite database ({exc}): another file, or its first "
                    f"page is damaged; move it aside (mv {self.path} {self.path}.bad) and a new store is created")
        if _is_full(exc):
            index = "" if code == _FULL_CODE else f"SQLite cannot make or grow its WAL index {self.path.name}-shm, "
            return (f"cannot {action} the results store {self.path}: disk full ({index}{exc}); free some space, or "
                    "set ACCELKIT_HOME to a folder on another disk (`accelkit results list` still reads this store)")
        if action == "write" and code == 10:  # SQLITE_IOERR while writing: space, not damage (SQLITE_FULL: above)
            return (f"cannot write the results store {self.path} ({exc}): is its disk full? Free some space, or set "
                    "ACCELKIT_HOME to a folder on another disk")
        if _is_damage(exc):
            return (f"the results store {self.path} is damaged ({exc}); reading it still works row by row: "
                    f"`accelkit results export --out backup.json` saves every intact result; then move the file "
                    f"aside (mv {self.path} {self.path}.damaged) and a new store is created")
        if code == 5:  # SQLITE_BUSY
            return (f"the results store {self.path} stayed locked by another process for {self.timeout_s:g} s "
                    f"({exc}); let that process finish and retry")
        if action == "read":
            return f"cannot read the results store {self.path} ({exc}); check that it is readable"
        if code in _DENIED_CODES or code == 13:  # 13: SQLITE_FULL
            return (f"cannot {action} the results store {self.path} ({exc}); set ACCELKIT_HOME to a writable "
                    "folder with free space (`accelkit results list` can still read this one)")
        return f"cannot {action} the results store {self.path}: {exc}"

    @contextmanager
    def _write(self, conn: sqlite3.Connection | None = None) -> Iterator[sqlite3.Connection]:
        conn = conn or self._conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
            conn.execute("COMMIT")
        except BaseException:
            # SQLite may have rolled the transaction back itself (SQLITE_FULL, SQLITE_IOERR): a second ROLLBACK
            # then fails ('no transaction is active') and that error would replace the one that says why
            if conn.in_transaction:
                with suppress(sqlite3.Error):
                    conn.execute("ROLLBACK")
            raise

    def _migrate(self, conn: sqlite3.Connection) -> None:
        with self._write(conn):
            version, tables = self._schema(conn)
            if version > SCHEMA_VERSION:
                raise AccelkitError(self._newer(version))
            if version == 0:
                self._not_ours(tables)
                if "results" in tables:  # a store rebuilt by `sqlite3 .dump` (which drops user_version)
                    version = self._adopt(conn)
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step].split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {step + 1}")

    def _adopt(self, conn: sqlite3.Connection) -> int:
        """The schema version of a results table without one (``sqlite3 .dump`` and ``.recover`` keep the rows and
        lose ``user_version``): version 1 when its columns are version 1's, else refused by name."""
        columns = [r[1] for r in conn.execute("PRAGMA table_info(results)")]
        if columns != list(_V1_COLUMNS):
            raise AccelkitError(f"{self.path} has a results table without a schema version whose columns "
                                f"({', '.join(columns)}) are not an accelkit store's ({', '.join(_V1_COLUMNS)}); "
                                "set ACCELKIT_HOME to another folder")
        conn.execute("CREATE INDEX IF NOT EXISTS results_kind_time ON results (kind, created_at)")
        conn.execute("CREATE INDEX IF NOT EXISTS results_run ON results (run_id)")
        conn.execute("PRAGMA user_version = 1")
        return 1

    @property
    def schema_version(self) -> int:
        return int(self._pragma("user_version"))

    # ---- writing ----------------------------------------------------------------------------------
    def add(self, result: Estimate | Measurement, *, run_id: str | None = None) -> int:
        """Store one result; returns its id."""
        return self.add_many([result], run_id=run_id)[0]

    def add_many(self, results: Iterable[Estimate | Measurement], *, run_id: str | None = None) -> list[int]:
        """Store several results in one transaction: all of them land, or none (then AccelkitError)."""
        rows = [self._row(r, run_id) for r in results]
        return self._writing(lambda conn: [int(conn.execute(_INSERT, row).lastrowid) for row in rows])  # type: ignore[arg-type]

    def add_new(self, items: Iterable[tuple[int | None, str | None, Estimate | Measurement]]) -> Added:
        """Store each (its id in the store it came from, run id, result) that this store does not hold yet, in one
        transaction (all or none): a result is held when a row is the same in every column — payload, samples and
        environment too — so importing the same export twice stores it once, while results that share a name, a
        hardware, a second and a run (a bench's precisions, a plan sweep's layouts) are each kept (comparing the
        first columns alone dropped all but one of them, found in review). References between them (a bench's
        ``estimate_id``, a tune summary's ``result_ids``) are rewritten to the ids here; one to a result not among
        ``items`` (an export filtered by --kind) is cleared, never left naming an unrelated row of this store."""
        items = list(items)

        def work(conn: sqlite3.Connection) -> tuple[list[int], int]:
            held: dict[tuple[Any, ...], list[int]] = {}  # the first columns → the ids of the rows that have them
            for row in conn.execute(f"SELECT id, {_IDENTITY} FROM results"):
                held.setdefault(tuple(row[1:]), []).append(int(row[0]))
            rows: dict[int, tuple[Any, ...] | None] = {}  # id → its row as _row writes it (read when first compared)
            ids: dict[int, int] = {}  # the exporting store's id → this store's
            new, cleared = [], 0
            for old_id, run_id, result in items:  # in id order: a row comes after the rows it cites
                dangling: list[int] = []
                mapped = result.replace(details=remap_ids(result.details, ids, dangling)) if result.details else result
                row = self._row(mapped, run_id)
                same = self._held(conn, held, rows, row)
                if same is None and dangling:  # as exported: this is the store it came from (its references hold)
                    same = self._held(conn, held, rows, self._row(result, run_id))
                if same is None:
                    same = int(conn.execute(_INSERT, row).lastrowid)  # type: ignore[arg-type]
                    held.setdefault(row[:6], []).append(same)  # (read back only if compared: no second copy)
                    new.append(same)
                    cleared += len(dangling)
                if old_id is not None:
                    ids[old_id] = same
            return new, cleared

        new, cleared = self._writing(work)
        return Added(ids=new, held=len(items) - len(new), cleared=cleared)

    def _held(self, conn: sqlite3.Connection, held: dict[tuple[Any, ...], list[int]],
              rows: dict[int, tuple[Any, ...] | None], row: tuple[Any, ...]) -> int | None:
        """The id of a stored row equal to ``row`` in every column, or None. A stored row is compared as this version
        writes it (decoded and encoded again), so a row stored by an earlier version still matches its own export."""
        for rid in held.get(row[:6], ()):
            if rid not in rows:
                found = conn.execute(f"SELECT {self._COLUMNS} FROM results WHERE id = ?", (rid,)).fetchone()
                try:
                    stored = self._from_row(found)
                except ValueError:  # an unreadable row equals nothing
                    rows[rid] = None
                else:
                    rows[rid] = self._row(stored.result, stored.run_id)
            if rows[rid] == row:
                return rid
        return None

    def delete(self, result_id: int) -> tuple[str, str]:
        """Delete one row by id — read or not: a row every listing skips is the one to remove — and return its (kind,
        name); a missing id is a UserError. Ids are never given again (AUTOINCREMENT), so a reference to the deleted
        row (a bench's ``estimate_id``) can never name another one."""
        missing = UserError(f"no result with id {result_id} in {self.path}; `accelkit results list` shows the ids")
        if not 1 <= result_id <= MAX_ROW_ID:
            raise missing

        def work(conn: sqlite3.Connection) -> tuple[str, str]:
            row = conn.execute("SELECT kind, name FROM results WHERE id = ?", (result_id,)).fetchone()
            if row is None:
                raise missing
            conn.execute("DELETE FROM results WHERE id = ?", (result_id,))
            return str(row[0]), str(row[1])

        return self._writing(work)

    def _writing(self, work: Callable[[sqlite3.Connection], T]) -> T:
        """``work`` in one write transaction; a failure is an AccelkitError saying why and what to do."""
        if self.readonly:
            raise AccelkitError(f"the results store {self.path} was opened read-only; nothing can be stored")
        try:
            with self._write() as conn:
                done = work(conn)
        except sqlite3.DatabaseError as exc:
            raise AccelkitError(self._failure("write", exc)) from exc
        self._scan_cache = None
        return done

    @staticmethod
    def _row(result: Estimate | Measurement, run_id: str | None) -> tuple[Any, ...]:
        # strict JSON in every column (jq, JSON.parse, sqlite's json_valid reject Infinity/NaN): a non-finite
        # figure is stored as null and named, with its value, under the payload's 'non_finite'; reading puts it back
        # (a null alone would fail the row's typed read — an inf latency sample — and so lose the row)
        if not isinstance(result, (Estimate, Measurement)):  # was a bare AttributeError ('str' has no 'to_dict')
            raise TypeError(f"result={_short(result)} is not an accelkit.core Estimate or Measurement; store what "
                            "accelkit.plan.plan / to_estimate or a bench returns")
        _check_run_id(run_id)
        non_finite: dict[str, str] = {}
        data = take_out(result.to_dict(), "", non_finite)
        samples = data.pop("samples", {})
        environment = data.pop("environment")
        if non_finite:
            data[NON_FINITE] = non_finite
        return (
            _type_of(result), result.kind, result.name, result.hardware, result.created_at, run_id,
            *(json.dumps(column, allow_nan=False) for column in (data, samples, environment)),
        )

    # ---- reading ----------------------------------------------------------------------------------
    _COLUMNS = "id, type, run_id, payload, samples, environment, kind, hardware, created_at"

    @staticmethod
    def _from_row(row: tuple[Any, ...]) -> StoredResult:
        """Decode one row; a ValueError names the column that is wrong."""
        rid, rtype, run_id, payload, samples, environment = row[:6]

        def load(column: str, text: Any) -> Any:
            if not isinstance(text, str):
                raise ValueError(f"{column} is not valid UTF-8 text")
            try:
                return json.loads(text)
            except json.JSONDecodeError as exc:
                raise ValueError(f"{column} is not valid JSON ({exc.msg} at character {exc.pos})") from None

        data = load("payload", payload)
        if not isinstance(data, dict):
            raise ValueError(f"payload is a JSON {type(data).__name__}, not an object")
        data["environment"] = load("environment", environment)
        if rtype == "measurement":
            data["samples"] = load("samples", samples)
        non_finite = put_back(data, data.pop(NON_FINITE, None))
        group = run_id if isinstance(run_id, str) else None
        if rtype not in ("measurement", "estimate"):
            raise ValueError(f"type {rtype!r} is neither measurement nor estimate")
        try:
            result = Measurement.from_dict(data) if rtype == "measurement" else Estimate.from_dict(data)
        except (TypeError, KeyError, AttributeError) as exc:
            raise ValueError(f"payload does not describe a result ({exc})") from None
        except ValueError as exc:
            raise ValueError(f"payload: {exc}") from None
        check_typed(result)
        return StoredResult(rid, group, result, non_finite)

    def _decode(self, row: tuple[Any, ...]) -> StoredResult | None:
        try:
            return self._from_row(row)
        except ValueError as exc:
            self.skipped[int(row[0])] = str(exc)
            return None

    def _mark_damaged(self, why: str) -> None:
        if not self._damaged:
            self._damaged = True
            self.notes.append(f"the store is damaged ({why}); read row by row: every row on an intact page is "
                              f"listed, the others are reported as skipped")

    def _select(self, sql: str, params: list[Any]) -> list[tuple[Any, ...]] | None:
        """``sql`` fetched in one go, or None when the store is damaged (the caller scans row by row)."""
        if self._damaged:
            return None
        try:
            return self._conn.execute(sql, params).fetchall()
        except sqlite3.DatabaseError as exc:
            if not _is_damage(exc):
                raise AccelkitError(self._failure("read", exc)) from exc
            self._mark_damaged(str(exc))
            return None

    def _ids_from(self, sql: str) -> set[int]:
        """Ids a query yields before it hits a damaged page."""
        ids: set[int] = set()
        try:
            for (rid,) in self._conn.execute(sql):
                ids.add(int(rid))
        except sqlite3.DatabaseError:
            pass
        return ids

    def _scan(self) -> list[tuple[Any, ...]]:
        """Every readable row, read one id at a time; an unreadable id goes into ``skipped``. The ids come from
        both indexes (they live on their own pages) and from the AUTOINCREMENT sequence (every id ever given)."""
        if self._scan_cache is not None:
            return self._scan_cache
        ids = self._ids_from("SELECT id FROM results INDEXED BY results_kind_time")
        ids |= self._ids_from("SELECT id FROM results INDEXED BY results_run")
        try:
            seq = self._conn.execute("SELECT seq FROM sqlite_sequence WHERE name = 'results'").fetchone()
            ids |= set(range(1, int(seq[0]) + 1)) if seq else set()
        except sqlite3.DatabaseError:
            pass
        rows = []
        for rid in sorted(ids):
            try:
                row = self._conn.execute(f"SELECT {self._COLUMNS} FROM results WHERE id = ?", (rid,)).fetchone()
            except sqlite3.DatabaseError as exc:
                self.skipped[rid] = f"unreadable ({exc})"
                continue
            if row is not None:
                rows.append(row)
        self._scan_cache = rows
        return rows

    @staticmethod
    def _where(kinds: list[str] | None, hardware: list[str] | None, run_id: str | None) -> tuple[str, list[Any]]:
        where, params = [], []
        for column, values in (("kind", kinds), ("hardware", hardware), ("run_id", [run_id] if run_id else None)):
            if values is not None:
                # SQLite keeps text as UTF-8: a value without a UTF-8 form (argv bytes that were not UTF-8, decoded
                # with surrogates) matches no row — and cannot be bound
                values = [v for v in values if _has_utf8(v)]
                where.append(f"{column} IN ({', '.join('?' * len(values))})" if values else "0")
                params.extend(values)
        return (" WHERE " + " AND ".join(where)) if where else "", params

    @staticmethod
    def _matches(row: tuple[Any, ...], kinds: list[str] | None, hardware: list[str] | None, run_id: str | None) -> bool:
        return ((kinds is None or row[6] in kinds) and (hardware is None or row[7] in hardware)
                and (run_id is None or row[2] == run_id))

    def get(self, result_id: int) -> StoredResult:
        """One result by id; a missing id is a UserError that says how to list them, an unreadable one an
        AccelkitError that names it. An id that is not an integer (a str from a form or argv) is a TypeError saying
        so — '1' is not guessed to mean 1; integer types such as numpy's are taken as their int."""
        try:
            if isinstance(result_id, bool):
                raise TypeError
            result_id = operator.index(result_id)
        except TypeError:
            raise TypeError(f"result id must be an int, not {type(result_id).__name__} {result_id!r}"
                            + (f"; use store.get(int({result_id!r}))" if isinstance(result_id, str)
                               and result_id.strip().isdigit() else "")) from None
        if not 1 <= result_id <= MAX_ROW_ID:
            raise UserError(f"no result with id {result_id} in {self.path} (ids are 1 … {MAX_ROW_ID}); "
                            "`accelkit results list` shows the ids")
        found = self._select(f"SELECT {self._COLUMNS} FROM results WHERE id = ?", [result_id])
        if found is None:
            found = [r for r in self._scan() if r[0] == result_id]
        if not found:
            why = self.skipped.get(result_id)
            if why is not None:
                raise AccelkitError(f"result {result_id} in {self.path} cannot be read: {why}; the other results are "
                                    "intact (`accelkit results list`)")
            raise UserError(f"no result with id {result_id} in {self.path}; `accelkit results list` shows the ids")
        stored = self._decode(found[0])
        if stored is None:
            raise AccelkitError(f"result {result_id} in {self.path} cannot be decoded: {self.skipped[result_id]}; "
                                "the other results are intact (`accelkit results list`)")
        return stored

    def query(
        self,
        *,
        kind: str | Iterable[str] | None = None,
        hardware: str | Iterable[str] | None = None,
        run_id: str | None = None,
        limit: int | None = None,
        newest_first: bool = True,
    ) -> list[StoredResult]:
        """Results filtered by producer kind(s), hardware name(s) and run, newest first by default: by creation time,
        then id — an imported row keeps its own time, so the newest is not simply the highest id (an older probe of
        another machine, imported last, read as the newest; found in review). Rows that cannot be decoded are left
        out and recorded in ``skipped``."""
        kinds, hardware_names = _names(kind), _names(hardware, "hardware")
        _check_run_id(run_id)
        if limit is not None:  # a str was a bare TypeError, a float "cannot read the results store (datatype
            # mismatch)", and -1 an empty list (the CLI's --limit takes 1 or more); numpy's integers are taken
            fix = f"limit={limit!r} is not valid; give a whole number of results (>= 0), or None for all"
            try:
                if isinstance(limit, bool):
                    raise TypeError
                limit = operator.index(limit)
            except TypeError:
                raise TypeError(fix) from None
            if limit < 0:
                raise ValueError(fix)
        where, params = self._where(kinds, hardware_names, run_id)
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {self._COLUMNS} FROM results{where} ORDER BY created_at {order}, id {order}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(min(limit, MAX_ROW_ID))  # SQLite's INTEGER: a larger limit would not bind
        rows = self._select(sql, params)
        if rows is None:
            rows = sorted((r for r in self._scan() if self._matches(r, kinds, hardware_names, run_id)),
                          key=lambda r: (str(r[8]), r[0]), reverse=newest_first)[:limit]
        return [s for s in map(self._decode, rows) if s is not None]

    def latest(self, kind: str, *, hardware: str | None = None) -> StoredResult | None:
        """The newest result of ``kind`` (e.g. the last probe of this CPU), or None."""
        found = self.query(kind=kind, hardware=hardware, limit=1)
        return found[0] if found else None

    def cpu_probes(self, *, limit: int = 200) -> list[StoredResult]:
        """This machine's CPU probes, newest first: those stored under this CPU's name (:func:`this_cpu`, the name
        `hw probe` and the bench store). An imported export carries the other machine's CPU probe; taking the newest
        CPU probe whatever its CPU planned this one with another CPU's peaks (found in review)."""
        from accelkit.hardware.detect import this_cpu  # lazy: reading the store needs no hardware detection

        return [s for s in self.query(kind="probe", hardware=this_cpu(), limit=limit)
                if (s.result.details or {}).get("device") == "cpu"]

    def count(self, *, kind: str | Iterable[str] | None = None, hardware: str | Iterable[str] | None = None,
              run_id: str | None = None) -> int:
        """Rows matching the filters (all rows without filters), readable or not."""
        kinds, hardware_names = _names(kind), _names(hardware, "hardware")
        _check_run_id(run_id)
        where, params = self._where(kinds, hardware_names, run_id)
        rows = self._select(f"SELECT COUNT(*) FROM results{where}", params)
        if rows is None:
            return sum(self._matches(r, kinds, hardware_names, run_id) for r in self._scan())
        return int(rows[0][0])

    def distinct(self, column: str) -> list[str]:
        """The distinct non-null values of ``kind`` or ``hardware``, sorted."""
        if column not in ("kind", "hardware"):
            raise ValueError(f"distinct() takes kind or hardware, not {column!r}")
        rows = self._select(f"SELECT DISTINCT {column} FROM results WHERE {column} IS NOT NULL", [])
        if rows is None:
            index = 6 if column == "kind" else 7
            rows = [(r[index],) for r in self._scan() if r[index] is not None]
        return sorted({r[0] for r in rows if isinstance(r[0], str)})

    def integrity_ok(self) -> bool:
        return bool(self._pragma("integrity_check") == "ok")

    def _pragma(self, name: str) -> Any:
        """One PRAGMA's answer; an SQLite error (this store closed, the file gone) said as every read's is."""
        try:
            return self._conn.execute(f"PRAGMA {name}").fetchone()[0]
        except sqlite3.Error as exc:
            raise AccelkitError(self._failure("read", exc)) from exc


# ---- export ----------------------------------------------------------------------------------------
CSV_COLUMNS = (
    "id", "run_id", "type", "kind", "name", "hardware", "num_devices", "created_at", "throughput",
    "throughput_unit", "latency_median_s", "latency_p90_s", "latency_p99_s", "latency_n", "mfu",
    "memory_total_bytes", "energy_j_per_item",
    # bench rows, read typed (accelkit.core.bench_result.BenchResult); empty for other kinds
    "variant", "step", "mfu_vs_probe", "measured_over_predicted",
    # why an MFU above 1 cannot stand (bench rows); a probe's quality: full, quick or small (probe rows)
    "mfu_above_peak", "probe_quality",
    # where and by what it was measured, from the environment (empty where the row has none: plans)
    "hostname", "accelkit_version", "accelkit_git",
)


def _bench_columns(r: Estimate | Measurement) -> dict[str, Any]:
    if r.kind == "probe" and isinstance(r, Measurement):
        return {"probe_quality": probe_quality(r.details)}
    if r.kind != "bench" or not isinstance(r, Measurement):
        return {}
    b = BenchResult.from_measurement(r)
    above = b.mfu.above_peak
    if above is None and b.mfu.value is not None and b.mfu.value > 1:  # stored before above_peak was
        above = f"MFU {b.mfu.value:.1%} of {b.mfu.peak_source}: the peak is too low or the FLOPs are wrong"
    return {"variant": b.name, "step": b.step, "mfu_vs_probe": b.mfu.probe.value if b.mfu.probe else None,
            "measured_over_predicted": b.predicted.ratio if b.predicted else None, "mfu_above_peak": above}


def flat_row(stored: StoredResult) -> dict[str, Any]:
    """One result as a flat dict of the CSV columns."""
    r = stored.result
    lat = r.latency_s
    # a plan's total, else a measurement's peak; never a sum: a bench row's peak already holds load and the step's
    # increase (peak + load + step_peak_increase counted the load twice)
    memory_total = r.memory_bytes.get("total", r.memory_bytes.get("peak"))
    env = r.environment if isinstance(r.environment, dict) else {}
    return {
        **dict.fromkeys(CSV_COLUMNS), **_bench_columns(r),
        "id": stored.id, "run_id": stored.run_id, "type": _type_of(r), "kind": r.kind, "name": r.name,
        "hardware": r.hardware, "num_devices": r.num_devices, "created_at": r.created_at,
        "throughput": r.throughput, "throughput_unit": r.throughput_unit,
        "latency_median_s": lat.median if lat else None, "latency_p90_s": lat.p90 if lat else None,
        "latency_p99_s": lat.p99 if lat else None, "latency_n": lat.n if lat else None, "mfu": r.mfu,
        "memory_total_bytes": memory_total, "energy_j_per_item": r.energy_j_per_item,
        "hostname": env.get("hostname"), "accelkit_version": env.get("accelkit"), "accelkit_git": env.get("accelkit_git"),
    }


def _csv_cell(value: Any) -> Any:
    """A text cell a spreadsheet would run as a formula (=, +, -, @, tab or CR first: a result named
    '=HYPERLINK(…)') gets a leading ' (OWASP's CSV-injection rule); numbers are left as they are."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def export(results: list[StoredResult], fmt: str) -> str:
    """``json`` (full records, raw samples included; strict JSON: an inf/NaN is null) or ``csv`` (one flat row per
    result)."""
    if fmt == "json":
        return strict_json.dumps([s.to_dict() for s in results], indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for stored in results:
            writer.writerow({k: _csv_cell(v) for k, v in flat_row(stored).items()})
        return buf.getvalue()
    raise UserError(f"export format {fmt!r} is not supported; use json or csv")
