"""A stand-in for nvidia-ml-py's ``pynvml`` with two GPUs, for the exporter's NVML path on machines
without one. Tests put this folder first on ``sys.path`` (or ``PYTHONPATH`` for the CLI).

``LOST`` holds the indices of GPUs that fell off the bus: every call on one raises ``NVMLError("GPU is
lost")``, its handle lookup included, unless ``NAMES_CACHED`` is set (a driver may still answer name
and UUID from its cache while every reading fails). ``FAKE_NVML_LOST=1`` (comma-separated indices)
fills it at import, for a subprocess. ``HANG`` set makes every reading block until it is cleared (a
driver call that does not return, as after an Xid); ``SHUTDOWNS`` counts ``nvmlShutdown`` calls. Values
are in NVML's units (bytes, mW, mJ)."""

import os
import threading
import time


class NVMLError(Exception):
    pass


NVML_TEMPERATURE_GPU = 0
NVML_CLOCK_SM = 1
LOST: set[int] = {int(i) for i in os.environ.get("FAKE_NVML_LOST", "").split(",") if i}
NAMES_CACHED = False
HANG = threading.Event()
SHUTDOWNS = 0


class _Memory:
    total = 80 * 2**30
    used = 10 * 2**30
    free = total - used


class _Utilization:
    gpu = 87
    memory = 40


def _check(handle: int, *, label: bool = False) -> int:
    while HANG.is_set() and not label:
        time.sleep(0.01)
    if handle in LOST and not (label and NAMES_CACHED):
        raise NVMLError("GPU is lost")
    return handle


def nvmlInit() -> None:
    pass


def nvmlShutdown() -> None:
    global SHUTDOWNS
    SHUTDOWNS += 1


def nvmlDeviceGetCount() -> int:
    return 2


def nvmlDeviceGetHandleByIndex(i: int) -> int:
    return _check(i)


def nvmlDeviceGetName(h: int) -> str:
    _check(h, label=True)
    return "NVIDIA H100 80GB HBM3"


def nvmlDeviceGetUUID(h: int) -> str:
    return f"GPU-0000000{_check(h, label=True)}"


def nvmlDeviceGetMemoryInfo(h: int) -> _Memory:
    _check(h)
    return _Memory()


def nvmlDeviceGetUtilizationRates(h: int) -> _Utilization:
    _check(h)
    return _Utilization()


def nvmlDeviceGetPowerUsage(h: int) -> int:
    _check(h)
    return 312_345  # mW


def nvmlDeviceGetTotalEnergyConsumption(h: int) -> int:
    _check(h)
    return 9_876_543_210  # mJ


def nvmlDeviceGetTemperature(h: int, kind: int) -> int:
    _check(h)
    return 61


def nvmlDeviceGetClockInfo(h: int, kind: int) -> int:
    _check(h)
    return 1980


def nvmlDeviceGetCurrentClocksEventReasons(h: int) -> int:
    _check(h)
    return 4
