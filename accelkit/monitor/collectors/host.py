"""Host metrics through psutil — CPU per core, memory, network, disk — and CPU energy from RAPL
(``/sys/class/powercap``) where readable. Package domains only: they contain the core and uncore
sub-domains, and DRAM is reported separately, so nothing is counted twice."""

from __future__ import annotations

import socket
from pathlib import Path

import psutil
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

from accelkit.monitor.collectors.base import Collector

POWERCAP = Path("/sys/class/powercap")


def rapl_domains(root: Path = POWERCAP) -> dict[str, tuple[Path, int]]:
    """Readable top-level RAPL domains: name → (energy_uj file, max_energy_range_uj for wrap-around)."""
    domains: dict[str, tuple[Path, int]] = {}
    if not root.is_dir():
        return domains
    for zone in sorted(root.glob("intel-rapl:*")):
        if zone.name.count(":") != 1:  # top-level package zones only (sub-zones are inside them)
            continue
        try:
            name = (zone / "name").read_text().strip()
            int((zone / "energy_uj").read_text())
            max_range = int((zone / "max_energy_range_uj").read_text())
        except (OSError, ValueError):
            continue
        domains[f"{name}-{zone.name.split(':')[1]}"] = (zone / "energy_uj", max_range)
    return domains


class HostCollector(Collector):
    """CPU, memory, network, disk and RAPL energy of this host."""

    name = "host"

    def __init__(self) -> None:
        super().__init__()
        self.hostname = socket.gethostname()
        psutil.cpu_percent(percpu=True)  # the first call primes the per-core counters
        self._rapl = rapl_domains()
        self._energy_j: dict[str, float] = {d: 0.0 for d in self._rapl}
        self._last_uj: dict[str, int] = {}

    @property
    def rapl_note(self) -> str | None:
        if self._rapl:
            return None
        return "no readable RAPL counters under /sys/class/powercap: CPU energy is not reported (not estimated)"

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
        cpu = GaugeMetricFamily("accelkit_host_cpu_utilization_percent", "CPU utilisation per logical core over the last interval (%).",
                                labels=["cpu", "Hostname"])
        for i, pct in enumerate(psutil.cpu_percent(percpu=True)):
            cpu.add_metric([str(i), host["Hostname"]], pct)
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
        disk = CounterMetricFamily("accelkit_host_disk_bytes", "Bytes read/written by block devices.", labels=["direction", "Hostname"])
        io = psutil.disk_io_counters()
        if io is not None:
            disk.add_metric(["read", self.hostname], io.read_bytes)
            disk.add_metric(["write", self.hostname], io.write_bytes)
        families: list[Metric] = [cpu, used, total, net, disk]
        if self._rapl:
            energy = CounterMetricFamily("accelkit_host_cpu_energy_joules", "CPU package energy from RAPL since the exporter started.",
                                         labels=["domain", "Hostname"])
            for domain, joules in self._rapl_joules().items():
                energy.add_metric([domain, self.hostname], joules)
            families.append(energy)
        return families
