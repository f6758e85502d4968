"""NVML path of the exporter on a real NVIDIA GPU (run by scripts/gpu_check.sh; skipped without one)."""

import shutil

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from accelkit.monitor import Exporter, ExporterConfig
from accelkit.monitor.collectors import DCGM_METRICS, NvmlCollector
from accelkit.monitor.exporter import exposition_of

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(shutil.which("nvidia-smi") is None, reason="needs an NVIDIA GPU with its driver"),
]


def test_nvml_reads_power_energy_and_dcgm_names():
    collector = NvmlCollector()
    assert collector.available() is None, collector.available()
    exporter = Exporter(ExporterConfig(port=0), registry=CollectorRegistry())
    assert exporter.has_gpu
    families = {f.name: f for f in text_string_to_metric_families(exposition_of(exporter.collect_once()).decode())}
    exporter.stop()
    for name in ("DCGM_FI_DEV_POWER_USAGE", "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_GPU_UTIL"):
        samples = families[name].samples
        assert samples, name
        assert set(samples[0].labels) == {"gpu", "UUID", "device", "modelName", "Hostname"}
    assert families["DCGM_FI_DEV_POWER_USAGE"].samples[0].value > 10  # watts: an idle H100/H200 draws > 50 W
    assert families["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"].samples[0].value > 0
    assert set(DCGM_METRICS) <= set(families)
