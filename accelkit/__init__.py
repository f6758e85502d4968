"""accelkit — plan, measure, optimize and serve deep-learning workloads on accelerators."""

__version__ = "0.1.0"
