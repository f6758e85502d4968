"""The one Prometheus registry accelkit publishes through: device and host collectors, job metrics from
``track()``, the benchmark runner and the serving API all register here, so one ``/metrics`` endpoint
shows them all."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

REGISTRY = CollectorRegistry(auto_describe=True)


def exposition(registry: CollectorRegistry = REGISTRY) -> bytes:
    """The registry in Prometheus text format (what ``/metrics`` serves)."""
    return generate_latest(registry)
