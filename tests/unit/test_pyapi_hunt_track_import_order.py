"""``from accelkit.monitor import track`` is the function whichever import came first: importing the submodule
``accelkit.monitor.track`` first (``from accelkit.monitor.track import JobTracker``) bound the module under that
name, and ``track("train")`` was "TypeError: 'module' object is not callable". Import order is per process, so
this runs in a fresh interpreter (the subprocess is what is tested)."""

import subprocess
import sys

CODE = """
from accelkit.monitor.track import JobTracker
from accelkit.monitor import track
import accelkit.monitor
from prometheus_client import CollectorRegistry
assert accelkit.monitor.track is track
with track("train", samples_per_step=2, registry=CollectorRegistry()) as job:
    assert isinstance(job, JobTracker)
print("ok")
"""


def test_track_is_the_function_after_its_submodule_was_imported():
    done = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0 and done.stdout == "ok\n", done.stderr[-2000:]
