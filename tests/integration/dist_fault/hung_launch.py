"""``python hung_launch.py TIMEOUT_S|none``: a 2-rank collective probe through ``launch()`` whose rank 1 hangs
(``sitecustomize.py`` here injects it). Prints ``FAMILY {json}`` — torchrun, the ranks (pid, create time) and the
job's temporary directory — once both ranks are up, then ``ERROR message`` if launch() raises an Exception."""

import json
import os
import sys
import uuid
from pathlib import Path

import psutil

os.environ["ACCELKIT_TEST_FAIL"] = "hang"
os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(Path(__file__).parent), os.environ.get("PYTHONPATH")]))

from accelkit.distributed.launch import DistConfig, launch  # (imports no torch: the ranks do)

reported = False


def on_line(line: str) -> None:
    """At rank 0's first progress line both ranks run: report every process of the launch."""
    global reported
    if reported or "[rank 0/" not in line:
        return
    family = psutil.Process().children(recursive=True)
    torchrun = next(p for p in family if "torch.distributed.run" in p.cmdline())
    ranks = [p for p in family if p.pid != torchrun.pid and "accelkit.distributed.worker" in p.cmdline()]
    job = Path(torchrun.cmdline()[-1])
    print("FAMILY " + json.dumps({"pids": [[p.pid, p.create_time()] for p in family], "num_ranks": len(ranks),
                                  "tmp": str(job.parent)}), flush=True)
    reported = True


timeout = None if sys.argv[1] == "none" else float(sys.argv[1])
job = {"task": "collectives", "device": "cpu", "backend": "auto", "run_id": uuid.uuid4().hex[:12], "save": False,
       "store_path": None,
       # CollectiveConfig's fields (the worker builds it from them), written out: its module would import torch here
       "collectives": {"ops": ["all_reduce"], "sizes_bytes": [4096], "quick": True, "device": "cpu"}}
try:
    launch(job, DistConfig(nproc_per_node=2), on_line=on_line, timeout_s=timeout)
except Exception as e:
    print(f"ERROR {type(e).__name__}: {e}", flush=True)
    sys.exit(1)
print("RETURNED", flush=True)
