"""Trackers read counters around each timed block: peak memory and energy (docs/methodology.md, "Energy").

One shape for the family: ``start()`` just before a block, ``stop() -> value`` just after it (the block
has synchronized by then). The factories return ``(tracker, None)`` or ``(None, reason)`` — a counter
that cannot be read is reported as unavailable with the reason, never estimated.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import ClassVar, Protocol

from accelkit.hardware.detect import POWERCAP, rapl_packages


class Tracker(Protocol):
    #: what the number covers, e.g. "GPU board (NVML total-energy counter)"
    scope: str

    def start(self) -> None: ...

    def stop(self) -> float: ...


# ---- memory ----------------------------------------------------------------------------------------
class CudaMemory:
    """Peak increase of the bytes the caching allocator handed out during the block (``max_memory_allocated``
    minus what was allocated when it started: other variants resident beside it are not counted); the
    reserved peak (whole device) is kept in ``reserved``."""

    scope = ("CUDA: bytes the variant holds after its warm-up (weights, optimizer state, caches) + the peak increase "
             "of max_memory_allocated over a block (reserved_peak: the caching allocator's reserve, whole device)")

    def __init__(self, device: str):
        self.device = device
        self.reserved = 0
        self.run_peak = 0  # max_memory_allocated over everything since the run began (kept across the resets)
        self._before = 0

    def start(self) -> None:
        import torch

        torch.cuda.synchronize(self.device)
        self.run_peak = max(self.run_peak, torch.cuda.max_memory_allocated(self.device))
        self._before = torch.cuda.memory_allocated(self.device)
        torch.cuda.reset_peak_memory_stats(self.device)

    def stop(self) -> float:
        import torch

        torch.cuda.synchronize(self.device)
        self.reserved = max(self.reserved, torch.cuda.max_memory_reserved(self.device))
        peak = torch.cuda.max_memory_allocated(self.device)
        self.run_peak = max(self.run_peak, peak)
        return float(max(0, peak - self._before))


def _status_kib(field: str) -> int:
    text = Path("/proc/self/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB", text, re.MULTILINE)
    if match is None:
        raise OSError(f"/proc/self/status has no {field}")
    return int(match.group(1)) * 1024


class CpuRssPeak:
    """Peak RSS increase over the block: reset the kernel's high-water mark (``/proc/self/clear_refs``,
    value 5), then ``VmHWM`` after minus ``VmRSS`` before. Exact, and no sampling thread.

    The reset is the process's, and it also resets what ``getrusage``/``wait4`` report as ``ru_maxrss``: ``VmHWM``
    is read before each reset and the highest kept in ``process_peak`` (per process, like the reset), as
    :class:`CudaMemory` keeps ``run_peak`` across its resets. Without it the whole run's peak covered only the time
    since the last block began (a factory that held 1 GiB while it built the model read 399 MiB), and so did the
    tests that read a bench's peak from ``wait4`` (found in review)."""

    #: the highest VmHWM any tracker in this process read before resetting it
    process_peak: ClassVar[int] = 0

    scope = ("CPU: RSS the variant added by the end of its warm-up + the peak RSS increase over a block "
             "(VmHWM after − VmRSS before; /proc/self/clear_refs); pages an earlier variant or the reference pass "
             "freed are reused uncounted, so the figure depends on the order — to compare variants' memory on a "
             "CPU, run one variant per command")

    def __init__(self) -> None:
        self._before = 0

    def start(self) -> None:
        CpuRssPeak.process_peak = max(CpuRssPeak.process_peak, _status_kib("VmHWM"))
        Path("/proc/self/clear_refs").write_text("5")
        self._before = _status_kib("VmRSS")

    def stop(self) -> float:
        return float(max(0, _status_kib("VmHWM") - self._before))


def run_peak_bytes(device: str, tracker: Tracker | None) -> tuple[int | None, str]:
    """The whole run's peak memory and what it covers: on CUDA, max_memory_allocated since the run began (the
    reference pass, every load, warm-up and block); on a CPU, the process's peak RSS since it began (the Python
    runtime and its imports included): ``VmHWM`` kept across the tracker's resets, or ``ru_maxrss`` where there is
    no tracker (and so no reset)."""
    if device.startswith("cuda"):
        import torch

        peak = max(getattr(tracker, "run_peak", 0), torch.cuda.max_memory_allocated(device))
        return int(peak), "CUDA max_memory_allocated over the whole run (reference pass, loads, warm-up, blocks)"
    if isinstance(tracker, CpuRssPeak):
        return (max(CpuRssPeak.process_peak, _status_kib("VmHWM")),
                "peak RSS of this process (VmHWM, kept across the per-block resets; includes the Python runtime, "
                "imports and earlier work)")
    import resource

    return (int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss) * 1024,
            "peak RSS of this process (ru_maxrss; includes the Python runtime, imports and earlier work)")


def memory_tracker(device: str) -> tuple[Tracker | None, str | None]:
    if device.startswith("cuda"):
        return CudaMemory(device), None
    try:
        tracker = CpuRssPeak()
        tracker.start()
        tracker.stop()
    except OSError as exc:
        return None, f"peak RSS cannot be reset here ({exc}); needs Linux /proc/self/clear_refs"
    return tracker, None


# ---- energy ----------------------------------------------------------------------------------------
class NvmlEnergy:
    """The NVML total-energy counter (millijoules since driver load; Volta and newer)."""

    scope = "GPU board (NVML total-energy counter)"

    def __init__(self, handle: object):
        import pynvml

        self._nvml = pynvml
        self._handle = handle
        self._start_mj = 0

    def start(self) -> None:
        self._start_mj = self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle)

    def stop(self) -> float:
        return float(self._nvml.nvmlDeviceGetTotalEnergyConsumption(self._handle) - self._start_mj) / 1000.0


class RaplEnergy:
    """CPU package energy from RAPL. Only the top-level package domains are summed (one per socket):
    their DRAM/core subdomains overlap them. Counters wrap at ``max_energy_range_uj``."""

    scope = "CPU package (RAPL)"

    def __init__(self, domains: list[Path]):
        self._domains = domains
        self._ranges = [int((d / "max_energy_range_uj").read_text()) for d in domains]
        self._start: list[int] = []

    def _read(self) -> list[int]:
        return [int((d / "energy_uj").read_text()) for d in self._domains]

    def start(self) -> None:
        self._start = self._read()

    def stop(self) -> float:
        total_uj = 0
        for before, after, wrap in zip(self._start, self._read(), self._ranges, strict=True):
            total_uj += after - before if after >= before else after + wrap - before
        return total_uj / 1e6


def _nvml_handle(device: str) -> tuple[object | None, str | None]:
    try:
        import pynvml
    except ImportError:
        return None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)"
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return None, f"NVML cannot start ({exc})"
    import torch

    props = torch.cuda.get_device_properties(device)
    try:
        uuid = str(props.uuid)
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}")
    except Exception:
        index = torch.device(device).index or 0
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    try:
        pynvml.nvmlDeviceGetTotalEnergyConsumption(handle)
    except Exception as exc:
        return None, f"the NVML total-energy counter is not readable on {props.name} ({exc}); needs Volta or newer"
    return handle, None


def rapl_domains(root: Path = POWERCAP) -> tuple[list[Path], str | None]:
    """Readable top-level RAPL package domains, or ([], why not)."""
    if not root.exists():
        return [], f"no RAPL interface ({root} does not exist: not an Intel/AMD host kernel, or a container)"
    packages = rapl_packages(root)
    if not packages:
        return [], f"no RAPL package domain under {root}"
    try:
        for p in packages:
            int((p / "energy_uj").read_text())
            int((p / "max_energy_range_uj").read_text())
    except PermissionError:
        return [], f"RAPL counters under {root} are readable by root only (chmod o+r …/energy_uj or run as root)"
    except (OSError, ValueError) as exc:
        return [], f"RAPL counters under {root} cannot be read ({exc})"
    return packages, None


def energy_tracker(device: str, *, rapl_root: Path = POWERCAP) -> tuple[Tracker | None, str | None]:
    if device.startswith("cuda"):
        handle, reason = _nvml_handle(device)
        return (NvmlEnergy(handle), None) if handle is not None else (None, reason)
    domains, reason = rapl_domains(rapl_root)
    if not domains:
        return None, f"energy not measured: no NVML device and {reason}"
    return RaplEnergy(domains), None
