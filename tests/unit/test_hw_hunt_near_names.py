"""A driver's name that carries a word naming another chip took the catalog entry whose name it contains: 'NVIDIA
GeForce RTX 4090 D' (AD102 cut to 14,592 CUDA cores, not the 4090's 16,384) and 'NVIDIA GeForce RTX 4090 Laptop GPU'
(AD103, 16 GB) were the RTX-4090, so `hw probe` graded them against its peaks and stored them under its name (found
in a hunt). Now every word beside the entry's name must only describe the board (vendor, brand, memory size and type,
form factor); a name we do not know exactly matches nothing — the probe then has no datasheet reference."""

from __future__ import annotations

import pytest

from accelkit.hardware import match_device_name


@pytest.mark.parametrize("reported", [
    "NVIDIA GeForce RTX 4090 D",  # 14,592 cores: another chip's peaks
    "NVIDIA GeForce RTX 4090 Laptop GPU",  # AD103, 16 GB
    "NVIDIA GeForce RTX 4090 Ti",
    "AMD Instinct MI300X HF",  # not a name AMD's table has
    "NVIDIA H100 80GB HBM3 MIG 7g.80gb",  # a slice of the GPU, not the whole
    "NVIDIA B200 MIG 1g.23gb",
    "NVIDIA H800", "NVIDIA H800 PCIe", "NVIDIA A800-SXM4-80GB", "NVIDIA L40", "AMD Instinct MI300A",
    "AMD Instinct MI308X", "NVIDIA GB200", "NVIDIA H100 NVL", "AMD Instinct MI250",
])
def test_a_name_beside_another_chips_words_matches_nothing(reported):
    assert match_device_name(reported) is None


@pytest.mark.parametrize(("reported", "name"), [
    ("NVIDIA GeForce RTX 4090", "RTX-4090"), ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),
    ("NVIDIA H100 PCIe", "H100-PCIe-80GB"), ("NVIDIA A100 80GB PCIe", "A100-PCIe-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"), ("NVIDIA GH200 480GB", "GH200-96GB"),
    ("AMD Instinct MI300X VF", "MI300X"), ("AMD Instinct MI250X", "MI250X-GCD"), ("NVIDIA L40S", "L40S"),
    ("NVIDIA B200", "B200-SXM-180GB"), ("NVIDIA H200", "H200-SXM-141GB"),
])
def test_real_driver_names_still_match(reported, name):
    spec = match_device_name(reported)
    assert spec is not None and spec.name == name
