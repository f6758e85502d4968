"""A rank that fails, hangs or is killed, on 2 gloo processes under torchrun (the fault is injected by
``dist_fault/sitecustomize.py``): the error names the rank that failed first and its exception."""

from __future__ import annotations

import os
from pathlib import Path

from tests.conftest import accelkit

FAULT = Path(__file__).parent / "dist_fault"
PROBE = ("hw", "probe", "--collectives", "--nproc-per-node", "2", "--device", "cpu", "--quick", "--no-save")


def _inject(mode: str) -> dict[str, str]:
    return {"ACCELKIT_TEST_FAIL": mode, "PYTHONPATH": os.pathsep.join(filter(None, [str(FAULT), os.environ.get("PYTHONPATH")]))}


def test_the_rank_that_raised_is_named_first():
    """torchrun's output ends with the victim's "Connection reset by peer" traceback, and its Root Cause can name the
    victim too: the error kept the last 25 lines, without rank 1's exception."""
    proc = accelkit(*PROBE, env=_inject("raise"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    message = proc.stderr.strip().splitlines()[-1]
    assert "first failure — rank 1 (host " in message and "local rank 1): RuntimeError: injected failure in _op_fn" in message
    assert message.index("rank 1 (") < message.index("rank 0 (")  # the peer that lost its connection comes after
    assert "Traceback" not in proc.stderr


def test_a_killed_rank_is_named_with_its_signal():
    proc = accelkit(*PROBE, env=_inject("kill"))
    assert proc.returncode == 1, proc.stderr[-3000:]
    message = proc.stderr.strip().splitlines()[-1]
    assert "rank 1 (" in message and "killed by SIGKILL" in message, message


def test_no_torchelastic_directory_is_left(tmp_path):
    """torchrun's default --log-dir is a fresh /tmp/torchelastic_* directory it never removes."""
    env = {**_inject("raise"), "TMPDIR": str(tmp_path)}
    proc = accelkit(*PROBE, env=env)
    assert proc.returncode == 1
    assert not list(tmp_path.iterdir())
