"""NVIDIA GPUs through NVML (the ``nvidia-ml-py`` distribution, imported as ``pynvml``), under the DCGM
exporter's metric names, units and labels, so its Grafana dashboard (ID 12239) works unchanged.

Without the library or a driver the collector is unavailable and says why once; the exporter then
still declares the DCGM families with no series, so dashboards show "no data" instead of errors.

One GPU that NVML cannot read (fallen off the bus: ``GPU is lost``) is left out on its own, at start-up
and on each sample, as the DCGM exporter does: its series are absent (a gap, never a frozen value), the
other GPUs go on reporting, and the log says so once when it fails and once when it reads again.
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from prometheus_client.metrics_core import GaugeMetricFamily, Metric

from accelkit.monitor.collectors.base import Collector

log = logging.getLogger("accelkit.monitor")

LABELS = ["gpu", "UUID", "device", "modelName", "Hostname"]
#: DCGM name → help text. Units are DCGM's: MiB, W, mJ, °C, MHz, %. All are exposed as gauges: the
#: energy counter too, because prometheus_client would append ``_total`` to a counter's name and the
#: DCGM dashboards query the bare name (``rate()``/``increase()`` work on it either way).
DCGM_METRICS: dict[str, str] = {
    "DCGM_FI_DEV_GPU_UTIL": "GPU utilization (in %).",
    "DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
    "DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
    "DCGM_FI_DEV_FB_RESERVED": "Framebuffer memory reserved (in MiB).",
    "DCGM_FI_DEV_POWER_USAGE": "Power draw (in W).",
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": "Total energy consumption since boot (in mJ).",
    "DCGM_FI_DEV_GPU_TEMP": "GPU temperature (in C).",
    "DCGM_FI_DEV_SM_CLOCK": "SM clock frequency (in MHz).",
    "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": "Current clock throttle reasons (bitmask of NVML reasons).",
}


#: NVML's answers when the driver lacks the version-2 memory call (before R510): the original one is asked instead
NO_MEMORY_V2 = ("NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_ARGUMENT_VERSION_MISMATCH")


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
        try:
            count = pynvml.nvmlDeviceGetCount()
        except pynvml.NVMLError as exc:
            self._reason = f"NVML started but could not count the GPUs ({exc})"
            pynvml.nvmlShutdown()
            return
        if not count:
            self._reason = "NVML found no GPUs"
            pynvml.nvmlShutdown()
            return
        self._nvml = pynvml
        #: NVML's version-2 memory struct (``used`` without the driver's reserve, as nvidia-smi shows it); None
        #: with an nvidia-ml-py or a driver that lacks it
        self._memory_v2: Any = getattr(pynvml, "nvmlMemory_v2", None)
        #: GPU index → handle, None until NVML hands one out (a GPU lost at start-up is asked again each sample)
        self._handles: dict[int, Any] = dict.fromkeys(range(count))
        #: GPU index → why its last read failed; a GPU is logged when it enters and when it leaves this
        self._failing: dict[int, str] = {}
        for i in self._handles:
            self._gpu_labels(i)  # a GPU unreadable now is logged here, at start-up, not on the first scrape

    def available(self) -> str | None:
        return self._reason

    def _gpu_labels(self, i: int) -> list[str] | None:
        """GPU ``i``'s label values, or None when NVML cannot read it now (logged on the change)."""
        n = self._nvml
        try:
            handle = self._handles[i]
            if handle is None:
                handle = self._handles[i] = n.nvmlDeviceGetHandleByIndex(i)
            name = n.nvmlDeviceGetName(handle)
            labels = [str(i), n.nvmlDeviceGetUUID(handle), f"nvidia{i}", name if isinstance(name, str) else name.decode(),
                      self.hostname]
        except n.NVMLError as exc:
            self._mark_failing(i, exc)
            return None
        return labels

    def _mark_failing(self, i: int, exc: Exception) -> None:
        if i not in self._failing:
            log.warning("monitor: nvml: GPU %d cannot be read (%s: %s); its series are left out until it reads again, "
                        "the other GPUs go on", i, type(exc).__name__, exc)
        self._failing[i] = str(exc)

    def _mark_reading(self, i: int) -> None:
        if self._failing.pop(i, None) is not None:
            log.warning("monitor: nvml: GPU %d reads again", i)

    def _memory(self, handle: Any) -> tuple[Any, int | None]:
        """(the memory info, the bytes the driver reserves, or None when NVML cannot say). NVML's version-2 call,
        as ``nvidia-smi`` and the DCGM exporter read it: ``used`` is what allocations hold, the driver's reserve
        apart. The original call (drivers before R510, nvidia-ml-py without ``nvmlMemory_v2``) folds the reserve
        into ``used`` (total − free): an idle H100 read about 500 MiB used where nvidia-smi says 0 (found in
        review)."""
        n = self._nvml
        if self._memory_v2 is not None:
            try:
                mem = n.nvmlDeviceGetMemoryInfo(handle, version=self._memory_v2)
                return mem, mem.reserved
            except n.NVMLError as exc:
                if getattr(exc, "value", None) not in {getattr(n, code, None) for code in NO_MEMORY_V2}:
                    raise  # a lost GPU, not an old driver: the caller leaves it out
                self._memory_v2 = None  # this driver has no version 2: ask the original call from now on
        return n.nvmlDeviceGetMemoryInfo(handle), None

    def _read(self, handle: Any) -> dict[str, float | None]:
        """Every field of one GPU; a field the board does not support is None. When no field reads at all
        the GPU is gone, not short of features: the first NVML error is raised."""
        n = self._nvml
        errors: list[Exception] = []

        def safe(fn: Any) -> float | None:
            try:
                return float(fn())
            except Exception as exc:  # a board (or an older nvidia-ml-py) may lack one field; report the others
                errors.append(exc)
                return None

        try:  # one read, so used + free (+ reserved) add up to the total
            mem, reserved = self._memory(handle)
        except Exception as exc:
            errors.append(exc)
            mem, reserved = None, None
        values = {
            "DCGM_FI_DEV_GPU_UTIL": safe(lambda: n.nvmlDeviceGetUtilizationRates(handle).gpu),
            "DCGM_FI_DEV_FB_USED": None if mem is None else mem.used / 2**20,
            "DCGM_FI_DEV_FB_FREE": None if mem is None else mem.free / 2**20,
            "DCGM_FI_DEV_FB_RESERVED": None if reserved is None else reserved / 2**20,
            "DCGM_FI_DEV_POWER_USAGE": safe(lambda: n.nvmlDeviceGetPowerUsage(handle) / 1000.0),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": safe(lambda: n.nvmlDeviceGetTotalEnergyConsumption(handle)),
            "DCGM_FI_DEV_GPU_TEMP": safe(lambda: n.nvmlDeviceGetTemperature(handle, n.NVML_TEMPERATURE_GPU)),
            "DCGM_FI_DEV_SM_CLOCK": safe(lambda: n.nvmlDeviceGetClockInfo(handle, n.NVML_CLOCK_SM)),
            "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS": safe(lambda: n.nvmlDeviceGetCurrentClocksEventReasons(handle)),
        }
        if errors and all(v is None for v in values.values()):
            raise errors[0]
        return values

    def families(self) -> list[Metric]:
        families = {name: dcgm_family(name) for name in DCGM_METRICS}
        if self._nvml is None:
            return list(families.values())
        for i in self._handles:
            labels = self._gpu_labels(i)
            if labels is None:
                continue
            try:
                values = self._read(self._handles[i])
            except self._nvml.NVMLError as exc:
                self._mark_failing(i, exc)
                continue
            self._mark_reading(i)
            for metric, value in values.items():
                if value is not None:
                    families[metric].add_metric(labels, value)
        return list(families.values())

    def close(self) -> None:
        if self._nvml is not None:
            self._nvml.nvmlShutdown()
            self._nvml = None
