"""`accelkit loadtest --sweep-rates`: Ctrl-C after the first pass discarded it ("nothing was stored") and SIGTERM
ended the command silently (rc -15). Now the finished passes are stored and printed, stderr names what was kept
and what was not, and the command exits 130 (SIGTERM: 143). Real processes and signals, the fake server on
127.0.0.1 in this process."""

from __future__ import annotations

import json
import signal
import time

import pytest

from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from accelkit.results import ResultStore
from tests.conftest import accelkit_popen


@pytest.fixture(scope="module")
def server():
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.01, itl_s=0.005)) as s:
        yield s


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_keeps_the_finished_passes(server, _isolated_home, sig):
    # pass 1 (rate inf) ends at once; pass 2 (6 requests at 1 req/s) lasts ~6 s: the signal lands inside it
    proc = accelkit_popen("loadtest", "--base-url", server.base_url, "--model", "fake-model", "--num-prompts", "6",
                          "--sweep-rates", "inf,1", "--random-input-len", "4", "--random-output-len", "2",
                          "--warmup", "0", "--progress", "--json")
    lines = []
    deadline = time.monotonic() + 60  # a guard against a hang, not a timing assertion
    for line in proc.stderr:
        lines.append(line)
        if "rate 1:" in line:  # the second pass has begun (one request done): the first is finished
            break
        assert time.monotonic() < deadline, lines
    proc.send_signal(sig)
    try:
        stdout, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = "".join(lines) + rest
    assert proc.returncode == (143 if sig == signal.SIGTERM else 130), stderr
    assert "Traceback" not in stderr
    said = "terminated by SIGTERM" if sig == signal.SIGTERM else "interrupted"
    assert f"{said}: kept the finished pass(es) rate inf (result " in stderr and "not finished: rate 1" in stderr
    doc = json.loads(stdout)  # the document of the finished pass is printed too
    assert doc["details"]["interrupted"] is True and doc["details"]["unfinished"] == ["rate 1"]
    with ResultStore(_isolated_home / "results.db") as store:
        rows = store.query(kind="loadtest")
    assert len(rows) == 1 and rows[0].id == doc["result_id"]
    stored = rows[0].result
    assert [p["rate"] for p in stored.details["curve"]] == ["inf"] and stored.details["interrupted"] is True
    assert stored.details["passes"][0]["completed"] == 6
