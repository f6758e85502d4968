"""Monitoring: a Prometheus exporter with DCGM-compatible device names, host metrics, job metrics
(``track``), a shipped Grafana dashboard, and a profiler summary."""

from accelkit.monitor.exporter import Exporter, ExporterConfig
from accelkit.monitor.registry import REGISTRY, exposition
from accelkit.monitor.track import JobTracker, track

__all__ = ["REGISTRY", "Exporter", "ExporterConfig", "JobTracker", "exposition", "track"]
