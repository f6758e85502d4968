"""The NVML collector against a fake ``pynvml`` with two GPUs (tests/integration/fake_nvml, first on the
path): one GPU that NVML cannot read — lost at start-up or later — is left out alone, said once, and the
other keeps reporting, as the DCGM exporter does. Before, a GPU lost at start-up crashed the exporter
("internal error (NVMLError: GPU is lost)", exit 1) and one lost later hid every GPU."""

import os
import sys
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from accelkit.monitor import Exporter, ExporterConfig
from accelkit.monitor.collectors import NvmlCollector

FAKE = Path(__file__).parent / "fake_nvml"


@pytest.fixture
def fake_nvml(monkeypatch):
    monkeypatch.syspath_prepend(str(FAKE))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)  # nvidia-ml-py may be installed and imported
    import pynvml

    assert Path(pynvml.__file__) == FAKE / "pynvml.py"
    monkeypatch.setitem(sys.modules, "pynvml", pynvml)  # dropped again after the test
    monkeypatch.setattr(pynvml, "LOST", set())
    return pynvml


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
