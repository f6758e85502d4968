"""``accelkit sweep``: a grid of bench / plan / loadtest points, locally or as Ray tasks.

    spec (the file: SweepSpec, load_sweep) → grid (Point, expand) → executors (local pool, Ray tasks) each running
    point (run_point, in a worker) → collect (the driver's store) → run (run_sweep: the summary row)
"""

from accelkit.sweep.collect import collect
from accelkit.sweep.grid import Point, expand
from accelkit.sweep.point import run_point
from accelkit.sweep.run import SweepRun, run_sweep
from accelkit.sweep.spec import SweepSpec, load_sweep

__all__ = ["Point", "SweepRun", "SweepSpec", "collect", "expand", "load_sweep", "run_point", "run_sweep"]
