"""NVIDIA GPUs through NVML (the ``nvidia-ml-py`` distribution, imported as ``pynvml``), under the DCGM
exporter's metric names, units and labels, so its Grafana dashboard (ID 12239) works unchanged.

Without the library or a driver the collector is unavailable and says why once; the exporter then
still declares the DCGM families with no series, so dashboards show "no data" instead of errors.
"""

from __future__ import annotations

import socket
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from accelkit.monitor.collectors.base import Collector

LABELS = ["gpu", "UUID", "device", "modelName", "Hostname"]
#: DCGM name → help text. Units are DCGM's: MiB, W, mJ, °C, MHz, %. All are exposed as gauges: the
#: energy counter too, because prometheus_client would append ``_total`` to a counter's name and the
#: DCGM dashboards query the bare name (``rate()``/``increase()`` work on it either way).
DCGM_METRICS: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw (in W).",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "Total energy consumption since boot (in mJ).",
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C).",
    "DCGM_FI_DEV_SM_CLOCK": "SM clock frequency (in MHz).",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "Current clock throttle reasons (bitmask of NVML reasons).",
}


def dcgm_family(name: str) -> GaugeMetricFamily:
    """An empty family under the exact DCGM name."""
    return GaugeMetricFamily(name, DCGM_METRICS[name], labels=LABELS)


class NvmlCollector(Collector):
    """DCGM-named device metrics for every NVIDIA GPU NVML sees."""

    name = "nvml"

    def __init__(self) -> None:
        super().__init__()
        self._nvml: Any = None
        self._reason: str | None = None
        self.hostname = socket.gethostname()
        try:
            import pynvml
        except ImportError:
            self._reason = "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
            return
        try:
            pynvml.nvmlInit()
        except Exception as exc:  # NVMLError_LibraryNotFound, DriverNotLoaded …
            self._reason = f"NVML could not start ({exc}): no NVIDIA driver or GPU on this machine"
            return
        self._nvml = pynvml
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
        if not self._handles:
            self._reason = "NVML found no GPUs"

    def available(self) -> str | None:
        return self._reason

    def _read(self, handle: Any) -> dict[str, float | None]:
        n = self._nvml

        def safe(fn: Any) -> float | None:
            try:
                return float(fn())
            except Exception:  # a board may not support one field; report the others
                return None

        try:  # one read, so used + free add up to the total
            mem = n.nvmlDeviceGetMemoryInfo(handle)
        except Exception:
            mem = None
        return {
            "DCGM_FI_DEV_GPU_UTIL": safe(lambda: n.nvmlDeviceGetUtilizationRates(handle).gpu),
            "DCGM_FI_DEV_FB_USED": None if mem is None else mem.used / 2**20,
            "DCGM_FI_DEV_FB_FREE": None if mem is None else mem.free / 2**20,
            "DCGM_FI_DEV_POWER_USAGE": safe(lambda: n.nvmlDeviceGetPowerUsage(handle) / 1000.0),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": safe(lambda: n.nvmlDeviceGetTotalEnergyConsumption(handle)),
            "DCGM_FI_DEV_GPU_TEMP": safe(lambda: n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU)),
            "DCGM_FI_DEV_SM_CLOCK": safe(lambda: n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM)),
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": safe(lambda: n.nvmlDeviceGetCurrentClocksEventReasons(handle)),
        }

    def families(self) -> list[Metric]:
        families = {name: dcgm_family(name) for name in DCGM_METRICS}
        if self._nvml is None:
            return list(families.values())
        n = self._nvml
        for i, handle in enumerate(self._handles):
            name = n.nvmlDeviceGetName(handle)
            labels = [str(i), n.nvmlDeviceGetUUID(handle), f"nvidia{i}", name if isinstance(name, str) else name.decode(),
                      self.hostname]
            for metric, value in self._read(handle).items():
                if value is not None:
                    families[metric].add_metric(labels, value)
        return list(families.values())

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = None
