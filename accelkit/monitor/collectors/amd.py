"""AMD GPUs through ``amdsmi`` (ROCm's Python bindings), when it is installed. Values go out under the
same DCGM-compatible names as NVIDIA's (with ``modelName`` telling the vendor), so one dashboard covers
both; fields amdsmi does not report on a board are left out rather than guessed."""

from __future__ import annotations

import socket
from typing import Any

from prometheus_client.metrics_core import Metric

from accelkit.monitor.collectors.base import Collector
from accelkit.monitor.collectors.nvml import DCGM_METRICS, dcgm_family


class AmdSmiCollector(Collector):
    """DCGM-named device metrics for every AMD GPU amdsmi sees."""

    name = "amdsmi"

    def __init__(self) -> None:
        super().__init__()
        self.hostname = socket.gethostname()
        self._smi: Any = None
        try:
            import amdsmi
        except ImportError:
            self._reason: str | None = "amdsmi is not installed (it ships with ROCm)"
            return
        try:
            amdsmi.amdsmi_init()
            self._handles = amdsmi.amdsmi_get_processor_handles()
        except Exception as exc:  # AmdSmiException: no driver or no GPU
            self._reason = f"amdsmi could not start ({exc})"
            return
        self._smi, self._reason = amdsmi, None if self._handles else "amdsmi found no GPUs"

    def available(self) -> str | None:
        return self._reason

    def families(self) -> list[Metric]:
        families = {name: dcgm_family(name) for name in DCGM_METRICS}
        smi = self._smi
        if smi is None:
            return []
        for i, h in enumerate(self._handles):
            def safe(fn: Any) -> Any:
                try:
                    return fn()
                except Exception:  # a field this board does not report
                    return None

            board = safe(lambda h=h: smi.amdsmi_get_gpu_asic_info(h)) or {}
            labels = [str(i), str(safe(lambda h=h: smi.amdsmi_get_gpu_device_uuid(h))), f"amdgpu{i}",
                      str(board.get("market_name", "AMD GPU")), self.hostname]
            activity = safe(lambda h=h: smi.amdsmi_get_gpu_activity(h)) or {}
            vram = safe(lambda h=h: smi.amdsmi_get_gpu_vram_usage(h)) or {}
            power = safe(lambda h=h: smi.amdsmi_get_power_info(h)) or {}
            energy = safe(lambda h=h: smi.amdsmi_get_energy_count(h)) or {}
            values = {
                "DCGM_FI_DEV_GPU_UTIL": activity.get("gfx_activity"),
                "DCGM_FI_DEV_FB_USED": vram.get("vram_used"),  # MB as amdsmi reports
                "DCGM_FI_DEV_FB_FREE": (vram["vram_total"] - vram["vram_used"]) if {"vram_total", "vram_used"} <= vram.keys() else None,
                "DCGM_FI_DEV_POWER_USAGE": power.get("average_socket_power"),
                "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": (energy["energy_accumulator"] * energy["counter_resolution"] / 1000.0)
                if {"energy_accumulator", "counter_resolution"} <= energy.keys() else None,  # µJ → mJ
            }
            for metric, value in values.items():
                if isinstance(value, (int, float)):
                    families[metric].add_metric(labels, float(value))
        return list(families.values())

    def close(self) -> None:
        if self._smi is not None:
            self._smi.amdsmi_shut_down()
            self._smi = None
