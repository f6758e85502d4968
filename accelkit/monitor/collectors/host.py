"""Host metrics through psutil — CPU per core, memory, network, disk — and CPU energy from RAPL
(``/sys/class/powercap``) where readable. Package domains only: they contain the core and uncore
sub-domains, DRAM is reported separately, and psys (the whole platform) contains the packages, so nothing
is counted twice. Disk bytes likewise come from the physical disks only: I/O through a loop, device-mapper
or md device is counted again on the disk beneath it.

CPU time goes out twice: as node_exporter's counter (seconds per core and mode, so ``rate()`` works at
any scrape interval) and as a utilisation gauge, the busy share of the time between this collector's
previous reading and this one (the sampler interval)."""

from __future__ import annotations

import socket
import time
from pathlib import Path
from typing import Any

import psutil
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from accelkit.hardware.detect import POWERCAP, rapl_packages
from accelkit.monitor.collectors.base import Collector

SYS_BLOCK = Path("/sys/block")
#: block devices stacked on others (loop, device-mapper, md RAID) or in memory (zram, ramdisks): their I/O is
#: either counted again on a physical disk or is no disk I/O at all
VIRTUAL_DISKS = ("loop", "dm-", "md", "zram", "ram")
#: cpu_times fields left out of the modes: on Linux guest time is already inside user (guest_nice inside
#: nice), so summing them too would count it twice — node_exporter leaves them out of its modes as well
GUEST_MODES = ("guest", "guest_nice")
#: modes in which a core does nothing (Linux does not count iowait in idle); the rest is busy time
IDLE_MODES = ("idle", "iowait")


def cpu_modes(times: Any) -> dict[str, float]:
    """Seconds per mode of one core's ``psutil.cpu_times()`` entry, guest time left out."""
    return {mode: getattr(times, mode) for mode in times._fields if mode not in GUEST_MODES}


def busy_percent(before: dict[str, float], after: dict[str, float]) -> float:
    """Busy share (%) of one core's time between two readings — psutil's ``cpu_percent`` formula, rounded
    to 0.1 % as it does (the kernel counts in 10 ms ticks); 0 when no tick passed in between."""
    total = sum(after.values()) - sum(before.values())
    idle = sum(after.get(m, 0.0) - before.get(m, 0.0) for m in IDLE_MODES)
    if total <= 0:
        return 0.0
    return round(min(100.0, max(0.0, 100.0 * (total - idle) / total)), 1)


def rapl_domains(root: Path = POWERCAP) -> dict[str, tuple[Path, int]]:
    """Readable RAPL package domains: name → (energy_uj file, max_energy_range_uj for wrap-around)."""
    domains: dict[str, tuple[Path, int]] = {}
    for zone in rapl_packages(root):
        try:
            name = (zone / "name").read_text().strip()
            int((zone / "energy_uj").read_text())
            max_range = int((zone / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            continue
        domains[f"{name}-{zone.name.split(':')[1]}"] = (zone / "energy_uj", max_range)
    return domains


def physical_disk_bytes(sys_block: Path = SYS_BLOCK) -> tuple[int, int] | None:
    """(read, written) bytes summed over the physical whole disks — those with a ``device`` under
    ``sys_block`` — or None when psutil sees none. psutil's own total sums every device under /sys/block, so a
    byte written through a loop, dm (LVM, dm-crypt) or md device was counted on it and again on the disk
    beneath (found in review); partitions are not under /sys/block and are inside their disk's counts."""
    disks = [io for name, io in (psutil.disk_io_counters(perdisk=True) or {}).items()
             if not name.startswith(VIRTUAL_DISKS) and (sys_block / name.replace("/", "!") / "device").exists()]
    if not disks:
        return None
    return sum(io.read_bytes for io in disks), sum(io.write_bytes for io in disks)


class HostCollector(Collector):
    """CPU, memory, network, disk and RAPL energy of this host."""

    name = "host"

    def __init__(self, *, powercap: Path = POWERCAP, sys_block: Path = SYS_BLOCK) -> None:
        super().__init__()
        self.hostname = socket.gethostname()
        self.sys_block = sys_block
        # the utilisation gauge is the change since the previous reading: this one is the first
        self._cpu_modes = [cpu_modes(t) for t in psutil.cpu_times(percpu=True)]
        self._cpu_read_at = time.monotonic()
        #: seconds the latest utilisation sample covers (None before the first sample)
        self.cpu_window_s: float | None = None
        self._rapl = rapl_domains(powercap)
        self._powercap = powercap
        self._energy_j: dict[str, float] = {d: 0.0 for d in self._rapl}
        self._last_uj: dict[str, int] = {}

    @property
    def rapl_note(self) -> str | None:
        if self._rapl:
            return None
        return f"no readable RAPL counters under {self._powercap}: CPU energy is not reported (not estimated)"

    def seconds_since_cpu_reading(self) -> float:
        """How long the next utilisation sample would cover if taken now."""
        return time.monotonic() - self._cpu_read_at

    def _rapl_joules(self) -> dict[str, float]:
        for domain, (path, max_range) in self._rapl.items():
            try:
                now = int(path.read_text())
            except OSError:
                continue
            last = self._last_uj.get(domain)
            if last is not None:
                delta = now - last if now >= last else now + max_range - last  # the counter wrapped
                self._energy_j[domain] += delta / 1e6
            self._last_uj[domain] = now
        return self._energy_j

    def families(self) -> list[Metric]:
        host = {"Hostname": self.hostname}
        now_modes, now = [cpu_modes(t) for t in psutil.cpu_times(percpu=True)], time.monotonic()
        cpu = GaugeMetricFamily("accelkit_host_cpu_utilization_percent",
                                "CPU utilisation per logical core, averaged over the sampler interval (%).", labels=["cpu", "Hostname"])
        for i, (before, after) in enumerate(zip(self._cpu_modes, now_modes, strict=False)):
            cpu.add_metric([str(i), host["Hostname"]], busy_percent(before, after))
        self._cpu_modes, self.cpu_window_s, self._cpu_read_at = now_modes, now - self._cpu_read_at, now
        cpu_seconds = CounterMetricFamily("accelkit_host_cpu_seconds", "Seconds each logical core spent in each mode (node_exporter's node_cpu_seconds_total).",
                                          labels=["cpu", "mode", "Hostname"])
        for i, modes in enumerate(now_modes):
            for mode, seconds in modes.items():
                cpu_seconds.add_metric([str(i), mode, self.hostname], seconds)
        mem = psutil.virtual_memory()
        used = GaugeMetricFamily("accelkit_host_memory_used_bytes", "Host memory in use (total − available), bytes.", labels=["Hostname"])
        used.add_metric([self.hostname], mem.total - mem.available)
        total = GaugeMetricFamily("accelkit_host_memory_total_bytes", "Host memory, bytes.", labels=["Hostname"])
        total.add_metric([self.hostname], mem.total)
        net = CounterMetricFamily("accelkit_host_network_bytes", "Bytes through network interfaces.",
                                  labels=["interface", "direction", "Hostname"])
        for nic, c in psutil.net_io_counters(pernic=True).items():
            net.add_metric([nic, "rx", self.hostname], c.bytes_recv)
            net.add_metric([nic, "tx", self.hostname], c.bytes_sent)
        disk = CounterMetricFamily("accelkit_host_disk_bytes", "Bytes read/written by the physical disks (loop, dm, md "
                                   "devices left out: their I/O is counted on the disk beneath).", labels=["direction", "Hostname"])
        io = physical_disk_bytes(self.sys_block)
        if io is not None:
            disk.add_metric(["read", self.hostname], io[0])
            disk.add_metric(["write", self.hostname], io[1])
        families: list[Metric] = [cpu, cpu_seconds, used, total, net, disk]
        if self._rapl:
            energy = CounterMetricFamily("accelkit_host_cpu_energy_joules", "CPU package energy from RAPL since the exporter started.",
                                         labels=["domain", "Hostname"])
            for domain, joules in self._rapl_joules().items():
                energy.add_metric([domain, self.hostname], joules)
            families.append(energy)
        return families
