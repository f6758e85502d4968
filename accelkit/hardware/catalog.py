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
        # the driver's total where known (HBM comes in binary units), else the datasheet's decimal GB
        memory_bytes=int(mib) * 2**20 if (mib := row.get("memory_MiB")) else int(float(row["memory_GB"]) * 1e9),
        memory_datasheet_gb=float(row["memory_GB"]),
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
    """The specs in file order and the lookup index."""
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


#: memory figures a driver's name may carry other than the GPU's own: 'NVIDIA GH200 480GB' names the
#: superchip's LPDDR5X (its GPU has 96 GB of HBM3)
_REPORTED_GB: dict[str, frozenset[int]] = {"GH200-96GB": frozenset({96, 480})}
_FORM_FACTORS = ("sxm", "pcie", "nvl")


def _tokens(name: str) -> list[str]:
    """'NVIDIA A100-SXM4-40GB' → ['nvidia', 'a100', 'sxm4', '40gb']."""
    return re.findall(r"[a-z0-9]+", name.lower())


def _form_factor(tokens: list[str]) -> str | None:
    """sxm (SXM, SXM4, SXM5), pcie or nvl (a PCIe card bridged by NVLink, e.g. H100 NVL: 94 GB), if named."""
    for token in tokens:
        for form in _FORM_FACTORS:
            if token == form or (form == "sxm" and re.fullmatch(r"sxm\d*", token)):
                return form
    return None


def _agrees(spec: DeviceSpec, tokens: list[str]) -> bool:
    """Whether the memory size, memory type and form factor a reported name carries (when it does) are the entry's."""
    sizes = {int(m.group(1)) for t in tokens if (m := re.fullmatch(r"(\d+)gb?", t))}
    nominal_gb = round(spec.memory_datasheet_gb or spec.memory_bytes / 1e9)  # the figure names carry (80, 141 …)
    if sizes and not sizes <= _REPORTED_GB.get(spec.name, frozenset({nominal_gb})):
        return False
    kinds = {t for t in tokens if re.fullmatch(r"hbm\d*e?|gddr\d+x?", t)}
    if kinds and kinds != {spec.memory_type.lower()}:
        return False
    form = _form_factor(tokens)
    own = _form_factor(_tokens(spec.name))
    return form is None or own is None or form == own  # an entry without one comes in one form


#: words a driver's name carries beside the model that say nothing of the chip: the vendor, the brand, and 'VF' (an
#: SR-IOV virtual function of the whole GPU: Azure's ND MI300X v5 reports 'AMD Instinct MI300X VF')
_BRAND_WORDS = frozenset({"nvidia", "amd", "geforce", "tesla", "instinct", "vf"})
#: words a driver's name may carry that name another product besides the entry's: AMD's device table (amdgpu.ids,
#: 0x740C) names MI250 and MI250X boards alike 'AMD Instinct MI250X / MI250'. Kept on the MI250X entry, as before, so
#: an MI250 GCD (104 CUs, not 110) still takes the MI250X's peaks — ~6% high; the CU count torch reports would tell them
#: apart, which the callers do not pass yet
_DRIVER_EXTRAS: dict[str, frozenset[str]] = {"MI250X-GCD": frozenset({"mi250"})}


def _describes(token: str) -> bool:
    """Whether a token of a driver's name only describes the board (a memory size, a memory type, a form factor, the
    vendor or brand) — what :func:`_agrees` checks against the entry — rather than naming another chip (the '4090 D',
    a 'Laptop GPU', a MIG slice)."""
    return (token in _BRAND_WORDS or re.fullmatch(r"\d+gb?|hbm\d*e?|gddr\d+x?", token) is not None
            or _form_factor([token]) is not None)


def _runs(tokens: list[str], key: str, extras: frozenset[str]) -> bool:
    """Whether ``key`` is a run of whole tokens of ``tokens`` with every other token one that only describes the board
    (or one of the entry's ``extras``)."""
    for i in range(len(tokens)):
        for j in range(i + 1, len(tokens) + 1):
            if "".join(tokens[i:j]) == key and all(_describes(t) or t in extras for t in tokens[:i] + tokens[j:]):
                return True
    return False


def match_device_name(reported: str) -> DeviceSpec | None:
    """Catalog entry for a name a driver reports ('NVIDIA H200', 'NVIDIA A100 80GB PCIe', 'AMD Instinct MI300X'),
    or None.

    An entry matches when its name or an alias is a run of whole tokens of the reported name ('H200' is not in
    'GH200'), every other token only describes the board — the vendor or brand, a memory size or type, a form factor:
    'NVIDIA GeForce RTX 4090 D' (a cut-down chip), '… RTX 4090 Laptop GPU' (another chip) and '… MIG 1g.10gb' (a
    slice) match nothing rather than the RTX 4090's or the whole GPU's peaks — and the memory size, memory type
    (HBM3, HBM2e …) and form factor (SXM, PCIe, NVL) the reported name carries agree with it — 'NVIDIA
    A100-SXM4-40GB' and 'NVIDIA H100 NVL' match nothing rather than an 80 GB SXM entry. The longest matching name
    wins, then the earlier catalog row.
    """
    tokens = _tokens(reported)
    best: tuple[int, DeviceSpec] | None = None
    for spec in list_devices():
        extras = _DRIVER_EXTRAS.get(spec.name, frozenset())
        length = max((len(k) for k in map(_key, (spec.name, *spec.aliases)) if _runs(tokens, k, extras)), default=0)
        if length and (best is None or length > best[0]) and _agrees(spec, tokens):
            best = (length, spec)
    return best[1] if best else None
