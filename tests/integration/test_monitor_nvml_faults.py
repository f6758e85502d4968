"""The NVML collector against a fake ``pynvml`` with two GPUs (tests/integration/fake_nvml, first on the
path): one GPU that NVML cannot read — lost at start-up or later — is left out alone, said once, and the
other keeps reporting, as the DCGM exporter does. Before, a GPU lost at start-up crashed the exporter
("internal error (NVMLError: GPU is lost)", exit 1) and one lost later hid every GPU. A call into NVML that
never returns leaves a gap for the GPUs only, and the host series go on."""

import os
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from accelkit.monitor import Exporter, ExporterConfig
from accelkit.monitor.collectors import NvmlCollector
from tests.integration.test_monitor import _scrape as scrape_text
from tests.integration.test_monitor import _wait_for

FAKE = Path(__file__).parent / "fake_nvml"


@pytest.fixture
def fake_nvml(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)  # nvidia-ml-py may be installed and imported
    import pynvml

    assert Path(pynvml.__file__) == FAKE / "pynvml.py"
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)  # dropped again after the test
    monkeypatch.setattr(pynvml, "LOST", set())
    yield pynvml
    pynvml.HANG.clear()  # a sampler thread still inside a hung call returns and ends


def _gpus(families, name="DCGM_FI_DEV_GPU_UTIL") -> list[str]:
    (family,) = [f for f in families if f.name == name]
    return [s.labels["gpu"] for s in family.samples]


def test_a_gpu_lost_at_start_up_is_left_out_and_the_others_report(fake_nvml, caplog):
    fake_nvml.LOST.add(1)
    exporter = Exporter(ExporterConfig(port=0, interval=0.05), registry=CollectorRegistry())
    try:
        assert exporter.has_gpu
        for _ in range(2):
            families = exporter.collect_once()
            assert _gpus(families) == ["0"]
    finally:
        exporter.stop()
    (used,) = [f for f in families if f.name == "DCGM_FI_DEV_FB_USED"]
    assert used.samples[0].value == 10 * 1024  # MiB, from NVML's bytes
    assert caplog.text.count("GPU 1 cannot be read (NVMLError: GPU is lost)") == 1  # once, not on every sample


@pytest.mark.parametrize("names_cached", [False, True], ids=["name-fails", "only-readings-fail"])
def test_a_gpu_lost_later_leaves_a_gap_for_itself_only(fake_nvml, caplog, names_cached):
    fake_nvml.NAMES_CACHED = names_cached
    collector = NvmlCollector()
    try:
        collector.sample()
        assert _gpus(collector.collect()) == ["0", "1"]
        fake_nvml.LOST.add(1)
        for _ in range(2):
            collector.sample()
            assert _gpus(collector.collect()) == ["0"]
            assert _gpus(collector.collect(), "DCGM_FI_DEV_POWER_USAGE") == ["0"]
        assert caplog.text.count("GPU 1 cannot be read (NVMLError: GPU is lost)") == 1
        fake_nvml.LOST.clear()
        collector.sample()
        assert _gpus(collector.collect()) == ["0", "1"]
        assert "GPU 1 reads again" in caplog.text
    finally:
        collector.close()


def test_monitor_once_with_a_lost_gpu_exits_0_and_says_so(cli):
    path = os.pathsep.join(p for p in (str(FAKE), os.environ.get("PYTHONPATH")) if p)
    proc = cli("monitor", "--once", "--interval", "0.05", env={"PYTHONPATH": path, "FAKE_NVML_LOST": "1"})
    assert proc.returncode == 0, proc.stderr
    util = [line for line in proc.stdout.splitlines() if line.startswith("DCGM_FI_DEV_GPU_UTIL{")]
    assert len(util) == 1 and 'gpu="0"' in util[0] and util[0].endswith(" 87.0")
    assert 'gpu="1"' not in proc.stdout
    assert proc.stderr.count("GPU 1 cannot be read (NVMLError: GPU is lost)") == 1


def _scrape(port: int) -> dict:
    return {f.name: f for f in text_string_to_metric_families(scrape_text(port))}


def test_a_hung_nvml_call_leaves_a_gap_for_the_gpus_and_the_host_goes_on(fake_nvml, caplog):
    # one sampler thread read every collector in turn: a hung NVML call froze every series, the host's too, at
    # its last value, and stop() waited on it, then shut NVML down under the call still in it
    exporter = Exporter(ExporterConfig(port=0, interval=0.05), registry=CollectorRegistry())
    assert exporter.stale_after_s == 5.0  # max(3 × interval, 5 s)
    exporter.stale_after_s = 0.5  # so the test takes about a second
    port = exporter.start()
    shutdowns = fake_nvml.SHUTDOWNS
    try:
        gpu_series = lambda: _scrape(port)["DCGM_FI_DEV_GPU_UTIL"].samples  # noqa: E731
        cpu_seconds = lambda: sum(s.value for s in _scrape(port)["accelkit_host_cpu_seconds"].samples)  # noqa: E731
        assert [s.labels["gpu"] for s in gpu_series()] == ["0", "1"]
        fake_nvml.HANG.set()
        _wait_for(lambda: "DCGM_FI_DEV_GPU_UTIL" not in _scrape(port), "the hung collector's series to go")
        before = cpu_seconds()
        _wait_for(lambda: cpu_seconds() > before, "the host counter to move while NVML hangs")
        assert caplog.text.count("the nvml collector has not read for over 0.5 s") == 1  # once, not per scrape
        fake_nvml.HANG.clear()
        _wait_for(lambda: "DCGM_FI_DEV_GPU_UTIL" in _scrape(port) and len(gpu_series()) == 2, "the GPUs to come back")
        assert "the nvml collector reads again" in caplog.text
        fake_nvml.HANG.set()
        _wait_for(lambda: "DCGM_FI_DEV_GPU_UTIL" not in _scrape(port), "the second hang's gap")
        started = time.monotonic()
        exporter.stop()
        assert time.monotonic() - started < 5.0  # not the 10 s it waits for a read that may still finish
        assert shutdowns == fake_nvml.SHUTDOWNS  # NVML left open under the call still in it
        assert "the nvml collector is still inside a call into its library; it is left open" in caplog.text
    finally:
        fake_nvml.HANG.clear()
        exporter.stop()
