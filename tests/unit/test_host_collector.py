"""The host collector's disk bytes and RAPL energy, read by the real code from fake procfs / sysfs / powercap
trees in a tmp folder (psutil's own parser reads the fake /proc/diskstats)."""

from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from accelkit.bench import trackers
from accelkit.monitor.collectors.host import HostCollector, rapl_domains

#: device → (sectors read, sectors written); a 64 MiB write through loop0 (a file on vda) and 8 MiB through
#: dm-0 (LVM on nvme0n1) are counted on the stacked device and again on the disk beneath
DISKSTATS = {
    "vda": (1000, 3_000_000), "vda1": (900, 2_900_000), "nvme0n1": (500, 40_000), "nvme0n1p1": (400, 30_000),
    "loop0": (0, 131_072), "dm-0": (10, 16_384), "md0": (7, 7), "zram0": (5, 5), "sr0": (3, 0),
}
PHYSICAL = ("vda", "nvme0n1")  # the whole disks with a device behind them
PARTITIONS = ("vda1", "nvme0n1p1")  # in /proc/diskstats, but under their disk in sysfs, not in /sys/block


@pytest.fixture
def fake_disks(tmp_path, monkeypatch) -> Iterator[Path]:
    """A /proc/diskstats (Linux 5.5+ layout) and a /sys/block where only the physical disks (and the CD
    drive sr0, whose counts are real I/O too) have a ``device``; returns the fake /sys/block."""
    proc = tmp_path / "proc"
    proc.mkdir()
    lines = [f"{8 + i} 0 {name} 1 0 {read} 1 1 0 {written} 1 0 1 1 0 0 0 0 0 0"
             for i, (name, (read, written)) in enumerate(DISKSTATS.items())]
    (proc / "diskstats").write_text("\n".join(lines) + "\n")
    for real in ("stat", "meminfo", "net"):  # the collector's other readings, from the real /proc
        (proc / real).symlink_to(f"/proc/{real}")
    sys_block = tmp_path / "sys" / "block"
    for name in DISKSTATS.keys() - PARTITIONS:
        (sys_block / name).mkdir(parents=True)
    for name in (*PHYSICAL, "sr0"):
        (sys_block / name / "device").mkdir()
    monkeypatch.setattr(psutil, "PROCFS_PATH", str(proc))
    psutil.disk_io_counters.cache_clear()  # psutil would take the fake counts, lower than the real ones, for wraps
    yield sys_block
    psutil.disk_io_counters.cache_clear()


def _disk_bytes(collector: HostCollector) -> dict[str, float]:
    collector.sample()
    (family,) = [f for f in collector.collect() if f.name == "accelkit_host_disk_bytes"]
    return {s.labels["direction"]: s.value for s in family.samples}


def test_disk_bytes_count_the_physical_disks_only(fake_disks):
    # psutil's total summed every /sys/block device: a write through loop0 or dm-0 was counted twice
    read = sum(DISKSTATS[d][0] for d in (*PHYSICAL, "sr0")) * 512
    written = sum(DISKSTATS[d][1] for d in (*PHYSICAL, "sr0")) * 512
    assert _disk_bytes(HostCollector(sys_block=fake_disks)) == {"read": read, "write": written}
    assert written == (3_000_000 + 40_000) * 512  # neither loop0's 64 MiB nor dm-0's 8 MiB again


def test_no_physical_disk_is_no_series_not_zero(fake_disks, tmp_path):
    empty = tmp_path / "empty-sys-block"  # a container that sees no disk: a gap, not a counter stuck at 0
    empty.mkdir()
    assert _disk_bytes(HostCollector(sys_block=empty)) == {}


def _zone(root: Path, zone: str, name: str, uj: int) -> Path:
    path = root / zone
    path.mkdir(parents=True)
    (path / "name").write_text(f"{name}\n")
    (path / "energy_uj").write_text(f"{uj}\n")
    (path / "max_energy_range_uj").write_text("262143328850\n")
    return path


@pytest.fixture
def powercap_with_psys(tmp_path) -> Path:
    """A client's powercap tree: psys (the whole platform, the package inside it) beside package-0."""
    root = tmp_path / "powercap"
    _zone(root, "intel-rapl:0", "package-0", 1_000_000)
    _zone(root, "intel-rapl:0:0", "core", 500_000)
    _zone(root, "intel-rapl:1", "psys", 2_000_000)
    return root


def test_rapl_psys_is_not_exported_as_cpu_energy(powercap_with_psys):
    root = powercap_with_psys
    assert list(rapl_domains(root)) == ["package-0-0"]
    host = HostCollector(powercap=root)
    host.sample()
    (root / "intel-rapl:0" / "energy_uj").write_text(f"{1_000_000 + 15_000_000}\n")  # package: 15 J
    (root / "intel-rapl:1" / "energy_uj").write_text(f"{2_000_000 + 25_000_000}\n")  # platform: 25 J
    host.sample()
    (family,) = [f for f in host.collect() if f.name == "accelkit_host_cpu_energy_joules"]
    assert [(s.labels["domain"], s.value) for s in family.samples] == [("package-0-0", 15.0)]  # not 15 + 25


def test_bench_energy_sums_rapl_packages_not_psys(powercap_with_psys):
    root = powercap_with_psys
    domains, reason = trackers.rapl_domains(root)
    assert reason is None and domains == [root / "intel-rapl:0"]
    tracker, _ = trackers.energy_tracker("cpu", rapl_root=root)
    assert tracker is not None
    tracker.start()
    (root / "intel-rapl:0" / "energy_uj").write_text(f"{1_000_000 + 15_000_000}\n")
    (root / "intel-rapl:1" / "energy_uj").write_text(f"{2_000_000 + 25_000_000}\n")
    assert tracker.stop() == pytest.approx(15.0)


def test_a_psys_only_tree_has_no_cpu_energy(tmp_path):
    root = tmp_path / "powercap"
    _zone(root, "intel-rapl:0", "psys", 1)
    assert rapl_domains(root) == {}
    assert HostCollector(powercap=root).rapl_note == (
        f"no readable RAPL counters under {root}: CPU energy is not reported (not estimated)")
    assert trackers.rapl_domains(root) == ([], f"no RAPL package domain under {root}")
