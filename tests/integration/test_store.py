"""The results store on a real SQLite file: migrations, concurrent writers, a writer killed mid-run."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from accelkit.core import AccelkitError, Estimate, Measurement, UserError, summarize
from accelkit.results import ResultStore, export
from accelkit.results import store as store_mod

WRITER = """
import sys
from accelkit.core import Measurement
from accelkit.results import ResultStore
path, tag, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
with ResultStore(path) as store:
    for i in range(count):
        # each call is one transaction of 3 rows (like a bench with 3 variants)
        store.add_many([Measurement(kind="bench", name=f"{tag}-{i}-{v}", samples={"s": [float(i)] * 200})
                        for v in range(3)], run_id=f"{tag}-{i}")
        if count > 100000:
            print(i, flush=True)
"""


def _writer(tmp_path: Path) -> Path:
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    return script


def test_roundtrip_and_queries(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        m = Measurement(kind="probe", name="p", hardware="cpu", latency_s=summarize([1.0, 2.0]),
                        samples={"x": [1.0, 2.0]}, environment={"torch": "2.13"})
        e = Estimate(kind="plan", name="e", hardware="H200-SXM-141GB", mfu=0.4)
        ids = store.add_many([m, e], run_id="r1")
        assert store.get(ids[0]).result == m and store.get(ids[1]).result == e
        assert [s.id for s in store.query(kind="plan")] == [ids[1]]
        assert store.latest("probe", hardware="cpu").result == m
        assert store.latest("probe", hardware="tpu") is None
        assert len(store.query(run_id="r1")) == 2
        with pytest.raises(UserError, match="no result with id 999"):
            store.get(999)
        rows = export(store.query(newest_first=False), "csv").splitlines()
        assert rows[0].startswith("id,run_id,type,kind") and len(rows) == 3
        full = json.loads(export(store.query(), "json"))
        assert full[1]["samples"] == {"x": [1.0, 2.0]}


def test_wal_and_schema_version(tmp_path):
    path = tmp_path / "r.db"
    with ResultStore(path) as store:
        assert store.schema_version == store_mod.SCHEMA_VERSION
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_migration_from_an_older_version_keeps_rows(tmp_path, monkeypatch):
    path = tmp_path / "r.db"
    with ResultStore(path) as store:
        rid = store.add(Estimate(kind="plan", name="before"))
    monkeypatch.setattr(store_mod, "MIGRATIONS", [*store_mod.MIGRATIONS, "ALTER TABLE results ADD COLUMN tag TEXT"])
    monkeypatch.setattr(store_mod, "SCHEMA_VERSION", len(store_mod.MIGRATIONS))
    with ResultStore(path) as store:
        assert store.schema_version == len(store_mod.MIGRATIONS)
        assert store.get(rid).result.name == "before"
        assert "tag" in [r[1] for r in store._conn.execute("PRAGMA table_info(results)")]


def test_newer_schema_is_refused_clearly(tmp_path):
    path = tmp_path / "r.db"
    ResultStore(path).close()
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 99")
    conn.commit()
    conn.close()
    with pytest.raises(AccelkitError, match="schema version 99, newer"):
        ResultStore(path)


def test_not_a_database_is_a_clear_error(tmp_path):
    path = tmp_path / "r.db"
    path.write_bytes(b"this is not sqlite" * 100)
    for readonly in (False, True):
        with pytest.raises(AccelkitError, match="is not an SQLite database.*move it aside"):
            ResultStore(path, readonly=readonly)


def test_two_processes_writing_at_once_lose_nothing(tmp_path):
    path, script = tmp_path / "r.db", _writer(tmp_path)
    ResultStore(path).close()
    procs = [subprocess.Popen([sys.executable, str(script), str(path), tag, "150"]) for tag in ("a", "b")]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    with ResultStore(path) as store:
        assert store.count() == 2 * 150 * 3
        names = {s.result.name for s in store.query()}
        assert names == {f"{t}-{i}-{v}" for t in "ab" for i in range(150) for v in range(3)}
        assert store.integrity_ok()


def test_writer_killed_mid_run_leaves_store_consistent(tmp_path):
    path, script = tmp_path / "r.db", _writer(tmp_path)
    ResultStore(path).close()
    proc = subprocess.Popen([sys.executable, str(script), str(path), "k", "1000000"], stdout=subprocess.PIPE, text=True)
    # wait until it has committed a fair number of transactions, then kill it without warning
    for _ in range(50):
        line = proc.stdout.readline()
        if line and int(line.split()[0]) >= 40:
            break
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    time.sleep(0.1)
    with ResultStore(path) as store:
        assert store.integrity_ok()
        count = store.count()
        assert count >= 40 * 3
        assert count % 3 == 0  # whole transactions only: never a partial bench run
        for stored in store.query():
            assert len(stored.result.samples["s"]) == 200
        store.add(Estimate(kind="plan", name="after the crash"))  # still writable
        assert store.count() == count + 1


def test_a_store_rebuilt_from_a_dump_is_adopted(tmp_path):
    """`sqlite3 results.db .dump | sqlite3 new.db` (the usual salvage) keeps the table and the rows but not
    user_version: writing failed with 'table results already exists' (migration 0 → 1 ran again)."""
    path = tmp_path / "r.db"
    with ResultStore(path) as store:
        store.add_many([Estimate(kind="plan", name="a"), Estimate(kind="plan", name="b")], run_id="r1")
    dumped = tmp_path / "dumped.db"
    with sqlite3.connect(path) as old, sqlite3.connect(dumped) as new:
        new.executescript("\n".join(old.iterdump()))
        assert new.execute("PRAGMA user_version").fetchone()[0] == 0
    with ResultStore(dumped) as store:
        assert store.schema_version == store_mod.SCHEMA_VERSION
        rid = store.add(Estimate(kind="plan", name="c"))
        assert rid == 3 and [s.result.name for s in store.query()] == ["c", "b", "a"]
    # a results table with other columns is somebody else's: refused by name, not altered
    other = tmp_path / "other.db"
    with sqlite3.connect(other) as conn:
        conn.execute("CREATE TABLE results (id INTEGER PRIMARY KEY, score REAL)")
    with pytest.raises(AccelkitError, match=r"results table without a schema version whose columns \(id, score\)"):
        ResultStore(other)
    assert [r[1] for r in sqlite3.connect(other).execute("PRAGMA table_info(results)")] == ["id", "score"]
