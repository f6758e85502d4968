"""Ctrl-C during a bench: a real subprocess gets SIGINT after its first variant finished; it stops
cleanly (exit 130, no traceback), keeps that variant in the store and says so."""

import signal
import time

from tests.conftest import accelkit_popen
from tests.integration.test_bench_cli import stored_bench


def test_sigint_keeps_finished_variants(probed):
    proc = accelkit_popen("bench", "bert", "--progress", "--size", "tiny", "--seq-len", "32", "--batch-size", "2",
                          "--precision", "fp32,bf16", "--no-interleave", "--warmup", "2", "--warmup-time", "0.5",
                          "--min-iterations", "5", "--min-time", "1.5")
    lines = []
    deadline = time.monotonic() + 240
    try:
        for line in proc.stderr:  # line-buffered progress on stderr
            lines.append(line.rstrip())
            if line.startswith("finished fp32"):
                proc.send_signal(signal.SIGINT)  # bf16 is now loading, warming up or measuring
                break
            assert time.monotonic() < deadline, lines
        rest = proc.stderr.read()
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    stderr = "\n".join(lines) + "\n" + rest
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "interrupted: kept 1 finished variant(s) in the store" in stderr and "not finished: bf16" in stderr
    rows = stored_bench(probed)
    assert [r.result.details["name"] for r in rows] == ["fp32"]
