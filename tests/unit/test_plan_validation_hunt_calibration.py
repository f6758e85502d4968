"""A stored `hw probe --collectives` sets the planner's communication efficiency: busbw ÷ the scale-up link the probe's
ranks had, the same link the planner multiplies the efficiency by (DeviceSpec.scaleup_group_bandwidth). On a mesh
fabric (MI300X xGMI: 64 GB/s per peer, 448 GB/s for 8) a 2-rank probe was divided by the 8-device headline."""

from __future__ import annotations

import pytest

from accelkit.core import Measurement
from accelkit.hardware import get_device
from accelkit.plan.calibrate import efficiency
from accelkit.results import ResultStore


def _store_probe(device_name: str, busbw_gbps: float, *, world_size: int, num_nodes: int = 1) -> None:
    with ResultStore() as store:
        store.add(Measurement(kind="collectives", name="c", hardware=device_name, num_devices=world_size, details={
            "device": "cuda", "catalog_name": device_name, "backend": "nccl", "world_size": world_size,
            "num_nodes": num_nodes, "nproc_per_node": world_size // num_nodes, "largest_size_bytes": 2**30,
            "bus_bandwidth_gbps": {"all_reduce": busbw_gbps}}))


def test_a_two_rank_mesh_probe_is_divided_by_the_two_rank_link_not_the_eight_device_headline():
    mi300x = get_device("mi300x")
    _store_probe(mi300x.name, 47.7, world_size=2)  # hardware.csv's MI300X note: 2-GPU RCCL all-reduce 47.7 GB/s
    eff = efficiency(mi300x, "bf16")
    assert eff.comm == pytest.approx(47.7e9 / 64e9)  # was 47.7 / 448 = 0.106
    # what the planner then gives the probe's own group is what the probe measured
    assert eff.comm * mi300x.scaleup_group_bandwidth(2) == pytest.approx(47.7e9)
    note = next(s for s in eff.sources if s.startswith("communication"))
    assert "2 ranks 64 GB/s" in note and "64 GB/s per peer × 1" in note


def test_an_eight_rank_mesh_probe_and_a_switched_fabric_use_the_full_link():
    mi300x, h100 = get_device("mi300x"), get_device("h100")
    _store_probe(mi300x.name, 312.9, world_size=8)
    _store_probe(h100.name, 315.0, world_size=2)  # NVLink is switched: 2 ranks have the full 450 GB/s each
    assert efficiency(mi300x, "bf16").comm == pytest.approx(312.9 / 448)
    assert efficiency(h100, "bf16").comm == pytest.approx(315.0 / 450)


def test_a_probe_with_one_rank_per_node_measured_no_scale_up_link_and_keeps_the_prior():
    mi300x = get_device("mi300x")
    prior = efficiency(mi300x, "bf16")
    _store_probe(mi300x.name, 40.0, world_size=2, num_nodes=2)  # the network, not xGMI
    eff = efficiency(mi300x, "bf16")
    assert eff.comm == prior.comm
    assert not any("measured all-reduce bus bandwidth" in s for s in eff.sources)
