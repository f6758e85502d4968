"""DeviceSpec (one accelerator's facts) and Cluster (devices × count, with their fabrics)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Literal

from accelkit.core.spec import Spec, spec_field


def usable_cores() -> int:
    """CPU cores this process may run on (its affinity mask where the OS has one, else every core)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


Dtype = Literal["fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4"]
DTYPES: tuple[str, ...] = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8", "fp4")


@dataclass(frozen=True, slots=True, kw_only=True)
class DeviceSpec(Spec):
    """One accelerator. Datasheet units are decimal (GB = 10^9, TB/s = 10^12); ``memory_bytes`` is what the
    driver reports where known (HBM is sold in binary units: an "80 GB" H100 holds 81,559 MiB); peaks are dense.
    Every figure is finite: an HBM bandwidth of inf planned Llama-3.1-8B decode on an H100 at 8,386 tokens/s (1,145
    with the datasheet's 3.35 TB/s), with no word of it."""

    name: str = spec_field(doc="Canonical catalog name, e.g. 'H200-SXM-141GB'.")
    vendor: str = spec_field(doc="nvidia, amd, google, intel, or 'cpu' for a probed host.")
    memory_bytes: int = spec_field(
        min=0, doc="Device memory in bytes: the total the driver reports (nvidia-smi, rocm-smi) where the catalog has "
                   "it, else the datasheet's GB × 10^9.")
    memory_datasheet_gb: float | None = spec_field(
        None, min=0.0, finite=True, doc="The memory figure the datasheet gives, in GB as marketed (80, 141, 192 …).")
    memory_type: str = spec_field("", doc="HBM3, HBM3e, GDDR6, DDR5 …")
    memory_bandwidth_bytes_per_s: float = spec_field(min=0.0, finite=True, doc="Peak memory bandwidth, bytes/s.")
    peak_flops: dict[Dtype, float] = spec_field(
        default_factory=dict, doc="Dense peak FLOP/s (OP/s for int8) per dtype; a dtype not listed is unsupported."
    )
    tdp_w: float | None = spec_field(
        None, min=0.0, finite=True, doc="Board power (TDP) in watts; None if unpublished.")
    scaleup_fabric: str = spec_field("", doc="NVLink4, xGMI, ICI, PCIe5 …")
    scaleup_bandwidth_bytes_per_s: float = spec_field(
        0.0, min=0.0, finite=True, doc="Per-device, one-direction bandwidth into the scale-up fabric (headline / 2)."
    )
    per_peer_bandwidth_bytes_per_s: float | None = spec_field(
        None, min=0.0, finite=True,
        doc="Mesh fabrics (xGMI): bandwidth to each peer; a group of n gets per_peer·(n−1)."
    )
    scaleup_domain: int = spec_field(1, min=1, doc="Devices reachable over the scale-up fabric.")
    status: str = spec_field("", doc="V vendor-checked, V2 two secondary sources agree, R recalled, M measured.")
    source: str = spec_field("", doc="Where the figures come from.")
    aliases: tuple[str, ...] = spec_field((), doc="Other names it is looked up by.")

    def validate(self) -> None:
        for dtype, value in self.peak_flops.items():
            if value <= 0:
                raise ValueError(f"peak_flops[{dtype!r}]={value} must be > 0 (omit unsupported dtypes)")
            # a peak of inf planned compute as free (Llama-3.1-8B decode, H100: 1,274 tok/s, not 1,145)
            if math.isinf(value):
                raise ValueError(f"peak_flops[{dtype!r}]={value!r} is not a finite number; expected a dense peak in "
                                 "FLOP/s such as 9.89e14")

    def peak(self, dtype: str) -> float | None:
        """Dense peak for ``dtype`` in FLOP/s, or None when the device does not support it."""
        return next((v for k, v in self.peak_flops.items() if k == dtype), None)

    def scaleup_group_bandwidth(self, group: int) -> float:
        """One-direction bandwidth a device has toward a group of ``group`` peers incl. itself.

        On a switched fabric (NVLink) that is the link bandwidth; on a mesh (xGMI) only the links to
        the group's members count: per_peer · (group − 1), capped by the headline.
        """
        if group <= 1:
            return float("inf")
        if self.per_peer_bandwidth_bytes_per_s is None:
            return self.scaleup_bandwidth_bytes_per_s
        return min(self.scaleup_bandwidth_bytes_per_s, self.per_peer_bandwidth_bytes_per_s * (group - 1))


@dataclass(frozen=True, slots=True, kw_only=True)
class Cluster(Spec):
    """``num_devices`` of one DeviceSpec, grouped into nodes of ``devices_per_node``."""

    device: DeviceSpec = spec_field(doc="The accelerator.")
    num_devices: int = spec_field(1, min=1, doc="Total devices.")
    devices_per_node: int | None = spec_field(
        None, min=1, doc="Devices per node (scale-up group); None means min(num_devices, scaleup_domain)."
    )
    scaleout_bandwidth_bytes_per_s: float = spec_field(
        50e9, min=0.0, finite=True,
        doc="Per-device one-direction network bandwidth across nodes (default 400 Gb/s NIC)."
    )

    def validate(self) -> None:
        if self.devices_per_node is not None and self.devices_per_node > self.device.scaleup_domain:
            raise ValueError(
                f"devices_per_node={self.devices_per_node} exceeds the scale-up domain of "
                f"{self.device.name} ({self.device.scaleup_domain})"
            )

    @property
    def node_size(self) -> int:
        """Devices that share the scale-up fabric."""
        return self.devices_per_node or min(self.num_devices, self.device.scaleup_domain)

    @property
    def num_nodes(self) -> int:
        return -(-self.num_devices // self.node_size)
