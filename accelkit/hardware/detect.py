"""What is this machine? Accelerators through torch and NVML, the CPU through /proc and psutil,
and the environment record stored with every result."""

from __future__ import annotations

import functools
import importlib.metadata
import os
import platform
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import accelkit
from accelkit.hardware.catalog import match_device_name

#: CPU flags (as /proc/cpuinfo spells them) that matter for deep-learning kernels
VECTOR_FLAGS = (
    "sse4_2", "avx", "avx2", "fma", "avx_vnni", "avx512f", "avx512bw", "avx512_vnni", "avx512_bf16",
    "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "asimd", "sve", "sve2",
)


def _cpuinfo() -> dict[str, str]:
    info: dict[str, str] = {}
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return info
    for line in text.splitlines():
        if not line.strip():
            break  # first processor block is enough
        key, _, value = line.partition(":")
        info[key.strip()] = value.strip()
    return info


def this_cpu() -> str:
    """This machine's CPU as a stored result's ``hardware`` names it ('cpu: <model>'): what `hw probe` and the bench
    store, and what the planner looks this CPU's probes up by — one spelling for all three."""
    return "cpu: " + str(cpu_info(with_torch=False)["model"])


#: Linux's powercap tree, where the RAPL energy counters are
POWERCAP = Path("/sys/class/powercap")


def rapl_packages(root: Path = POWERCAP) -> list[Path]:
    """The top-level RAPL zones named ``package-N`` under ``root``, in order — the CPU packages' energy counters
    (monitor and bench both count these). psys (the whole platform) is a top-level zone too but holds the packages,
    so summing it with them counted the CPU twice (found in review); sub-zones (core, uncore, dram) are inside their
    package's count."""
    zones = []
    for zone in sorted(root.glob("intel-rapl:*")) if root.is_dir() else []:
        if zone.name.count(":") != 1:
            continue
        try:
            if (zone / "name").read_text().strip().startswith("package-"):
                zones.append(zone)
        except OSError:
            continue
    return zones


def cpu_info(*, with_torch: bool = True) -> dict[str, Any]:
    """Model, core counts, torch threads (``with_torch``) and vector extensions of the host CPU."""
    import psutil

    raw = _cpuinfo()
    flags = set((raw.get("flags") or raw.get("Features") or "").split())
    torch_threads = None
    if with_torch:
        try:
            import torch

            torch_threads = torch.get_num_threads()
        except ImportError:
            pass
    return {
        "model": raw.get("model name") or platform.processor() or platform.machine(),
        "arch": platform.machine(),
        "physical_cores": psutil.cpu_count(logical=False),
        "logical_cores": psutil.cpu_count(logical=True),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_threads": torch_threads,
        "memory_bytes": psutil.virtual_memory().total,
        "vector_extensions": [f for f in VECTOR_FLAGS if f in flags],
    }


def _nvml_info() -> dict[int, dict[str, Any]]:
    """Per-GPU driver, UUID, power limit and clocks from NVML by NVML's index (every GPU of the machine, in PCI
    order, whatever CUDA_VISIBLE_DEVICES says); {} when NVML is not available."""
    try:
        import pynvml  # provided by the nvidia-ml-py distribution
    except ImportError:
        return {}
    try:
        pynvml.nvmlInit()
    except Exception:  # no driver / no GPU: NVML raises its own error types
        return {}
    try:
        driver = pynvml.nvmlSystemGetDriverVersion()
        out: dict[int, dict[str, Any]] = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = pynvml.nvmlDeviceGetUUID(handle)
            entry: dict[str, Any] = {"driver": driver, "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid}
            readers: tuple[tuple[str, Callable[[Any], Any]], ...] = (
                ("power_limit_w", lambda h: pynvml.nvmlDeviceGetEnforcedPowerLimit(h) / 1000),
                ("sm_clock_max_mhz", lambda h: pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)),
            )
            for key, fn in readers:
                try:
                    entry[key] = fn(handle)
                except Exception:  # not every board exposes every field
                    entry[key] = None
            out[i] = entry
        return out
    finally:
        pynvml.nvmlShutdown()


def accelerators() -> list[dict[str, Any]]:
    """CUDA or ROCm devices torch can see (empty on a CPU-only machine or without torch)."""
    try:
        import torch
    except ImportError:
        return []
    if not torch.cuda.is_available():
        return []
    nvml = _nvml_info()
    by_uuid = {str(e["uuid"]).lower().removeprefix("gpu-"): e for e in nvml.values() if e.get("uuid")}
    machine = {"driver": next(iter(nvml.values()))["driver"]} if nvml else {}  # one for every GPU (a MIG instance too)
    is_rocm = torch.version.hip is not None
    devices = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        match = match_device_name(props.name)
        # torch's index is not NVML's: under CUDA_VISIBLE_DEVICES=2,3 (a scheduler's usual slice) cuda:0 is NVML's GPU
        # 2, and CUDA orders the fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID; taken by index, a GPU got another
        # one's UUID and power limit (found in review). The UUID both report ties them; a torch without it keeps the index.
        uuid = getattr(props, "uuid", None)
        record = by_uuid.get(str(uuid).lower().removeprefix("gpu-"), {}) if uuid is not None and by_uuid else nvml.get(i, {})
        devices.append(
            {
                "index": i,
                "name": props.name,
                "vendor": "amd" if is_rocm else "nvidia",
                "memory_bytes": props.total_memory,
                "compute_capability": None if is_rocm else f"{props.major}.{props.minor}",
                "gcn_arch": getattr(props, "gcnArchName", None) if is_rocm else None,
                "multiprocessors": props.multi_processor_count,
                "catalog_name": match.name if match else None,
                **machine, **record,
            }
        )
    return devices


def detect() -> dict[str, Any]:
    """Describe the local machine: accelerators (if any), the CPU, and the software stack."""
    devices = accelerators()
    return {
        "hostname": socket.gethostname(),
        "os": f"{platform.system()} {platform.release()}",
        "accelerators": devices,
        "cpu": cpu_info(),
        "primary": "cuda" if devices else "cpu",
        "software": software_versions(),
    }


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


@functools.cache
def git_commit() -> str | None:
    """Commit of the accelkit source tree when it runs from a git checkout, else None."""
    root = Path(accelkit.__file__).resolve().parent.parent
    if not (root / ".git").exists():
        return None
    try:
        out = subprocess.run(
            ["git", "-C", str(root), "rev-parse", "--short=12", "HEAD"],
            capture_output=True, text=True, timeout=5, check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() or None


def software_versions() -> dict[str, Any]:
    """Versions read from package metadata (no heavy imports)."""
    info: dict[str, Any] = {
        "python": platform.python_version(),
        "accelkit": accelkit.__version__,
        "accelkit_git": git_commit(),
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "torchao": _version("torchao"),
    }
    return info


def environment(*, with_torch: bool = False) -> dict[str, Any]:
    """The environment stored beside every result: software, host and — when torch is in use — the
    devices, CUDA/ROCm versions, threads and math modes."""
    env: dict[str, Any] = {**software_versions(), "hostname": socket.gethostname()}
    cpu = cpu_info(with_torch=with_torch)
    env["cpu"] = {k: cpu[k] for k in ("model", "logical_cores", "usable_cores", "torch_threads")}
    if with_torch:
        import torch

        env["torch_threads"] = torch.get_num_threads()
        env["cuda"] = torch.version.cuda
        env["rocm"] = torch.version.hip
        env["tf32_matmul"] = torch.backends.cuda.matmul.allow_tf32
        env["accelerators"] = accelerators()
    return env
