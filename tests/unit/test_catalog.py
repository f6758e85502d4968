import csv
from pathlib import Path

import pytest

from accelkit.core import UnknownNameError
from accelkit.hardware import get_device, list_devices, match_device_name

PACKAGED_CSV = Path(__file__).resolve().parents[2] / "accelkit" / "hardware" / "data" / "hardware.csv"


def _rows(path):
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return list(csv.DictReader(lines))


def test_every_reference_row_is_in_the_catalog_with_status_and_source():
    rows = _rows(PACKAGED_CSV)
    names = [d.name for d in list_devices()]
    assert names == [r["name"] for r in rows]
    for row in rows:
        spec = get_device(row["name"])
        assert spec.status == row["status"] and spec.source == row["source"]
        # the driver's total where the catalog has it (memory_MiB), else the datasheet's decimal GB
        expected = int(row["memory_MiB"]) * 2**20 if row["memory_MiB"] else int(float(row["memory_GB"]) * 1e9)
        assert spec.memory_bytes == expected and spec.memory_datasheet_gb == float(row["memory_GB"])
        assert spec.memory_bytes >= 0.93 * spec.memory_datasheet_gb * 1e9  # never far from what is marketed


@pytest.mark.parametrize(
    ("alias", "name"),
    [("h200", "H200-SXM-141GB"), ("H200-SXM", "H200-SXM-141GB"), ("mi300x", "MI300X"), ("tpu-v5p", "TPU-v5p"),
     ("a100", "A100-SXM4-80GB"), ("A100-PCIe", "A100-PCIe-80GB"), ("h100", "H100-SXM5-80GB"), ("B200", "B200-SXM-180GB"),
     ("rtx 4090", "RTX-4090"), ("gaudi3", "Gaudi3"), ("MI250X", "MI250X-GCD")],
)
def test_lookup_by_alias_case_insensitive(alias, name):
    assert get_device(alias).name == name


def test_acceptance_figures():
    h200 = get_device("h200")
    # nvidia-smi's memory.total on an H200 and an H100 SXM; rocm-smi's VRAM total on an MI300X (bytes)
    assert h200.memory_bytes == 143_771 * 2**20 and h200.memory_datasheet_gb == 141
    assert get_device("h100").memory_bytes == 81_559 * 2**20
    assert h200.memory_bandwidth_bytes_per_s == 4.8e12
    assert h200.peak("bf16") == 989e12 and h200.peak("fp8") == 1979e12
    mi = get_device("mi300x")
    assert mi.memory_bytes == 206_158_430_208 and mi.memory_bandwidth_bytes_per_s == 5.3e12 and mi.peak("bf16") == 1307.4e12
    assert get_device("tpu-v5e").memory_bytes == 16e9  # no driver figure in the catalog: the datasheet's
    assert get_device("a100").peak("fp8") is None  # not published = unsupported, not zero


def test_mesh_fabric_group_bandwidth():
    mi = get_device("mi300x")
    assert mi.scaleup_group_bandwidth(2) == pytest.approx(64e9)  # one peer link, not the headline
    assert mi.scaleup_group_bandwidth(8) == pytest.approx(448e9)
    assert get_device("h100").scaleup_group_bandwidth(2) == pytest.approx(450e9)


def test_unknown_suggests_close_names():
    with pytest.raises(UnknownNameError, match="did you mean.*H200"):
        get_device("h300")


@pytest.mark.parametrize(
    ("reported", "name"),
    [("NVIDIA H200", "H200-SXM-141GB"), ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"), ("NVIDIA H100 PCIe", "H100-PCIe-80GB"),
     ("AMD Instinct MI300X", "MI300X"), ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"), ("NVIDIA GeForce RTX 4090", "RTX-4090")],
)
def test_match_driver_names(reported, name):
    assert match_device_name(reported).name == name


def test_match_unknown_device():
    assert match_device_name("NVIDIA Tesla T4") is None


# torch.cuda.get_device_name / nvidia-smi / rocm-smi names of real cards
@pytest.mark.parametrize(("reported", "name"), [
    ("NVIDIA A100 80GB PCIe", "A100-PCIe-80GB"),  # before: A100-SXM4-80GB (longest alias 'A100' + file order)
    ("NVIDIA A100-PCIE-80GB", "A100-PCIe-80GB"),
    ("NVIDIA A100-SXM4-80GB", "A100-SXM4-80GB"),
    ("NVIDIA A100-SXM4-40GB", "A100-SXM4-40GB"),  # before: A100-SXM4-80GB, twice the memory of the card; then None
    ("NVIDIA A100-PCIE-40GB", None),
    ("NVIDIA H100 80GB HBM3", "H100-SXM5-80GB"),  # the PCIe card has HBM2e
    ("NVIDIA H100 PCIe", "H100-PCIe-80GB"),
    ("NVIDIA H100 NVL", None),  # 94 GB, PCIe + NVLink bridge: not in the catalog; before: H100-SXM5-80GB
    ("NVIDIA H200", "H200-SXM-141GB"),
    ("NVIDIA H200 NVL", None),
    ("NVIDIA GH200 480GB", "GH200-96GB"),  # 480 GB is the superchip's LPDDR5X; 'H200' is not a token of it
    ("NVIDIA B200", "B200-SXM-180GB"),
    ("AMD Instinct MI300X", "MI300X"),
    ("AMD Instinct MI300X VF", "MI300X"),
    ("AMD Instinct MI250X/MI250", "MI250X-GCD"),
    ("NVIDIA L40S", "L40S"),
])
def test_match_real_driver_names_by_memory_and_form_factor(reported, name):
    spec = match_device_name(reported)
    assert (spec.name if spec else None) == name


def test_every_catalog_name_matches_itself():
    for spec in list_devices():
        assert match_device_name(spec.name) is spec
