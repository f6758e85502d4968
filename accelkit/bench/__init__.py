"""Measurement: the timing loop (phases, stopping rule) shared by probes and benchmarks, the benchmark
runner, its workloads (``workloads/``: a registry of plug-ins), the precision matrix (``variants``),
counters (``trackers``), derived metrics (``metrics``) and the named suites (``suite``).

Importing this package imports no torch; the runner and the workloads import it when they run.
"""
