"""AMD GPUs through ``amdsmi`` (ROCm's Python bindings), when it is installed. Values go out under the
same DCGM-compatible names as NVIDIA's (with ``modelName`` telling the vendor), so one dashboard covers
both; fields amdsmi does not report on a board are left out rather than guessed, and said once per GPU.

Power is the first number among ``socket_power`` (newer amdsmi), ``current_socket_power`` (MI300 and later)
and ``average_socket_power`` (MI200 and earlier, Navi): amdsmi answers "N/A" for the one a board lacks, so
reading only the average left MI300-class boards without power (found in review), as it did their
temperature and clock, which are now read too."""

from __future__ import annotations

import logging
import socket
from collections.abc import Callable
from functools import partial
from typing import Any

from prometheus_client.metrics_core import Metric

from accelkit.monitor.collectors.base import Collector
from accelkit.monitor.collectors.nvml import DCGM_METRICS, dcgm_family

log = logging.getLogger("accelkit.monitor")

#: amdsmi_get_power_info's keys for the board's power draw (W), the first with a number wins
POWER_KEYS = ("socket_power", "current_socket_power", "average_socket_power")
#: temperature sensors, the first that reads wins: MI300 boards report the junction (hotspot) only, older
#: ones the edge as well
TEMPERATURE_SENSORS = ("JUNCTION", "EDGE")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def first_number(values: dict[str, Any], keys: tuple[str, ...]) -> float | None:
    """The first of ``keys`` whose value is a number (amdsmi writes "N/A" for a field the board lacks)."""
    for key in keys:
        if (number := _number(values.get(key))) is not None:
            return number
    return None


def _call(fn: Callable[[], Any]) -> Any:
    """``fn()``, or the exception it raised (a field this board does not report)."""
    try:
        return fn()
    except Exception as exc:  # AmdSmiException, AmdSmiLibraryException …
        return exc


def _pick(answer: Any, how: Callable[[Any], Any]) -> float | str:
    """``how(answer)`` as a number, or why there is none (amdsmi raised, or answered "N/A" or no such key)."""
    if isinstance(answer, Exception):
        return f"{type(answer).__name__}: {answer}"
    try:
        number = _number(how(answer))
    except (KeyError, TypeError, AttributeError):
        number = None
    return number if number is not None else f"amdsmi answered {answer!r}"


class AmdSmiCollector(Collector):
    """DCGM-named device metrics for every AMD GPU amdsmi sees."""

    name = "amdsmi"

    def __init__(self) -> None:
        super().__init__()
        self.hostname = socket.gethostname()
        self._smi: Any = None
        #: (GPU index, DCGM name) already said to be unreadable: each is said once, not on every sample
        self._unreadable: set[tuple[int, str]] = set()
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

    def _temperature(self, h: Any) -> float:
        """The current temperature (°C) of the first of TEMPERATURE_SENSORS that reads."""
        smi, why = self._smi, []
        for sensor in TEMPERATURE_SENSORS:
            answer = _call(partial(smi.amdsmi_get_temp_metric, h, getattr(smi.AmdSmiTemperatureType, sensor),
                                   smi.AmdSmiTemperatureMetric.CURRENT))
            value = _pick(answer, lambda t: t)
            if isinstance(value, float):
                return value
            why.append(f"{sensor}: {value}")
        raise LookupError("; ".join(why))

    def _read(self, i: int, h: Any) -> tuple[list[str], dict[str, float | str]]:
        """GPU ``i``'s labels, and each DCGM name's value or why it has none."""
        smi = self._smi
        board = _call(lambda: smi.amdsmi_get_gpu_asic_info(h))
        uuid = _call(lambda: smi.amdsmi_get_gpu_device_uuid(h))
        labels = [str(i), str(None if isinstance(uuid, Exception) else uuid), f"amdgpu{i}",
                  str(board.get("market_name", "AMD GPU") if isinstance(board, dict) else "AMD GPU"), self.hostname]
        vram = _call(lambda: smi.amdsmi_get_gpu_vram_usage(h))  # one read, so used + free add up to the total
        energy = _call(lambda: smi.amdsmi_get_energy_count(h))
        return labels, {
            "DCGM_FI_DEV_GPU_UTIL": _pick(_call(lambda: smi.amdsmi_get_gpu_activity(h)), lambda a: a["gfx_activity"]),
            "DCGM_FI_DEV_FB_USED": _pick(vram, lambda v: v["vram_used"]),  # MB as amdsmi reports
            "DCGM_FI_DEV_FB_FREE": _pick(vram, lambda v: v["vram_total"] - v["vram_used"]),
            "DCGM_FI_DEV_POWER_USAGE": _pick(_call(lambda: smi.amdsmi_get_power_info(h)),
                                             lambda p: first_number(p, POWER_KEYS)),
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": _pick(
                energy, lambda e: e["energy_accumulator"] * e["counter_resolution"] / 1000.0),  # µJ → mJ
            "DCGM_FI_DEV_GPU_TEMP": _pick(_call(lambda: self._temperature(h)), lambda t: t),
            "DCGM_FI_DEV_SM_CLOCK": _pick(_call(lambda: smi.amdsmi_get_clock_info(h, smi.AmdSmiClkType.GFX)),
                                          lambda c: c["clk"]),  # MHz
        }

    def families(self) -> list[Metric]:
        families = {name: dcgm_family(name) for name in DCGM_METRICS}
        if self._smi is None:
            return []
        for i, h in enumerate(self._handles):
            labels, values = self._read(i, h)
            for metric, value in values.items():
                if isinstance(value, float):
                    families[metric].add_metric(labels, value)
                elif (i, metric) not in self._unreadable:  # once per GPU and field, not on every sample
                    self._unreadable.add((i, metric))
                    log.warning("monitor: amdsmi: GPU %d does not report %s (%s); that series is left out",
                                i, metric, value)
        return list(families.values())

    def close(self) -> None:
        if self._smi is not None:
            self._smi.amdsmi_shut_down()
            self._smi = None
