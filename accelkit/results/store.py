"""The results store: one SQLite file (``$ACCELKIT_HOME/results.db``, default ``~/.accelkit``) with a row
per estimate or measurement — its JSON payload, raw samples and environment.

Durability: WAL journal, every write in its own ``BEGIN IMMEDIATE`` transaction, so concurrent writers
queue on the lock (``busy_timeout``) instead of failing, and a writer killed mid-run leaves either all of
a transaction or none of it. The schema is versioned with ``PRAGMA user_version``; ``MIGRATIONS[i]``
takes version i to i+1 and runs inside the same transaction as the version bump.
"""

from __future__ import annotations

import csv
import io
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelkit.core import AccelkitError, Estimate, Measurement, UserError
from accelkit.core.bench_result import BenchResult

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


def accelkit_home() -> Path:
    """``$ACCELKIT_HOME`` or ``~/.accelkit``."""
    return Path(os.environ.get("ACCELKIT_HOME") or Path.home() / ".accelkit")


def default_path() -> Path:
    return accelkit_home() / "results.db"


@dataclass(frozen=True, slots=True)
class StoredResult:
    """A result with its row id and group."""

    id: int
    run_id: str | None
    result: Estimate | Measurement

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "run_id": self.run_id, "type": _type_of(self.result), **self.result.to_dict()}


def _type_of(result: Estimate | Measurement) -> str:
    return "measurement" if isinstance(result, Measurement) else "estimate"


class ResultStore:
    """Open (creating and migrating as needed) the store at ``path``."""

    def __init__(self, path: str | Path | None = None, *, timeout_s: float = 60.0):
        self.path = Path(path) if path is not None else default_path()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = sqlite3.connect(self.path, timeout=timeout_s, isolation_level=None)
            self._conn.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            self._conn.execute("PRAGMA journal_mode = WAL")
            self._conn.execute("PRAGMA synchronous = NORMAL")  # WAL + NORMAL: safe against process death
            self._migrate()
        except sqlite3.DatabaseError as exc:
            raise AccelkitError(f"cannot open the results store {self.path}: {exc}") from exc

    def close(self) -> None:
        self._conn.close()

    def __enter__(self) -> ResultStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        self._conn.execute("BEGIN IMMEDIATE")
        try:
            yield self._conn
        except BaseException:
            self._conn.execute("ROLLBACK")
            raise
        self._conn.execute("COMMIT")

    def _migrate(self) -> None:
        with self._write() as conn:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if version > SCHEMA_VERSION:
                raise AccelkitError(
                    f"{self.path} has schema version {version}, newer than this accelkit knows "
                    f"({SCHEMA_VERSION}); upgrade accelkit or point ACCELKIT_HOME elsewhere"
                )
            for step in range(version, SCHEMA_VERSION):
                for statement in MIGRATIONS[step].split(";"):
                    if statement.strip():
                        conn.execute(statement)
                conn.execute(f"PRAGMA user_version = {step + 1}")

    @property
    def schema_version(self) -> int:
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    # ---- writing ----------------------------------------------------------------------------------
    def add(self, result: Estimate | Measurement, *, run_id: str | None = None) -> int:
        """Store one result; returns its id."""
        return self.add_many([result], run_id=run_id)[0]

    def add_many(self, results: Iterable[Estimate | Measurement], *, run_id: str | None = None) -> list[int]:
        """Store several results in one transaction: all of them land, or none."""
        rows = [self._row(r, run_id) for r in results]
        ids = []
        with self._write() as conn:
            for row in rows:
                cur = conn.execute(
                    "INSERT INTO results (type, kind, name, hardware, created_at, run_id, payload, samples,"
                    " environment) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    row,
                )
                ids.append(int(cur.lastrowid))  # type: ignore[arg-type]
        return ids

    @staticmethod
    def _row(result: Estimate | Measurement, run_id: str | None) -> tuple[Any, ...]:
        data = result.to_dict()
        samples = data.pop("samples", {})
        environment = data.pop("environment")
        return (
            _type_of(result), result.kind, result.name, result.hardware, result.created_at, run_id,
            json.dumps(data), json.dumps(samples), json.dumps(environment),
        )

    # ---- reading ----------------------------------------------------------------------------------
    _COLUMNS = "id, type, run_id, payload, samples, environment"

    @staticmethod
    def _from_row(row: tuple[Any, ...]) -> StoredResult:
        rid, rtype, run_id, payload, samples, environment = row
        data = json.loads(payload)
        data["environment"] = json.loads(environment)
        if rtype == "measurement":
            data["samples"] = json.loads(samples)
            return StoredResult(rid, run_id, Measurement.from_dict(data))
        return StoredResult(rid, run_id, Estimate.from_dict(data))

    def get(self, result_id: int) -> StoredResult:
        """One result by id; a missing id is a UserError that says how to list them."""
        row = self._conn.execute(f"SELECT {self._COLUMNS} FROM results WHERE id = ?", (result_id,)).fetchone()
        if row is None:
            raise UserError(f"no result with id {result_id} in {self.path}; `accelkit results list` shows the ids")
        return self._from_row(row)

    def query(
        self,
        *,
        kind: str | None = None,
        hardware: str | None = None,
        run_id: str | None = None,
        limit: int | None = None,
        newest_first: bool = True,
    ) -> list[StoredResult]:
        """Results filtered by producer kind, hardware and run, newest first by default."""
        where: list[str] = []
        params: list[Any] = []
        for column, value in (("kind", kind), ("hardware", hardware), ("run_id", run_id)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = f"SELECT {self._COLUMNS} FROM results"
        if where:
            sql += " WHERE " + " AND ".join(where)
        sql += f" ORDER BY id {'DESC' if newest_first else 'ASC'}"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(limit)
        return [self._from_row(r) for r in self._conn.execute(sql, params).fetchall()]

    def latest(self, kind: str, *, hardware: str | None = None) -> StoredResult | None:
        """The newest result of ``kind`` (e.g. the last probe of this CPU), or None."""
        found = self.query(kind=kind, hardware=hardware, limit=1)
        return found[0] if found else None

    def count(self) -> int:
        return int(self._conn.execute("SELECT COUNT(*) FROM results").fetchone()[0])

    def integrity_ok(self) -> bool:
        return bool(self._conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok")


# ---- export ----------------------------------------------------------------------------------------
CSV_COLUMNS = (
    "id", "run_id", "type", "kind", "name", "hardware", "num_devices", "created_at", "throughput",
    "throughput_unit", "latency_median_s", "latency_p90_s", "latency_p99_s", "latency_n", "mfu",
    "memory_total_bytes", "energy_j_per_item",
    # bench rows, read typed (accelkit.core.bench_result.BenchResult); empty for other kinds
    "variant", "step", "mfu_vs_probe", "measured_over_predicted",
)


def _bench_columns(r: Estimate | Measurement) -> dict[str, Any]:
    if r.kind != "bench" or not isinstance(r, Measurement):
        return {}
    b = BenchResult.from_measurement(r)
    return {"variant": b.name, "step": b.step, "mfu_vs_probe": b.mfu.probe.value if b.mfu.probe else None,
            "measured_over_predicted": b.predicted.ratio if b.predicted else None}


def flat_row(stored: StoredResult) -> dict[str, Any]:
    """One result as a flat dict of the CSV columns."""
    r = stored.result
    lat = r.latency_s
    memory_total = r.memory_bytes.get("total", sum(r.memory_bytes.values()) if r.memory_bytes else None)
    return {
        **dict.fromkeys(CSV_COLUMNS), **_bench_columns(r),
        "id": stored.id, "run_id": stored.run_id, "type": _type_of(r), "kind": r.kind, "name": r.name,
        "hardware": r.hardware, "num_devices": r.num_devices, "created_at": r.created_at,
        "throughput": r.throughput, "throughput_unit": r.throughput_unit,
        "latency_median_s": lat.median if lat else None, "latency_p90_s": lat.p90 if lat else None,
        "latency_p99_s": lat.p99 if lat else None, "latency_n": lat.n if lat else None, "mfu": r.mfu,
        "memory_total_bytes": memory_total, "energy_j_per_item": r.energy_j_per_item,
    }


def export(results: list[StoredResult], fmt: str) -> str:
    """``json`` (full records, raw samples included) or ``csv`` (one flat row per result)."""
    if fmt == "json":
        return json.dumps([s.to_dict() for s in results], indent=2)
    if fmt == "csv":
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=CSV_COLUMNS, lineterminator="\n")
        writer.writeheader()
        for stored in results:
            writer.writerow(flat_row(stored))
        return buf.getvalue()
    raise UserError(f"export format {fmt!r} is not supported; use json or csv")
