"""`accelkit profile` when the store refuses its row (a real "disk full": RLIMIT_FSIZE past a store whose log cannot
be restarted, ``dist_fault/full_disk.py``): the usual --json document (`result_id` null) with `store_error` on stdout,
what was not stored on stderr, exit 1 — as `hw probe` and `bench` do."""

from __future__ import annotations

import json

import pytest

from accelkit.results import ResultStore
from tests.conftest import accelkit_in_one_process
from tests.integration.dist_fault.full_disk import NUM_ROWS, full_store, small_files

# a trace of ~0.1 MB: well inside full_disk's 1 MiB file limit, which only the store's log is past
PROFILE = ("profile", "bert", "--size", "tiny", "--seq-len", "8", "--batch-size", "1", "--wait", "0", "--warmup", "1",
           "--steps", "1")


@pytest.fixture(scope="module")
def refused(tmp_path_factory) -> dict:
    """`profile --json` and `profile` (human tables) against one full store, in one process with the small file
    limit (an interpreter importing torch is seconds; the two commands need no process each): what each printed, and
    the store's row count after both."""
    home, out = tmp_path_factory.mktemp("full-home"), tmp_path_factory.mktemp("prof")
    commands = [[*PROFILE, "--out", str(out / "json"), "--json"], [*PROFILE, "--out", str(out / "tables")]]
    with full_store(home) as path:
        runs = accelkit_in_one_process(home, commands, small_files)
        with ResultStore(path, readonly=True) as store:
            count = store.count()
    return {"json": runs[0], "tables": runs[1], "count": count, "out": out}


def test_profile_prints_the_summary_the_full_disk_cannot_take(refused):
    """Before, the printed document was the bare Measurement (kind, name, details …): no `result_id` key, unlike the
    document of a stored profile, and no `store_error` saying why."""
    proc, out = refused["json"], refused["out"] / "json"
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["workload"] == "bert tiny-bert b1 s8" and doc["top_cpu_ops"] and doc["trace"] == str(out / "trace.json")
    assert doc["result_id"] is None and "disk full" in doc["store_error"]
    error = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(error) == 1 and "disk full" in error[0], proc.stderr
    assert ("The measurement was not stored; its JSON is printed on stdout above (redirect stdout to keep it); "
            "not stored: profile bert tiny-bert b1 s8") in error[0], error[0]
    assert refused["count"] == NUM_ROWS  # neither command stored anything
    assert (out / "trace.json").stat().st_size > 0 and json.loads((out / "summary.json").read_text())["top_cpu_ops"]


def test_profile_without_json_prints_the_document_too(refused):
    """The human tables are not the measurement: a refused row still comes back as JSON on stdout (as bench does),
    and nothing claims it was stored."""
    proc = refused["tables"]
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["result_id"] is None and "disk full" in doc["store_error"]
    assert "stored as result" not in proc.stderr
