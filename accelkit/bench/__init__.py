"""Measurement: the timing loop (phases, stopping rule) shared by probes and benchmarks."""
