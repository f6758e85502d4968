"""DCGM_FI_DEV_FB_USED as nvidia-smi and the DCGM exporter report it. NVML's original memory call folds the memory
the driver reserves into ``used`` (total − free); nvidia-smi and DCGM read the version-2 call, whose ``used`` leaves
the reserve out (DCGM exports it as DCGM_FI_DEV_FB_RESERVED). The exporter read the original call, so an idle H100
showed about 500 MiB used where nvidia-smi says 0. A stand-in ``pynvml`` answers both calls as NVML does (no GPU
here); a driver without the version-2 call still gets the original one."""

import sys
import types

from prometheus_client.parser import text_string_to_metric_families

from accelkit.monitor.collectors import NvmlCollector
from accelkit.monitor.exporter import exposition_of

MiB = 2**20
TOTAL, RESERVED, ALLOCATED = 81_559 * MiB, 527 * MiB, 4 * MiB  # an H100 with a 4 MiB context, as nvidia-smi shows it


class NVMLError(Exception):
    def __init__(self, value: int):
        super().__init__(value)
        self.value = value


def _fake_pynvml(*, has_v2_call: bool = True, lost: bool = False) -> types.ModuleType:
    n = types.ModuleType("pynvml")
    n.NVMLError = NVMLError
    n.NVML_ERROR_GPU_IS_LOST, n.NVML_ERROR_FUNCTION_NOT_FOUND = 15, 13
    n.NVML_ERROR_NOT_SUPPORTED, n.NVML_ERROR_ARGUMENT_VERSION_MISMATCH = 3, 25
    n.NVML_TEMPERATURE_GPU, n.NVML_CLOCK_SM = 0, 1
    n.nvmlMemory_v2 = 0x02000028
    n.calls = []
    n.nvmlInit = n.nvmlShutdown = lambda: None
    n.nvmlDeviceGetCount = lambda: 1
    n.nvmlDeviceGetHandleByIndex = lambda i: i
    n.nvmlDeviceGetName = lambda h: "NVIDIA H100 80GB HBM3"
    n.nvmlDeviceGetUUID = lambda h: "GPU-0"

    def memory_info(h, version=None):
        n.calls.append(version)
        if lost:
            raise NVMLError(n.NVML_ERROR_GPU_IS_LOST)
        free = TOTAL - RESERVED - ALLOCATED
        if version is None:  # the original call: the reserve counts as used
            return types.SimpleNamespace(total=TOTAL, free=free, used=TOTAL - free)
        if not has_v2_call:  # pynvml's answer when the driver lacks nvmlDeviceGetMemoryInfo_v2
            raise NVMLError(n.NVML_ERROR_FUNCTION_NOT_FOUND)
        return types.SimpleNamespace(version=version, total=TOTAL, reserved=RESERVED, free=free, used=ALLOCATED)

    n.nvmlDeviceGetMemoryInfo = memory_info
    n.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=0, memory=0)
    n.nvmlDeviceGetPowerUsage = lambda h: 70_000
    n.nvmlDeviceGetTotalEnergyConsumption = lambda h: 1_000
    n.nvmlDeviceGetTemperature = lambda h, kind: 30
    n.nvmlDeviceGetClockInfo = lambda h, kind: 345
    n.nvmlDeviceGetCurrentClocksEventReasons = lambda h: 1
    return n


def _scrape(monkeypatch, fake: types.ModuleType, samples: int = 1) -> dict[str, list[float]]:
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    collector = NvmlCollector()
    try:
        for _ in range(samples):
            collector.sample()
        text = exposition_of(list(collector.collect())).decode()
    finally:
        collector.close()
    return {f.name: [s.value for s in f.samples] for f in text_string_to_metric_families(text)}


def test_fb_used_leaves_the_driver_reserve_out_as_nvidia_smi_does(monkeypatch):
    got = _scrape(monkeypatch, _fake_pynvml())
    assert got["DCGM_FI_DEV_FB_USED"] == [4.0]  # MiB, as nvidia-smi's memory.used; it read 531 (4 + the reserve)
    assert got["DCGM_FI_DEV_FB_RESERVED"] == [527.0]
    assert got["DCGM_FI_DEV_FB_FREE"] == [81_559.0 - 527 - 4]
    assert sum(got[f"DCGM_FI_DEV_FB_{k}"][0] for k in ("USED", "FREE", "RESERVED")) == 81_559  # DCGM's identity


def test_a_driver_without_the_version_2_call_gets_the_original_one(monkeypatch):
    fake = _fake_pynvml(has_v2_call=False)
    got = _scrape(monkeypatch, fake, samples=2)
    assert got["DCGM_FI_DEV_FB_USED"] == [531.0] and got["DCGM_FI_DEV_FB_FREE"] == [81_559.0 - 531]
    assert got["DCGM_FI_DEV_FB_RESERVED"] == []  # not known: no series rather than a made-up 0
    assert fake.calls == [fake.nvmlMemory_v2, None, None]  # asked once, then the original call only


def test_a_lost_gpu_does_not_turn_the_version_2_call_off(monkeypatch):
    fake = _fake_pynvml(lost=True)
    got = _scrape(monkeypatch, fake, samples=2)
    assert got["DCGM_FI_DEV_FB_USED"] == [] and got["DCGM_FI_DEV_GPU_UTIL"] == [0.0]  # the fields it still reads
    assert fake.calls == [fake.nvmlMemory_v2] * 2  # a lost GPU is no old driver: the version-2 call stays
