"""`hw probe` when the store refuses its row (a real "disk full": RLIMIT_FSIZE past a store whose log cannot be
restarted, ``dist_fault/full_disk.py``): the measurement on stdout, why it was not stored on stderr, exit 1 — as
`accelkit bench` does."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from accelkit.results import ResultStore
from tests.conftest import REPO
from tests.integration.dist_fault.full_disk import NUM_ROWS, full_store, small_files

PROBE = ("hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32", "--size", "64", "--copy-size", "1MiB",
         "--min-time", "0")


def test_probe_prints_what_the_store_cannot_take(_isolated_home):
    """The printed document lacked result_id and store_error (the --json document of a stored probe has result_id),
    and stderr said only that "the measurement" was not stored."""
    with full_store(_isolated_home) as path:
        proc = subprocess.run([sys.executable, "-m", "accelkit", *PROBE, "--json"], capture_output=True, text=True,
                              timeout=300, cwd=REPO, env={**os.environ, "ACCELKIT_HOME": str(_isolated_home)},
                              preexec_fn=small_files)
        assert proc.returncode == 1, proc.stderr[-3000:]
        doc = json.loads(proc.stdout)
        assert doc["kind"] == "probe" and doc["details"]["matmul"]["fp32"]["tflops"] > 0
        assert doc["result_id"] is None and "disk full" in doc["store_error"]
        # (progress lines come first on a pipe since #29; the error is still one line)
        (line,) = [line for line in proc.stderr.splitlines() if not re.match(r"\[ *\d+\.\d s\] ", line)]
        assert line.startswith("error: ") and "disk full" in line and "Traceback" not in proc.stderr
        assert "was not stored; its JSON is printed on stdout" in line and doc["name"] in line, line
        with ResultStore(path, readonly=True) as store:
            assert store.count() == NUM_ROWS

