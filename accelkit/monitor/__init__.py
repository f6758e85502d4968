"""Monitoring: a Prometheus exporter with DCGM-compatible device names, host metrics, job metrics
(``track``), a shipped Grafana dashboard, and a profiler summary.

The names below load on first use, so importing ``accelkit.monitor.config`` (the CLI does, to build its
flags) does not import prometheus_client."""

from __future__ import annotations

import importlib
import sys
import types
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelkit.monitor.config import ExporterConfig
    from accelkit.monitor.exporter import Exporter
    from accelkit.monitor.registry import REGISTRY, exposition
    from accelkit.monitor.track import JobTracker, track

_EXPORTS = {
    "Exporter": "accelkit.monitor.exporter", "ExporterConfig": "accelkit.monitor.config",
    "REGISTRY": "accelkit.monitor.registry", "exposition": "accelkit.monitor.registry",
    "JobTracker": "accelkit.monitor.track", "track": "accelkit.monitor.track",
}

__all__ = ["REGISTRY", "Exporter", "ExporterConfig", "JobTracker", "exposition", "track"]


def __getattr__(name: str) -> Any:
    if name in _EXPORTS:
        value = getattr(importlib.import_module(_EXPORTS[name]), name)
        # cache it; for `track` this also replaces the submodule `accelkit.monitor.track`, which the import just
        # bound to the same name, with the function the package exports
        globals()[name] = value
        return value
    raise AttributeError(f"module 'accelkit.monitor' has no attribute {name!r}")


class _Package(types.ModuleType):
    """``accelkit.monitor.track`` is the function, however the submodule of the same name was imported: the import
    system binds a submodule on its package once it has loaded it, so ``from accelkit.monitor.track import
    JobTracker`` (or any import of that file) before ``from accelkit.monitor import track`` made ``track`` the module
    — ``track("train")`` was "TypeError: 'module' object is not callable" (found by the Python API hunt)."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name == "track" and isinstance(value, types.ModuleType) and value.__name__ == f"{self.__name__}.track":
            value = value.track
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
