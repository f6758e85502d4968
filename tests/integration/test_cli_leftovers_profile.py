"""`accelkit profile` when the store refuses its row (a real "disk full": RLIMIT_FSIZE past a store whose log cannot
be restarted, ``dist_fault/full_disk.py``): the usual --json document (`result_id` null) with `store_error` on stdout,
what was not stored on stderr, exit 1 — as `hw probe` and `bench` do."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from accelkit.results import ResultStore
from tests.conftest import REPO
from tests.integration.dist_fault.full_disk import NUM_ROWS, full_store, small_files

# a trace of ~0.1 MB: well inside full_disk's 1 MiB file limit, which only the store's log is past
PROFILE = ("profile", "bert", "--size", "tiny", "--seq-len", "8", "--batch-size", "1", "--wait", "0", "--warmup", "1",
           "--steps", "1")


def test_profile_prints_the_summary_the_full_disk_cannot_take(_isolated_home, tmp_path):
    """Before, the printed document was the bare Measurement (kind, name, details …): no `result_id` key, unlike the
    document of a stored profile, and no `store_error` saying why."""
    out = tmp_path / "prof"
    with full_store(_isolated_home) as path:
        proc = subprocess.run([sys.executable, "-m", "accelkit", *PROFILE, "--out", str(out), "--json"],
                              capture_output=True, text=True, timeout=300, cwd=REPO,
                              env={**os.environ, "ACCELKIT_HOME": str(_isolated_home)}, preexec_fn=small_files)
        assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
        doc = json.loads(proc.stdout)
        assert doc["workload"] == "bert tiny-bert b1 s8" and doc["top_cpu_ops"] and doc["trace"] == str(out / "trace.json")
        assert doc["result_id"] is None and "disk full" in doc["store_error"]
        error = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
        assert len(error) == 1 and "disk full" in error[0], proc.stderr
        assert ("The measurement was not stored; its JSON is printed on stdout above (redirect stdout to keep it); "
                "not stored: profile bert tiny-bert b1 s8") in error[0], error[0]
        with ResultStore(path, readonly=True) as store:
            assert store.count() == NUM_ROWS
    assert (out / "trace.json").stat().st_size > 0 and json.loads((out / "summary.json").read_text())["top_cpu_ops"]


def test_profile_without_json_prints_the_document_too(_isolated_home, tmp_path):
    """The human tables are not the measurement: a refused row still comes back as JSON on stdout (as bench does),
    and nothing claims it was stored."""
    with full_store(_isolated_home):
        proc = subprocess.run([sys.executable, "-m", "accelkit", *PROFILE, "--out", str(tmp_path / "prof")],
                              capture_output=True, text=True, timeout=300, cwd=REPO,
                              env={**os.environ, "ACCELKIT_HOME": str(_isolated_home)}, preexec_fn=small_files)
    assert proc.returncode == 1, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    assert doc["result_id"] is None and "disk full" in doc["store_error"]
    assert "stored as result" not in proc.stderr
