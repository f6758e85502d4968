"""The bench's whole-run peak memory on a CPU: the per-block tracker resets the kernel's high-water mark
(``/proc/self/clear_refs``), which is also what ``ru_maxrss`` reads — so the run's peak covered only the time since
the last block began (a factory that held 1 GiB read 399 MiB). It is kept across the resets now."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="needs Linux /proc/self/clear_refs")

#: 192 MiB held and freed before a block, then a block
PEAK_BEFORE_A_BLOCK = """
import json
from accelkit.bench.trackers import CpuRssPeak, memory_tracker, run_peak_bytes, _status_kib
tracker, why = memory_tracker("cpu")
assert isinstance(tracker, CpuRssPeak), why
base = _status_kib("VmRSS")
held = b"x" * (192 << 20)  # every page touched
del held
tracker.start()
block = tracker.stop()
peak, scope = run_peak_bytes("cpu", tracker)
print(json.dumps({"base": base, "block": block, "peak": peak, "scope": scope}))
"""


#: runs argv[1] in a grandchild of pytest: a child's ru_maxrss starts at its parent's peak (exec keeps the peak of
#: the memory it replaces; a child of a pytest worker holding torch read 1245 MiB before allocating anything), a
#: grandchild's at this small process's — so the old figure, ru_maxrss, is the block's alone, as in a bench
HOP = "import subprocess, sys; sys.exit(subprocess.run([sys.executable, '-c', sys.argv[1]]).returncode)"


def test_the_whole_runs_peak_keeps_what_came_before_the_last_block():
    proc = subprocess.run([sys.executable, "-c", HOP, PEAK_BEFORE_A_BLOCK], capture_output=True, text=True, cwd=REPO,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["peak"] >= out["base"] + (160 << 20), out  # was ru_maxrss after the reset: the base, ~20 MiB
    assert out["block"] < 32 << 20  # the block itself allocated nothing: its own figure is still the block's
    assert "VmHWM, kept across the per-block resets" in out["scope"]
