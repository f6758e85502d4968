"""``accelkit sweep``: a grid of bench / plan / loadtest points, locally or as Ray tasks (see ``grid``)."""

from accelkit.sweep.grid import Point, SweepRun, SweepSpec, collect, expand, load_sweep, run_point, run_sweep

__all__ = ["Point", "SweepRun", "SweepSpec", "collect", "expand", "load_sweep", "run_point", "run_sweep"]
