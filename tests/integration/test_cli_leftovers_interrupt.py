"""Ctrl-C and exit codes at the CLI's edge, on real subprocesses: what an interrupted command says is true of that
command, an interrupted command exits 130, and a command's own exit code reaches the shell.

Before, typer (0.2x) turned a Ctrl-C that reached it into a *returned* 130 and returned a command's typer.Exit code
instead of raising it, and main() dropped both: an interrupted `loadtest` or `hw probe` exited 0 without a word, and
a sweep whose every point failed exited 0. The message main() had for it ("finished results are kept in the store")
was false for loadtest, which keeps nothing, and for commands that store nothing."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from accelkit.results import ResultStore
from tests.conftest import accelkit, accelkit_popen


def _interrupt(proc, ready, *, limit_s: float = 120) -> tuple[str, str]:
    """SIGINT once ``ready()`` says the command is mid-run; its (stdout, stderr) once it has exited."""
    deadline = time.monotonic() + limit_s
    try:
        while not ready():
            assert proc.poll() is None, proc.communicate()
            assert time.monotonic() < deadline, "the command never got going"
            time.sleep(0.1)
        proc.send_signal(signal.SIGINT)
        return proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_ctrl_c_in_a_loadtest_says_nothing_was_stored(_isolated_home):
    """The server holds every request (first token after 10 minutes): Ctrl-C lands while requests are in flight."""
    ResultStore(_isolated_home / "results.db").close()
    with FakeOpenAIServer(FakeServerConfig(ttft_s=600, itl_s=0.05)) as server:
        proc = accelkit_popen("loadtest", "--base-url", server.base_url, "--model", "fake-model", "--num-prompts", "2",
                              "--warmup", "0", "--random-input-len", "8", "--random-output-len", "4", "--json")
        stdout, stderr = _interrupt(proc, lambda: server.stats()["received"] >= 1)
    assert proc.returncode == 130, stderr
    assert stdout == "" and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1] == "interrupted: the load test did not finish; nothing was stored", stderr
    assert "kept" not in stderr
    with ResultStore(_isolated_home / "results.db", readonly=True) as store:
        assert store.count() == 0  # what the line says


def test_ctrl_c_in_hw_probe_says_what_it_measured_and_that_nothing_was_stored():
    """`hw probe` stores its one row at the end (whole): its line says what was measured before the interrupt and
    that nothing was stored — nothing about a store it did not write."""
    proc = accelkit_popen("hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32", "--no-save", "--progress")
    lines: list[str] = []

    def probing() -> bool:  # progress is line-buffered on stderr
        lines.append(proc.stderr.readline())
        return "matmul fp32" in lines[-1]

    stdout, stderr = _interrupt(proc, probing)
    assert proc.returncode == 130, "".join(lines) + stderr
    assert stdout == "" and "Traceback" not in stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith("interrupted: ") and "not measured: " in last, stderr
    assert last.endswith("; nothing was stored (a probe is stored whole)"), stderr


def test_a_sweep_whose_every_point_failed_exits_1(tmp_path: Path):
    """docs/distributed.md: 'Exit code 1 only when every point failed' — the command raised typer.Exit(1), which
    main() never saw."""
    path = tmp_path / "plan.yaml"
    path.write_text("name: all-bad\nkind: plan\nhardware: h100\nworkloads:\n  tiny-llama: {task: train, seq_len: 128}\n"
                    "layouts: [{tp: 3}]\n")
    proc = accelkit("sweep", str(path))
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert "1 points, 1 failed" in proc.stderr
