"""SIGTERM is reported as SIGTERM (exit 143), not as Ctrl-C: docs/bench.md promises `terminated by SIGTERM`, 143, but
one that landed outside bench's measuring loop (its automatic quick probe) escaped to main() as a plain Ctrl-C —
`error: interrupted`, 130 — and `tune` always exited 130 `interrupted:`."""

from __future__ import annotations

import os
import signal
import time

import pytest

from accelkit.cli.bench import SIGTERM_EXIT, sigterm_as_interrupt
from tests.conftest import accelkit_popen


def test_a_sigterm_that_escapes_the_block_exits_143_saying_so(capsys):
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as exc, sigterm_as_interrupt() as received:
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises here, at once
    assert exc.value.code == SIGTERM_EXIT == 143
    assert received == ["SIGTERM"]
    assert capsys.readouterr().err.strip() == "error: terminated by SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is before  # put back


def test_a_ctrl_c_through_the_block_stays_a_ctrl_c():
    with pytest.raises(KeyboardInterrupt), sigterm_as_interrupt() as received:
        raise KeyboardInterrupt
    assert received == []


def test_sigterm_during_tunes_quick_probe_exits_143(_isolated_home):
    """No stored probe: tune runs a quick `hw probe` first (outside bench's measuring); SIGTERM there."""
    proc = accelkit_popen("tune", "bert", "--size", "tiny", "--batch-size", "2", "--seq-len", "16", "--no-compile",
                          "--max-trials", "1", "--device", "cpu", "--progress")
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        for line in proc.stderr:  # type: ignore[union-attr]
            lines.append(line)
            if "quick probe:" in line:
                break
            assert time.monotonic() < deadline, lines
        proc.send_signal(signal.SIGTERM)
        stdout, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    stderr = "".join(lines) + stderr
    assert proc.returncode == 143, stderr[-3000:]
    assert "terminated by SIGTERM" in stderr and "interrupted" not in stderr.replace("(interrupted)", ""), stderr
    assert "No recipe passed the accuracy gate" not in stdout


def test_a_tune_stopped_by_sigterm_while_measuring_carries_the_signal():
    """While bench's runner measures, its own handler records the signal on the run (``stopped_by``); the tune result
    carries it, and `accelkit tune` exits 143 on it (the result knew only 'interrupted': 130)."""
    from accelkit.tune.search import TuneResult

    result = TuneResult(workload="w", objective="throughput", device="cpu", trials=[], winner=None, snippet=None,
                        run_id="r")
    result.record_run({"variants": [], "interrupted": True, "stopped_by": "SIGTERM", "unfinished": ["bf16"]})
    assert result.interrupted and result.stopped_by == "SIGTERM" and result.unfinished == ["bf16"]
    result.record_run({"variants": []})
    assert not result.interrupted and result.stopped_by is None
