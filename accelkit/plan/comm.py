"""Collective communication time: bandwidth terms over the links a group really uses, plus a start-up latency.

Inside one node (ring over the scale-up fabric, ``B`` = one-direction link bandwidth × efficiency):

* all-reduce:                 2·(n−1)/n · S / B
* reduce-scatter / all-gather:  (n−1)/n · S / B
* all-to-all (MoE dispatch):    (n−1)/n · S / B
* point-to-point (pipeline):            S / B

A group that spans nodes runs **two-level**: with ``k`` of its ranks in each of ``m`` nodes, NCCL first
reduces inside the node over NVLink/xGMI, then across nodes — and every GPU drives its own NIC, so the
inter-node stage moves 1/k of the buffer per NIC. The two stages are pipelined, so the slower one sets
the time: ``max((k−1)/k · S / B_up, (m−1)/m · S / (k · B_nic))`` for a reduce-scatter (×2 for all-reduce).
For large m the inter-node term is S / (k·B_nic): the bus bandwidth a node reaches is the sum of its NICs,
as nccl-tests shows on multi-node systems (docs/validation.md checks two published runs).

``S`` is the full buffer size per rank. A mesh fabric (xGMI) gives a group of k only ``per_peer·(k−1)``.
"""

from __future__ import annotations

import math

from accelkit.core import Cluster


def placement(cluster: Cluster, size: int, stride: int = 1) -> tuple[int, int]:
    """(ranks of the group per node, nodes the group spans) for ``size`` ranks ``stride`` apart."""
    node = cluster.node_size
    if size * stride <= node:
        return size, 1
    per_node = max(1, min(size, node // stride)) if stride < node else 1
    return per_node, math.ceil(size / per_node)


def scaleout_bandwidth(cluster: Cluster) -> float:
    """Per-device one-direction network bandwidth (bytes/s, line rate): the cluster's NIC rate, capped on a PCIe card
    (no scale-up fabric; the catalog's scale-up figure is its own PCIe link) at that link, which all its traffic to
    a NIC or a peer crosses. Uncapped, 8 PCIe 4.0 cards planned collectives at 0.8 × 50 = 40 GB/s each, above their
    32 GB/s link (found in review)."""
    device, rate = cluster.device, cluster.scaleout_bandwidth_bytes_per_s
    if device.scaleup_domain == 1 and device.scaleup_fabric.startswith("PCIe") and device.scaleup_bandwidth_bytes_per_s:
        return min(rate, device.scaleup_bandwidth_bytes_per_s)
    return rate


class Links:
    """The links of one group: scale-up bandwidth toward its node peers and scale-out bandwidth per NIC,
    both already × efficiency, and the per-collective latency."""

    __slots__ = ("k", "latency_s", "m", "n", "out", "up")

    def __init__(self, cluster: Cluster, size: int, stride: int, *, comm_eff: float, scaleout_eff: float,
                 latency_s: float) -> None:
        self.n = size
        self.k, self.m = placement(cluster, size, stride)
        device = cluster.device
        up = device.scaleup_group_bandwidth(self.k) if device.scaleup_bandwidth_bytes_per_s > 0 else 0.0
        self.out = scaleout_bandwidth(cluster) * scaleout_eff
        # no scale-up fabric (PCIe cards): peers inside a node talk at the network rate at best
        self.up = up * comm_eff if up > 0 else self.out
        self.latency_s = latency_s

    @property
    def spans_nodes(self) -> bool:
        return self.m > 1

    def reduce_scatter_s(self, size_bytes: float) -> float:
        """Also the all-gather time (same volume)."""
        if self.n <= 1 or size_bytes <= 0:
            return 0.0
        intra = (self.k - 1) / self.k * size_bytes / self.up if self.k > 1 else 0.0
        inter = (self.m - 1) / self.m * size_bytes / (self.k * self.out) if self.m > 1 else 0.0
        return max(intra, inter) + self.latency_s * (2 if self.m > 1 else 1)

    all_gather_s = reduce_scatter_s

    def all_reduce_s(self, size_bytes: float) -> float:
        if self.n <= 1 or size_bytes <= 0:
            return 0.0
        return 2 * self.reduce_scatter_s(size_bytes)

    def all_to_all_s(self, size_bytes: float) -> float:
        if self.n <= 1 or size_bytes <= 0:
            return 0.0
        intra = (self.k - 1) / self.n * size_bytes / self.up if self.k > 1 else 0.0
        inter = (self.n - self.k) / self.n * size_bytes / self.out if self.m > 1 else 0.0
        return max(intra, inter) + self.latency_s

    def p2p_s(self, size_bytes: float) -> float:
        """One send to a neighbour (pipeline stages): over NVLink when both sit in one node."""
        if self.n <= 1 or size_bytes <= 0:
            return 0.0
        return size_bytes / (self.out if self.m > 1 else self.up) + self.latency_s


# ---- flat formulas (one link bandwidth), kept for callers that give the bandwidth themselves ----------
def all_reduce_s(size_bytes: float, n: int, bandwidth: float, latency_s: float) -> float:
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return 2 * (n - 1) / n * size_bytes / bandwidth + 2 * latency_s


def reduce_scatter_s(size_bytes: float, n: int, bandwidth: float, latency_s: float) -> float:
    """Also the all-gather time (same volume)."""
    if n <= 1 or size_bytes <= 0:
        return 0.0
    return (n - 1) / n * size_bytes / bandwidth + latency_s


all_gather_s = reduce_scatter_s
all_to_all_s = reduce_scatter_s


def p2p_s(size_bytes: float, bandwidth: float, latency_s: float) -> float:
    if size_bytes <= 0 or bandwidth == float("inf"):
        return 0.0
    return size_bytes / bandwidth + latency_s


def bus_bandwidth(op: str, size_bytes: float, links: Links) -> float:
    """nccl-tests' bus bandwidth the model predicts for ``op`` ('all_reduce' or 'all_gather'/'reduce_scatter')
    on ``size_bytes``: algbw × 2(n−1)/n for all-reduce, × (n−1)/n otherwise."""
    n = links.n
    t = links.all_reduce_s(size_bytes) if op == "all_reduce" else links.reduce_scatter_s(size_bytes)
    factor = 2 * (n - 1) / n if op == "all_reduce" else (n - 1) / n
    return size_bytes / t * factor
