"""Issue 29 item 8: `accelkit bench suite reference --quick` printed nothing for 600 s into a pipe and stored
nothing, and SIGTERM ended a bench silently (SIGINT kept the finished variants). Progress lines now go to stderr
by default when it is not a terminal — the suite's first lines before torch is even imported, then a line at
least every 10 s — and SIGTERM stops a bench as Ctrl-C does: finished variants stored, a line saying so, exit 143."""

from __future__ import annotations

import io
import signal
import time

from tests.conftest import accelkit_popen
from tests.integration.test_bench_cli import stored_bench


def _read_until(proc, marker: str, limit_s: float = 300) -> list[str]:
    lines = []
    deadline = time.monotonic() + limit_s  # a guard against a hang, not a timing assertion
    for line in proc.stderr:
        lines.append(line.rstrip())
        if marker in line:
            return lines
        assert time.monotonic() < deadline, lines
    raise AssertionError(f"{marker!r} never came; stderr: {lines}")


def _stop(proc, sig) -> str:
    proc.send_signal(sig)
    try:
        rest = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    return rest


def test_sigterm_keeps_finished_variants_and_says_so(probed):
    proc = accelkit_popen("bench", "bert", "--size", "tiny", "--seq-len", "32", "--batch-size", "2",
                          "--precision", "fp32,bf16", "--no-interleave", "--warmup", "2", "--warmup-time", "0.5",
                          "--min-iterations", "5", "--min-time", "1.5")  # no --progress: a pipe gets lines anyway
    lines = _read_until(proc, "finished fp32")  # bf16 is now loading, warming up or measuring
    stderr = "\n".join(lines) + "\n" + _stop(proc, signal.SIGTERM)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "Traceback" not in stderr
    assert "terminated by SIGTERM: kept 1 finished variant(s) in the store" in stderr and "not finished: bf16" in stderr
    assert [r.result.details["name"] for r in stored_bench(probed)] == ["fp32"]


def test_the_reference_suite_talks_on_a_pipe_before_its_first_model_and_sigterm_stops_it(_isolated_home):
    proc = accelkit_popen("bench", "suite", "reference", "--quick", "--device", "cpu")
    lines = _read_until(proc, "building bert")
    # before anything heavy: what runs, how many workloads and how long the suite took where it was measured
    assert lines[0] == "bench suite reference --quick: starting", lines
    assert lines[1].startswith("bench suite reference: 4 workloads (bert-large-infer, resnet50-train, "), lines
    assert "--quick took about 14 min on a 2-core CPU" in lines[1]
    stderr = "\n".join(lines) + "\n" + _stop(proc, signal.SIGTERM)  # while BERT-large is built: nothing finished
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert "terminated by SIGTERM: kept 0 finished variant(s) in the store" in stderr and "Traceback" not in stderr


def test_a_silent_phase_gets_a_heartbeat_line(monkeypatch):
    """A BERT-large iteration on a CPU takes ~20 s and its model build longer: with lines on, what runs is repeated
    after a quiet spell (HEARTBEAT_S = 5 s, so a line at least every 10 s)."""
    from accelkit.cli.bench import HEARTBEAT_S, _CliReporter
    from accelkit.cli.output import err

    assert HEARTBEAT_S * 2 <= 10
    buf = io.StringIO()
    # rich's ``file`` property reads sys.stderr on each write; setting it, and monkeypatch's undo setting it back to
    # what it read, would pin this worker's console to pytest's capture stream for every later test: swap ``_file``
    monkeypatch.setattr(err, "_file", buf)
    reporter = _CliReporter(heartbeat_s=0.05)  # progress not given: lines, as stderr is no terminal
    try:
        reporter.phase("fp32 · forward", "first call")
        deadline = time.monotonic() + 60
        while "still running: fp32 · forward: first call" not in buf.getvalue():
            assert time.monotonic() < deadline, buf.getvalue()
            time.sleep(0.01)
    finally:
        reporter.close()
    assert not reporter._heartbeat.is_alive()
    assert buf.getvalue().startswith("fp32 · forward: first call\n")
    quiet = _CliReporter(progress=False, heartbeat_s=0.05)  # --no-progress: no lines, no heartbeat
    quiet.phase("fp32", "load")
    quiet.close()
    assert quiet._heartbeat is None
