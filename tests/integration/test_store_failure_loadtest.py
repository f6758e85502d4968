"""`accelkit loadtest` when the results store cannot take the result, as `accelkit bench` does: --json stdout is the
same document a stored run prints (`result_id` null) plus `store_error`, strict JSON, and the command exits 1."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from accelkit.results import ResultStore
from tests.conftest import REPO


def test_the_unstored_result_is_the_usual_document_with_why(_isolated_home):
    """Before, the printed document was the bare Measurement: no `result_id` key (a script reading it as it reads a
    stored run's failed on the missing key) and no `store_error`."""
    ResultStore(_isolated_home / "results.db").close()

    def small_files() -> None:  # the row of 300 requests' records is larger than the 32 KiB the WAL may take
        resource.setrlimit(resource.RLIMIT_FSIZE, (32 * 1024, 32 * 1024))

    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.001, itl_s=0.001)) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "accelkit", "loadtest", "--base-url", server.base_url, "--model", "fake-model",
             "--num-prompts", "300", "--random-input-len", "10", "--random-output-len", "4", "--json"],
            capture_output=True, text=True, timeout=300, env=dict(os.environ), cwd=REPO, preexec_fn=small_files)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr

    def refuse(constant: str):
        raise ValueError(f"not strict JSON: {constant}")

    doc = json.loads(proc.stdout, parse_constant=refuse)
    assert doc["kind"] == "loadtest" and doc["details"]["passes"][0]["completed"] == 300
    assert doc["result_id"] is None and "disk full" in doc["store_error"]
    assert "The measurement was not stored; its JSON is printed on stdout above" in proc.stderr
    with ResultStore(_isolated_home / "results.db", readonly=True) as store:
        assert store.count() == 0
