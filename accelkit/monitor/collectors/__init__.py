"""Collector registry (the edge): name → class."""

from accelkit.monitor.collectors.amd import AmdSmiCollector
from accelkit.monitor.collectors.base import Collector
from accelkit.monitor.collectors.host import HostCollector
from accelkit.monitor.collectors.nvml import DCGM_METRICS, NvmlCollector

COLLECTORS: dict[str, type[Collector]] = {"host": HostCollector, "nvml": NvmlCollector, "amdsmi": AmdSmiCollector}

__all__ = ["COLLECTORS", "DCGM_METRICS", "AmdSmiCollector", "Collector", "HostCollector", "NvmlCollector"]
