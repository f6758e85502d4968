"""SIGTERM to `accelkit sweep` (a scheduler, `timeout`, `kill PID`) stops it as Ctrl-C does: it ended the driver
silently (no table, no 'sweep' summary row), and its pool worker, re-parented to init, finished its point after the
sweep was gone and then waited forever, holding the driver's stdout — `accelkit sweep … | tee log` never ended."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from accelkit.results import ResultStore
from tests.conftest import REPO
from tests.integration.test_sweep_point_interrupt import CountingLinear

torch = pytest.importorskip("torch")

#: the pool worker imports the factory by its path from the repository root
HELD = "tests.integration.test_sweep_sigterm:make_held"
MARK = "ACCELKIT_TEST_HELD_MARK"


class Held(CountingLinear):
    """Sleeps in each call (a busy worker at almost no CPU) and, once it is being measured, touches the file
    ``$ACCELKIT_TEST_HELD_MARK`` names."""

    def on_call(self, n: int) -> None:
        if n == 4:
            Path(os.environ[MARK]).touch()
        time.sleep(0.02)


def make_held():
    torch.manual_seed(0)
    return Held(), torch.randn(2, 8)


SWEEP = f"""name: held
kind: bench
workloads:
  custom: {{module: "{HELD}"}}
precisions: [fp32, bf16]
loop: {{warmup_iterations: 1, warmup_time_s: 0, min_iterations: 2, min_time_s: 120}}
bench: {{device: cpu, predict: false, auto_probe: false, accuracy: false}}
workers: 1
"""


def test_sigterm_stops_a_sweep_with_its_summary_and_leaves_no_worker(_isolated_home, tmp_path: Path):
    grid = tmp_path / "grid.yaml"
    grid.write_text(SWEEP)
    mark = tmp_path / "measuring"
    proc = subprocess.Popen([sys.executable, "-m", "accelkit", "sweep", str(grid), "--json"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO, env=dict(os.environ, **{MARK: str(mark)}),
                            start_new_session=True)
    children: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 120
        while not mark.exists():  # the pool worker is measuring point 0
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        children = psutil.Process(proc.pid).children(recursive=True)
        assert children  # the pool worker (and multiprocessing's resource tracker)
        proc.send_signal(signal.SIGTERM)  # the driver alone, as `kill PID` or a scheduler sends it
        stdout, stderr = proc.communicate(timeout=60)  # stdout reaches EOF: no process holds it any more
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    _, alive = psutil.wait_procs(children, timeout=20)
    for p in alive:
        p.kill()
    assert not alive, [p.cmdline() for p in alive]
    assert proc.returncode == 143, stderr[-3000:]
    assert "terminated by SIGTERM: kept 0 finished point(s) in the store (summary result 1); not finished: point 0" \
        in stderr, stderr[-3000:]
    doc = json.loads(stdout)
    assert doc["interrupted"] is True and doc["points"] == [] and len(doc["unfinished"]) == 2, doc
    with ResultStore() as store:
        rows = store.query()
    assert [(r.id, r.result.kind) for r in rows] == [(1, "sweep")]
    assert rows[0].result.name == "sweep held: 2 points, 0 failed, 2 not run (interrupted)"


def test_a_pool_worker_takes_ctrl_c_only_while_it_runs_a_point():
    """An idle worker, blocked waiting for a point, ignores SIGINT: the SIGINT a SIGTERM is passed on as (and a
    terminal's Ctrl-C) killed it with a traceback on the user's terminal and broke the pool (found in review); a
    worker running a point gets KeyboardInterrupt there, as any process does."""
    from accelkit.sweep import executors

    before = signal.getsignal(signal.SIGINT)
    seen = []
    try:
        executors._ignore_sigint()  # the pool's initializer
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN

        def point(*args):
            seen.append(signal.getsignal(signal.SIGINT))
            return {"status": "ok"}

        real = executors.run_point
        executors.run_point = point
        try:
            assert executors._interruptible({}, {}, "run", True) == {"status": "ok"}
        finally:
            executors.run_point = real
        assert seen == [signal.default_int_handler]
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # idle again
    finally:
        signal.signal(signal.SIGINT, before)
