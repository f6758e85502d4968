"""Published efficiency priors: the fraction of a datasheet peak that real kernels reach.

Every figure carries its source (summarised in docs/methodology.md, "Published figures"); a plan lists the ones it used in
``assumptions``. ``calibrate.py`` replaces them with this machine's measurements when a probe exists.
"""

from __future__ import annotations

from dataclasses import dataclass

from accelkit.core import DeviceSpec

#: best achieved / dense peak for pure matmuls (stas00/ml-engineering, MAMF tables)
MAMF_SOURCE = "stas00/ml-engineering MAMF tables (best pure-matmul achieved / dense peak)"
_MAMF: dict[str, dict[str, float]] = {
    "A100": {"bf16": 0.87, "fp16": 0.87},
    "H100": {"bf16": 0.80, "fp16": 0.80, "fp8": 0.71},
    "H200": {"bf16": 0.80, "fp16": 0.80, "fp8": 0.73},
    "B200": {"bf16": 0.78, "fp16": 0.78, "fp8": 0.76},
    "MI325X": {"bf16": 0.60, "fp16": 0.60},
    "MI300X": {"bf16": 0.51, "fp16": 0.51},
}
#: no published figure for the device/dtype: an assumption, said so in the plan
DEFAULT_COMPUTE = 0.75

#: decode achieved / ideal (weights ÷ HBM bandwidth): FasterTransformer 13B on A100, 16.7 ms ideal vs 22.0
MEMORY = 16.7 / 22.0
MEMORY_SOURCE = "kipply's inference arithmetic via llm-analysis: FT 13B A100 decode 16.7 ms ideal / 22.0 ms measured"

#: collective bus bandwidth / one-direction link bandwidth
COMM = {"nvidia": 0.80, "amd": 312.9 / 448.0}
COMM_SOURCE = {
    "nvidia": "stas00/ml-engineering network chapter: NCCL ring all-reduce bus bw ≈ 0.78-0.82 of the link",
    "amd": "hardware.csv MI300X note: 8-GPU RCCL all-reduce 312.9 GB/s of 448 GB/s xGMI",
}
DEFAULT_COMM = 0.80

#: per-collective start-up latency (decode-size messages are latency-bound)
COLLECTIVE_LATENCY_S = 10e-6


@dataclass(frozen=True, slots=True)
class Efficiency:
    """Achieved fractions of the peaks, with where each came from."""

    compute: float
    memory: float
    comm: float
    sources: tuple[str, ...]
    calibrated: bool = False


def _family(device: DeviceSpec) -> str | None:
    for key in sorted(_MAMF, key=len, reverse=True):
        if device.name.upper().startswith(key):
            return key
    return None


def prior_efficiency(device: DeviceSpec, dtype: str) -> Efficiency:
    """Published priors for ``device`` computing in ``dtype`` (matmul dtype: bf16, fp8 …)."""
    family = _family(device)
    table = _MAMF.get(family or "", {})
    if dtype in table:
        compute = table[dtype]
        csrc = f"compute efficiency {compute:.2f} of dense {dtype} peak ({family}): {MAMF_SOURCE}"
    else:
        compute = DEFAULT_COMPUTE
        csrc = (f"compute efficiency {compute:.2f} of dense {dtype} peak: ASSUMED — no published MAMF figure "
                f"for {device.name} {dtype}")
    comm = COMM.get(device.vendor, DEFAULT_COMM)
    comm_src = COMM_SOURCE.get(device.vendor, "ASSUMED 0.80 (no published collective efficiency for this vendor)")
    return Efficiency(
        compute=compute,
        memory=MEMORY,
        comm=comm,
        sources=(
            csrc,
            f"memory efficiency {MEMORY:.2f} of HBM bandwidth: {MEMORY_SOURCE}",
            f"communication efficiency {comm:.2f} of link bandwidth: {comm_src}",
        ),
    )
