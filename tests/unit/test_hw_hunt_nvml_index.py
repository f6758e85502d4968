"""`hw detect` (and the environment stored with every GPU result) ties each torch device to NVML's record of it —
driver, UUID, power limit, max SM clock — by the UUID both report, not by index. torch's cuda:0 is NVML's GPU 2
under CUDA_VISIBLE_DEVICES=2,3 (a scheduler's usual slice), and CUDA orders the fastest GPU first unless
CUDA_DEVICE_ORDER=PCI_BUS_ID; taken by index, cuda:0 was reported with GPU 0's UUID and power limit. A stand-in
``pynvml`` with four GPUs and torch's CUDA queries answering for the two visible ones (no GPU here)."""

import sys
import types

import torch

from accelkit.hardware.detect import accelerators

NVML_UUIDS = [f"GPU-0000000{i}-aaaa-bbbb-cccc-dddddddddddd" for i in range(4)]


def _fake_pynvml() -> types.ModuleType:
    n = types.ModuleType("pynvml")
    n.NVML_CLOCK_SM = 1
    n.nvmlInit = n.nvmlShutdown = lambda: None
    n.nvmlSystemGetDriverVersion = lambda: "570.172.08"
    n.nvmlDeviceGetCount = lambda: len(NVML_UUIDS)
    n.nvmlDeviceGetHandleByIndex = lambda i: i
    n.nvmlDeviceGetUUID = lambda h: NVML_UUIDS[h]
    n.nvmlDeviceGetEnforcedPowerLimit = lambda h: (400 + 100 * h) * 1000  # mW: GPU i is capped at 400 + 100·i W
    n.nvmlDeviceGetMaxClockInfo = lambda h, kind: 1980
    return n


def _visible(monkeypatch, physical: list[int]) -> None:
    """torch sees NVML's GPUs ``physical``, in that order, as cuda:0, cuda:1 …"""
    def props(i):
        uuid = NVML_UUIDS[physical[i]].removeprefix("GPU-")  # str() of torch's uuid carries no "GPU-"
        return types.SimpleNamespace(name="NVIDIA H100 80GB HBM3", total_memory=81_559 * 2**20, major=9, minor=0,
                                     multi_processor_count=132, uuid=uuid)

    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml())
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: len(physical))
    monkeypatch.setattr(torch.cuda, "get_device_properties", props)


def test_each_torch_device_gets_its_own_nvml_record(monkeypatch):
    _visible(monkeypatch, [2, 3])  # CUDA_VISIBLE_DEVICES=2,3
    devices = accelerators()
    assert [d["uuid"] for d in devices] == NVML_UUIDS[2:]  # was GPU 0's and GPU 1's
    assert [d["power_limit_w"] for d in devices] == [600, 700]
    assert [d["index"] for d in devices] == [0, 1] and devices[0]["catalog_name"] == "H100-SXM5-80GB"


def test_a_device_nvml_does_not_list_gets_no_other_gpus_record(monkeypatch):
    _visible(monkeypatch, [1])
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(
        name="NVIDIA H100 80GB HBM3", total_memory=81_559 * 2**20, major=9, minor=0, multi_processor_count=132,
        uuid="ffffffff-0000-0000-0000-000000000000"))  # e.g. a MIG instance: NVML lists its parent GPU
    (device,) = accelerators()
    assert "uuid" not in device and "power_limit_w" not in device  # unknown, rather than GPU 0's
    assert device["driver"] == "570.172.08"  # the machine's, whichever GPU
