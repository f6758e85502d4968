"""Collective communication time (bandwidth term over the slowest link + a per-collective latency).

* ring all-reduce:              2·(n−1)/n · S / B
* reduce-scatter / all-gather:    (n−1)/n · S / B
* all-to-all (MoE dispatch):      (n−1)/n · S / B
* point-to-point (pipeline):              S / B

``S`` is the full buffer size per rank; ``B`` the one-direction bandwidth each rank has toward its group:
the scale-up fabric when the whole group sits in one node (a mesh such as xGMI gives a group of n only
``per_peer·(n−1)``), otherwise the scale-out network per device.
"""

from __future__ import annotations

from accelkit.core import Cluster


def group_bandwidth(cluster: Cluster, size: int, stride: int = 1) -> tuple[float, str]:
    """Bandwidth (bytes/s) and fabric name for a group of ``size`` ranks placed ``stride`` apart."""
    if size <= 1:
        return float("inf"), "none"
    device = cluster.device
    if size * stride <= cluster.node_size and device.scaleup_bandwidth_bytes_per_s > 0:
        return device.scaleup_group_bandwidth(size), device.scaleup_fabric or "scale-up"
    return cluster.scaleout_bandwidth_bytes_per_s, "scale-out"


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
