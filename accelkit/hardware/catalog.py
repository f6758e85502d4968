"""The accelerator catalog: ``data/hardware.csv`` (sources and
status kept per row) turned into DeviceSpecs, looked up by name or alias, case-insensitively."""

from __future__ import annotations

import csv
import functools
import io
import re
from importlib import resources

from accelkit.core import DeviceSpec, UnknownNameError
from accelkit.core.device import Dtype

_TFLOP_COLUMNS: dict[Dtype, str] = {
    "fp64": "fp64_TF", "fp32": "fp32_TF", "tf32": "tf32_TF", "bf16": "bf16_TF",
    "fp16": "fp16_TF", "fp8": "fp8_TF", "int8": "int8_TOPS", "fp4": "fp4_TF",
}


def _key(name: str) -> str:
    """Lookup key: case, hyphens, underscores and spaces do not matter ('H200-SXM' == 'h200 sxm')."""
    return re.sub(r"[\s_\-]", "", name.lower())


def _float(value: str) -> float | None:
    return float(value) if value.strip() else None


def _aliases(name: str) -> list[str]:
    """Leading hyphen-separated prefixes that contain a digit: H200-SXM-141GB → H200, H200-SXM."""
    parts = name.split("-")
    return ["-".join(parts[:i]) for i in range(1, len(parts)) if any(c.isdigit() for c in "-".join(parts[:i]))]


def _row_to_spec(row: dict[str, str]) -> DeviceSpec:
    peaks = {
        dtype: float(row[col]) * 1e12 for dtype, col in _TFLOP_COLUMNS.items() if _float(row[col]) is not None
    }
    tdp = _float(row["tdp_W"])
    per_peer = _float(row["per_peer_GBps"])
    return DeviceSpec(
        name=row["name"],
        vendor=row["vendor"],
        memory_bytes=int(float(row["memory_GB"]) * 1e9),
        memory_type=row["memory_type"],
        memory_bandwidth_bytes_per_s=float(row["memory_BW_TBps"]) * 1e12,
        peak_flops=peaks,
        tdp_w=tdp,
        scaleup_fabric=row["scaleup_fabric"],
        scaleup_bandwidth_bytes_per_s=(_float(row["scaleup_uni_GBps"]) or 0.0) * 1e9,
        per_peer_bandwidth_bytes_per_s=per_peer * 1e9 if per_peer is not None else None,
        scaleup_domain=int(row["scaleup_domain"] or 1),
        status=row["status"],
        source=row["source"],
        aliases=tuple(_aliases(row["name"])),
    )


@functools.cache
def _catalog() -> tuple[tuple[DeviceSpec, ...], dict[str, DeviceSpec]]:
    text = resources.files("accelkit.hardware").joinpath("data/hardware.csv").read_text()
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("#")]
    specs = tuple(_row_to_spec(row) for row in csv.DictReader(io.StringIO("\n".join(lines))))
    index: dict[str, DeviceSpec] = {}
    for spec in specs:  # full names first, so no alias can shadow a real name
        index[_key(spec.name)] = spec
    for spec in specs:  # then aliases; on a clash the first row (e.g. A100-SXM4 over A100-PCIe) wins
        for alias in spec.aliases:
            index.setdefault(_key(alias), spec)
    return specs, index


def list_devices() -> tuple[DeviceSpec, ...]:
    """Every catalog device, in file order."""
    return _catalog()[0]


def get_device(name: str) -> DeviceSpec:
    """Look up by name or alias ('h200', 'H200-SXM', 'mi300x', 'tpu-v5p', 'a100'), case-insensitive."""
    specs, index = _catalog()
    spec = index.get(_key(name))
    if spec is None:
        names = [s.name for s in specs]
        raise UnknownNameError("hardware", name, names + [a for s in specs for a in s.aliases], listing=names)
    return spec


def match_device_name(reported: str) -> DeviceSpec | None:
    """Catalog entry for a name a driver reports ('NVIDIA H200', 'AMD Instinct MI300X'), or None.

    Picks the catalog name whose leading model token appears in the reported name, preferring the
    longest match and the memory size when the driver's name carries one.
    """
    reported_key = _key(reported)
    best: tuple[int, DeviceSpec] | None = None
    for spec in list_devices():
        for candidate in (spec.name, *spec.aliases):
            key = _key(candidate)
            if key and key in reported_key and (best is None or len(key) > best[0]):
                best = (len(key), spec)
    return best[1] if best else None
