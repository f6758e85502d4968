"""A results store whose next write fails with a real "disk full" in a process started with ``preexec_fn=
small_files``: RLIMIT_FSIZE makes a write past ``LIMIT_BYTES`` fail with EFBIG, the error a full quota gives.

The store's rows sit in its write-ahead log (≈2.5 MB, past the limit) while a connection of the test keeps a read
transaction open over them: SQLite can then neither checkpoint nor restart the log, so the next row is appended
beyond the limit. Opening the store writes nothing (a command's check before measuring passes); storing fails.
The limit leaves every other file a command writes (a torchrun job's JSON, rank 0's document) well inside it."""

from __future__ import annotations

import resource
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from accelkit.core import Measurement
from accelkit.results import ResultStore

LIMIT_BYTES = 1 << 20
NUM_ROWS = 40


def small_files() -> None:
    """``preexec_fn``: no file of the child (or of the processes it starts) may grow past LIMIT_BYTES."""
    resource.setrlimit(resource.RLIMIT_FSIZE, (LIMIT_BYTES, LIMIT_BYTES))


@contextmanager
def full_store(home: Path) -> Iterator[Path]:
    """``home/results.db`` with NUM_ROWS rows, whose next write lands past LIMIT_BYTES (see the module's text)."""
    path = home / "results.db"
    home.mkdir(parents=True, exist_ok=True)
    store = ResultStore(path)  # creates it (a connection of sqlite3's own would leave an empty file)
    reader = sqlite3.connect(path, isolation_level=None)
    try:
        for i in range(NUM_ROWS):  # ~60 KB of samples a row: the log grows to ~2.5 MB
            store.add(Measurement(kind="bench", name=f"m{i}", hardware="cpu: test",
                                  samples={"s": [i + 0.123456789] * 3000}))
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM results").fetchone()  # the snapshot that pins the log's frames
        store.close()  # not the last connection: the log stays as it is
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size > LIMIT_BYTES, wal.stat().st_size  # the condition is real, or the test says so
        yield path
    finally:
        store.close()
        reader.close()
