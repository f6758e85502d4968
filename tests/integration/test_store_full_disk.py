"""The results store on a full disk, on real SQLite files: opening a WAL store needs its WAL index (results.db-shm)
made and grown first, which a full disk refuses (SQLITE_IOERR_SHMSIZE). That was called a damaged store — "move the
file aside" — and blocked reading too. Now reading falls back to the database file alone (immutable) with a note, and
opening for writing says "disk full". A full disk is made two ways: RLIMIT_FSIZE (the EFBIG a quota gives; any user)
and, where this runs as root and may mount, a 1 MiB tmpfs filled to the last byte."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from accelkit.core import AccelkitError, Estimate
from accelkit.report import write_report
from accelkit.results import ResultStore
from tests.conftest import REPO

_OPEN = "import sys; from accelkit.results import ResultStore; ResultStore(sys.argv[1])"


def _store(path: Path, n: int = 3) -> None:
    with ResultStore(path) as store:
        for i in range(n):
            store.add(Estimate(kind="plan", name=f"e{i + 1}"))


def _small_files() -> None:
    # the store is 20 KiB; its WAL index needs 32 KiB: SQLite cannot grow results.db-shm (SQLITE_IOERR_SHMSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (24 * 1024, 24 * 1024))


def _run(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env={**os.environ, "ACCELKIT_HOME": str(home)}, preexec_fn=_small_files)


def test_a_wal_index_that_cannot_grow_reads_with_a_note_and_refuses_writes_as_disk_full(_isolated_home):
    path = _isolated_home / "results.db"
    _store(path)
    assert path.stat().st_size < 24 * 1024 and not Path(f"{path}-shm").exists()
    proc = _run(_isolated_home, "-m", "accelkit", "results", "list", "--json")
    assert proc.returncode == 0, proc.stderr
    assert [r["id"] for r in json.loads(proc.stdout)] == [3, 2, 1]
    assert f"note: the disk of {_isolated_home} is full" in proc.stderr and "damaged" not in proc.stderr
    proc = _run(_isolated_home, "-c", _OPEN, str(path))
    assert proc.returncode == 1 and "Traceback" in proc.stderr  # the library's AccelkitError, uncaught
    (line,) = [x for x in proc.stderr.splitlines() if x.startswith("accelkit.core")]
    assert f"cannot open the results store {path}: disk full" in line and "damaged" not in line, line
    with ResultStore(path) as store:  # with the space back, the same store takes writes: nothing was damaged
        store.add(Estimate(kind="plan", name="e4"))
        assert store.count() == 4 and store.integrity_ok()


@pytest.fixture
def full_disk(tmp_path):
    """A 1 MiB tmpfs, mounted for this test (root only), filled after ``fill()``."""
    if os.geteuid() != 0 or not shutil.which("mount"):
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "tiny"
    mnt.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1M", "tmpfs", str(mnt)], capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {proc.stderr.strip()}")

    def fill() -> None:
        with pytest.raises(OSError, match="No space left"), open(mnt / "filler", "wb", buffering=0) as f:
            while True:
                f.write(b"\0" * 4096)

    try:
        yield mnt, fill
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_a_full_disk_is_said_to_be_full_not_a_damaged_store(full_disk):
    mnt, fill = full_disk
    path = mnt / "home" / "results.db"
    _store(path)
    fill()
    with ResultStore(path, readonly=True) as store:
        assert [s.result.name for s in store.query()] == ["e3", "e2", "e1"]
        assert any("is full" in note for note in store.notes), store.notes
        with pytest.raises(OSError, match="No space left"):  # the report is written whole or not at all
            write_report(mnt / "report.html", store=store)
    assert sorted(p.name for p in mnt.iterdir()) == ["filler", "home"]  # it left a 0-byte report.html
    with pytest.raises(AccelkitError, match="disk full") as info:
        ResultStore(path)
    assert "damaged" not in str(info.value) and "free some space" in str(info.value)
    with pytest.raises(AccelkitError, match=r"cannot create the results store .*: disk full"):
        ResultStore(mnt / "other" / "results.db")
