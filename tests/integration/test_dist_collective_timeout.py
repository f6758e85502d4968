"""The collective timeout of the ranks' process group (``DistConfig.collective_timeout_s``, `--collective-timeout`):
it reaches init_process_group, so a hung rank's peers fail after it and the error says which setting to change;
bad values are one-line usage errors; a launch timeout that would cut it short is refused."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tests.conftest import accelkit

FAULT = Path(__file__).parent / "dist_fault"
PROBE = ("hw", "probe", "--collectives", "--nproc-per-node", "2", "--device", "cpu", "--quick", "--no-save")
BENCH = ("bench", "resnet", "--size", "tiny", "--batch-size", "2", "--image-size", "32", "--device", "cpu", "--no-save")


#: the collective timeout of the hung-rank test: the first, then the second only when the first ran out while the
#: process group was starting (a rank still importing torch, not the hung one: a DistStoreError, see the test)
COLLECTIVE_TIMEOUTS_S = (5, 15)


def test_a_hung_rank_fails_its_peers_after_the_collective_timeout(monkeypatch):
    """It was a constant 600 s: a hung rank held its peers (and the command) for ten minutes, whatever the user
    wanted; here rank 1 hangs for ever and rank 0 gives up after 5 s (the subprocess limit is far below 600 s).
    The process group's start-up waits for both ranks under the same limit, and on a loaded 2-core machine one rank
    can finish importing torch seconds after the other: a start-up that ran out is not what this test is about, and
    then it runs again with 15 s. The CLI runs in this process; torchrun hands the ranks its environment, fault
    included."""
    monkeypatch.setenv("ACCELKIT_TEST_FAIL", "hang")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(FAULT), os.environ.get("PYTHONPATH")])))
    for timeout in COLLECTIVE_TIMEOUTS_S:
        proc = accelkit(*PROBE, "--collective-timeout", str(timeout), "--progress")
        assert proc.returncode == 1, proc.stderr[-3000:]
        message = proc.stderr.strip().splitlines()[-1]
        # the store's wait for a peer's address at the process group's start (gloo's rendezvous), not a collective
        if "DistStoreError: wait timeout" not in message:
            break
    # (the ranks' "a collective waits at most N s" progress line is not asserted: progress on a pipe is sampled,
    # and a line can be replaced by the next before it is shown; gloo's own timeout text below is the proof)
    assert "first failure — rank 0 (" in message and f"Timed out waiting {timeout * 1000}ms" in message, message
    assert f"after collective_timeout_s={timeout} s" in message and "raise it (--collective-timeout)" in message, \
        message


@pytest.mark.parametrize("value", ["0", "-5", "0.5", "nan", "inf", "1e400", "604801", "abc", ""])
@pytest.mark.parametrize("command", [PROBE, (*BENCH, "--nproc-per-node", "2")], ids=["hw-probe", "bench"])
def test_bad_values_are_one_line_usage_errors(command, value):
    proc = accelkit(*command, "--collective-timeout", value)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: --collective-timeout {value!r} is "), line
    assert "torchrun" not in line  # refused before any launch


def test_a_command_without_a_launch_refuses_the_flag():
    proc = accelkit(*BENCH, "--collective-timeout", "30")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --collective-timeout sets up a torchrun launch, but this run is one "
                                  "process on one node"), proc.stderr  # not the field's --collective-timeout-s
    proc = accelkit("hw", "probe", "--quick", "--device", "cpu", "--no-save", "--collective-timeout", "30")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("error: --collective-timeout applies to --collectives (the torchrun launch); add "
                                   "--collectives or drop it"), proc.stderr


def test_a_launch_timeout_shorter_than_the_collective_timeout_is_refused():
    """launch(timeout_s=…) bounds the whole launch: at or below an explicit collective timeout, the collective one
    could never fire. Refused before torchrun starts; without an explicit collective timeout a short launch
    timeout is a plain budget (the hung-launch test runs timeout_s=8, or 15, against the default 600 s)."""
    from accelkit.distributed.launch import DistConfig, check_timeouts, launch

    job = {"task": "collectives"}  # never started
    with pytest.raises(ValueError, match=r"timeout_s=60 s \(the whole launch\) is not longer than "
                                         r"collective_timeout_s=60 s"):
        launch(job, DistConfig(nproc_per_node=2, collective_timeout_s=60), timeout_s=60)
    for bad in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout_s=.* is not valid; expected a positive number of seconds"):
            check_timeouts(DistConfig(nproc_per_node=2), bad)
    check_timeouts(DistConfig(nproc_per_node=2, collective_timeout_s=60), 61)
    check_timeouts(DistConfig(nproc_per_node=2), 5)  # the default 600 s: the launch's budget governs
    for bad in (0.5, 0.0, float("nan"), float("inf"), 604801.0):
        with pytest.raises(ValueError, match="collective_timeout_s"):
            DistConfig(nproc_per_node=2, collective_timeout_s=bad)
    assert DistConfig().effective_collective_timeout_s == 600.0


def test_the_rank_that_timed_out_comes_before_the_rank_torchrun_stopped(tmp_path):
    """Rank 1 hung, rank 0 timed out waiting for it, torchrun then stopped rank 1 with SIGTERM — in the same second,
    so the killed rank came first (a killed rank is usually why its peers raised) and the timeout's hint was buried
    after it. A SIGTERM is torchrun stopping the survivors: it goes last (the summary and error file as torch 2.13
    writes them)."""
    import json
    import time

    from accelkit.distributed.rank_failures import failed_ranks, failure_message

    when = int(time.mktime(time.strptime("2026-12-01_11:12:49", "%Y-%m-%d_%H:%M:%S")))
    summary = """\
Root Cause (first observed failure):
[0]:
  time      : 2026-12-01_11:12:49
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : -15 (pid: 25169)  (SIGTERM)
  error_file: <N/A>
  traceback : Signal 15 (SIGTERM) received by PID 25169
============================================================""".splitlines()
    rank0 = tmp_path / "attempt_0" / "0"
    rank0.mkdir(parents=True)
    (rank0 / "error.json").write_text(json.dumps({"message": {
        "message": "RuntimeError: [unbound_buffer.cc:78] Timed out waiting 3000ms for recv operation to complete",
        "extraInfo": {"timestamp": str(when), "rank": "0", "local_rank": "0", "host": "h", "time_ns": when * 10**9}}}))
    failures = failed_ranks(tmp_path, summary)
    assert [(f.rank, f.is_timeout, f.is_stopped) for f in failures] == [(0, True, False), (1, False, True)]
    assert failure_message(failures).startswith("first failure — rank 0 (host h, local rank 0): RuntimeError: "
                                                "[unbound_buffer.cc:78] Timed out waiting 3000ms")
