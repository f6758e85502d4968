"""The amdsmi collector against a stand-in ``amdsmi`` module answering as ROCm's Python interface does (no AMD
GPU here): a field a board lacks is "N/A" in a dict, or an exception from the call. amdsmi.h: average_socket_power
is for Navi and MI200 and earlier, current_socket_power for MI300 and later; MI300 has no edge temperature sensor."""

import sys
import types

import pytest

from accelkit.monitor.collectors import DCGM_METRICS, AmdSmiCollector


class AmdSmiLibraryException(Exception):
    pass


def _fake_amdsmi(*, power: dict, temperatures: dict, clock: int | None) -> types.ModuleType:
    """One GPU; ``temperatures`` maps "JUNCTION"/"EDGE" to °C (a sensor left out raises, as NOT_SUPPORTED does)."""
    smi = types.ModuleType("amdsmi")
    smi.AmdSmiTemperatureType = types.SimpleNamespace(EDGE=0, JUNCTION=2)
    smi.AmdSmiTemperatureMetric = types.SimpleNamespace(CURRENT=0)
    smi.AmdSmiClkType = types.SimpleNamespace(SYS=0, GFX=0)
    sensors = {0: "EDGE", 2: "JUNCTION"}
    smi.calls = []

    def temp_metric(h, sensor, metric):
        smi.calls.append(("temp", sensors[sensor]))
        if sensors[sensor] not in temperatures:
            raise AmdSmiLibraryException("Error code: 2 | AMDSMI_STATUS_NOT_SUPPORTED")
        return temperatures[sensors[sensor]]

    def clock_info(h, kind):
        smi.calls.append(("clock", kind))
        if clock is None:
            raise AmdSmiLibraryException("Error code: 2 | AMDSMI_STATUS_NOT_SUPPORTED")
        return {"clk": clock, "min_clk": 500, "max_clk": 2100, "clk_locked": False, "clk_deep_sleep": False}

    smi.amdsmi_init = lambda *a: None
    smi.amdsmi_shut_down = lambda: None
    smi.amdsmi_get_processor_handles = lambda: ["h0"]
    smi.amdsmi_get_gpu_asic_info = lambda h: {"market_name": "AMD Instinct MI300X"}
    smi.amdsmi_get_gpu_device_uuid = lambda h: "1fff74b5-0000-1000-80b4-9e0e53a1b1c7"
    smi.amdsmi_get_gpu_activity = lambda h: {"gfx_activity": 97, "umc_activity": 40, "mm_activity": "N/A"}
    smi.amdsmi_get_gpu_vram_usage = lambda h: {"vram_total": 196592, "vram_used": 150000}
    smi.amdsmi_get_power_info = lambda h: {"gfx_voltage": "N/A", "soc_voltage": "N/A", "mem_voltage": "N/A",
                                           "power_limit": 750, **power}
    smi.amdsmi_get_energy_count = lambda h: {"energy_accumulator": 10**9, "counter_resolution": 15.259}
    smi.amdsmi_get_temp_metric = temp_metric
    smi.amdsmi_get_clock_info = clock_info
    return smi


def _sample(monkeypatch, smi: types.ModuleType, times: int = 1) -> dict[str, list[float]]:
    monkeypatch.setitem(sys.modules, "amdsmi", smi)
    collector = AmdSmiCollector()
    assert collector.available() is None
    try:
        for _ in range(times):
            collector.sample()
        return {f.name: [s.value for s in f.samples] for f in collector.collect()}
    finally:
        collector.close()


def test_mi300_reports_power_temperature_and_clock(monkeypatch, caplog):
    # power was read from average_socket_power only ("N/A" on MI300) and temperature and clock never: three of
    # the DCGM series were missing on every MI300
    smi = _fake_amdsmi(power={"current_socket_power": 712, "average_socket_power": "N/A"},
                       temperatures={"JUNCTION": 71}, clock=2100)
    got = _sample(monkeypatch, smi)
    assert got["DCGM_FI_DEV_POWER_USAGE"] == [712.0]
    assert got["DCGM_FI_DEV_GPU_TEMP"] == [71.0]
    assert got["DCGM_FI_DEV_SM_CLOCK"] == [2100.0]
    assert got["DCGM_FI_DEV_GPU_UTIL"] == [97.0] and got["DCGM_FI_DEV_FB_FREE"] == [196592.0 - 150000.0]
    assert set(got) == set(DCGM_METRICS) and got["DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"] == []
    assert ("temp", "JUNCTION") in smi.calls and ("clock", smi.AmdSmiClkType.GFX) in smi.calls
    assert "does not report" not in caplog.text  # every field it reads has a number


@pytest.mark.parametrize(("power", "watts"), [
    ({"current_socket_power": "N/A", "average_socket_power": 300}, 300.0),  # MI200, Navi
    ({"socket_power": 650, "current_socket_power": "N/A", "average_socket_power": "N/A"}, 650.0),  # newer amdsmi
])
def test_power_is_the_first_number_amdsmi_gives(monkeypatch, power, watts):
    got = _sample(monkeypatch, _fake_amdsmi(power=power, temperatures={"EDGE": 55}, clock=1700))
    assert got["DCGM_FI_DEV_POWER_USAGE"] == [watts]
    assert got["DCGM_FI_DEV_GPU_TEMP"] == [55.0]  # no junction sensor: the edge one


def test_an_unreadable_field_is_left_out_and_said_once_per_gpu(monkeypatch, caplog):
    smi = _fake_amdsmi(power={"current_socket_power": "N/A", "average_socket_power": "N/A"}, temperatures={},
                       clock=None)
    got = _sample(monkeypatch, smi, times=3)
    for name in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_GPU_TEMP", "DCGM_FI_DEV_SM_CLOCK"):
        assert got[name] == []
        assert caplog.text.count(f"GPU 0 does not report {name} (") == 1, caplog.text
    assert got["DCGM_FI_DEV_GPU_UTIL"] == [97.0]  # the others go on
    assert "JUNCTION: AmdSmiLibraryException: Error code: 2" in caplog.text
    assert "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS" not in caplog.text  # amdsmi has no such field: not asked, not said
