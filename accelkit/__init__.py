"""accelkit — plan, measure, optimize and serve deep-learning workloads on accelerators."""

from accelkit import _noise

__version__ = "0.1.0"

_noise.install()  # before torch / torchao log their known-harmless import lines (accelkit/_noise.py)
