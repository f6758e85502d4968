"""Which stored `hw probe` figure is a device's peak: every probe records its size and quality, and a peak is the
best probe of the best quality stored — never simply the newest.

A matmul row's quality is

* ``full``  — a probe without --quick at the default side (2048² CPU, 8192² GPU; or cut from it because the dtype
  has no fast kernel, ``reduced_from``): the figure MFU, the report's roofline and `results list` stand on;
* ``quick`` — the same side, but --quick's short loop (a few calls: one slow call on a loaded machine halves it);
* ``small`` — a side below the default (``--size 512``): call overhead holds it under the peak.

The peak of a (device, dtype) is the highest figure among the ``full`` rows; only when there is none the highest
``quick`` one, and only then the largest ``small`` one — each saying which it is. A quicker or smaller probe stored
later never replaces a full one: a quick fp16 probe (a 512² matmul at 0.0011 TFLOP/s) once did, and the next fp16
bench read MFU 107%. The highest, not the newest, because a probe can only under-measure a peak (a busy machine,
a cold cache); a peak lower than the truth makes every MFU read high.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from accelkit.core import Estimate, Measurement


class StoredResult(Protocol):
    """What this module reads of a stored probe (``accelkit.results.StoredResult``, a layer above hardware's)."""

    @property
    def id(self) -> int: ...

    @property
    def result(self) -> Estimate | Measurement: ...


def default_sizes(device: str) -> tuple[int, int]:
    """(matmul side, copy bytes) of a probe not told otherwise, and the smallest a peak is taken from: a smaller
    matmul is bound by call overhead (on one CPU a 64×64 bf16 matmul reached 0.024 TFLOP/s, 2048×2048 0.68), a
    smaller copy can fit in a cache and measure it instead of memory (1 MiB: 159 GB/s; an H100's L2 is 50 MB)."""
    return (2048, 256 << 20) if device == "cpu" else (8192, 2 << 30)


def mib(num_bytes: int) -> str:
    """``num_bytes`` in MiB (2^20 bytes): "256 MiB"."""
    return f"{num_bytes / 2**20:g} MiB"


def _probe_device(details: dict[str, Any]) -> str | None:
    device = details.get("device")
    return None if not isinstance(device, str) else "cpu" if device == "cpu" else "cuda"


def small_matmul(details: dict[str, Any], dtype: str) -> str | None:
    """Why a stored probe's ``dtype`` matmul is no peak — 'a 64×64 matmul, below the 2048×2048 default …' — or
    None (at or above the default, cut from it because the dtype has no fast kernel — seconds a call, where call
    overhead does not count — or a row that does not say its size or device)."""
    row = (details.get("matmul") or {}).get(dtype) or {}
    size = row.get("size")
    device = _probe_device(details)
    if device is None or not isinstance(size, int) or row.get("reduced_from"):
        return None
    default = default_sizes(device)[0]
    return None if size >= default else (f"a {size}×{size} matmul, below the {default}×{default} default: call "
                                         "overhead holds it under the peak")


def small_copy(details: dict[str, Any]) -> str | None:
    """Why a stored probe's copy bandwidth is no memory bandwidth — 'a 1 MiB copy, below the 256 MiB default …' —
    or None (at or above the default, or a row that does not say its size or device)."""
    moved = (details.get("bandwidth") or {}).get("bytes_per_iteration")  # read + write: 2 × the buffer
    device = _probe_device(details)
    if device is None or not isinstance(moved, int):
        return None
    default = default_sizes(device)[1]
    return None if moved // 2 >= default else (f"a {mib(moved // 2)} copy, below the {mib(default)} default: it "
                                               "can fit in a cache and measure the cache, not memory")


def small_probe(details: dict[str, Any]) -> str | None:
    """Why a stored probe as a whole (its kernel figures too: on a CPU they are fractions of its own matmul and
    copy) is below the default sizes, or None."""
    reasons = [r for r in (*(small_matmul(details, dt) for dt in details.get("matmul") or {}), small_copy(details))
               if r]
    return "; ".join(dict.fromkeys(reasons)) or None


Quality = Literal["full", "quick", "small"]
#: better first: a peak is taken from the best quality stored
QUALITIES: tuple[Quality, ...] = ("full", "quick", "small")


def matmul_quality(details: dict[str, Any], dtype: str) -> Quality:
    """The quality of a probe's ``dtype`` matmul row (module docstring); a row without its size counts by --quick."""
    if small_matmul(details, dtype) is not None:
        return "small"
    return "quick" if details.get("quick") else "full"


def copy_quality(details: dict[str, Any]) -> Quality:
    """The quality of a probe's copy bandwidth: ``small`` below the default buffer (it can measure a cache)."""
    if small_copy(details) is not None:
        return "small"
    return "quick" if details.get("quick") else "full"


def probe_quality(details: dict[str, Any]) -> Quality:
    """A probe's quality as a whole: the worst of its rows (what `results list` says beside its headline)."""
    rows = [matmul_quality(details, dt) for dt in details.get("matmul") or {}]
    if isinstance(details.get("bandwidth"), dict):
        rows.append(copy_quality(details))
    return max(rows, key=QUALITIES.index, default="quick" if details.get("quick") else "full")


def why_not_full(details: dict[str, Any], dtype: str | None = None) -> str | None:
    """Why a probe (its ``dtype`` row, or its copy when ``dtype`` is None) is no full probe, or None when it is."""
    small = small_matmul(details, dtype) if dtype is not None else small_copy(details)
    if small is not None:
        return small
    if details.get("quick"):
        return "a --quick probe: a few calls, so one slow call on a busy machine lowers it"
    return None


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True, slots=True)
class ProbeFigure:
    """One figure of one stored probe: a dtype's matmul TFLOP/s, or the copy's GB/s (``dtype`` None)."""

    stored: StoredResult
    dtype: str | None
    value: float
    size: int | None  # the matmul side; the copy buffer's bytes
    quality: Quality
    why: str | None  # why it is not full (None when it is)
    #: how many probes of this hardware measured the figure, and how many of those were full
    num_probes: int = 1
    num_full: int = 0

    @property
    def id(self) -> int:
        return self.stored.id


def _best(figures: list[ProbeFigure]) -> ProbeFigure | None:
    if not figures:
        return None
    rank = min(QUALITIES.index(f.quality) for f in figures)
    tier = [f for f in figures if QUALITIES.index(f.quality) == rank]
    # small probes: the largest side first (the closest to the default), then the highest figure
    best = max(tier, key=lambda f: ((f.size or 0) if f.quality == "small" else 0, f.value))
    num_full = sum(f.quality == "full" for f in figures)
    return ProbeFigure(best.stored, best.dtype, best.value, best.size, best.quality, best.why,
                       num_probes=len(figures), num_full=num_full)


def best_matmul(probes: Sequence[StoredResult], dtype: str) -> ProbeFigure | None:
    """The peak of ``dtype`` among ``probes`` (one hardware's): the best of the best quality (module docstring)."""
    figures = []
    for s in probes:
        d = s.result.details
        row = (d.get("matmul") or {}).get(dtype) if isinstance(d.get("matmul"), dict) else None
        value = _number(row.get("tflops")) if isinstance(row, dict) else None
        if value is None:
            continue
        assert isinstance(row, dict)
        size = row.get("size") if isinstance(row.get("size"), int) else None
        figures.append(ProbeFigure(s, dtype, value, size, matmul_quality(d, dtype), why_not_full(d, dtype)))
    return _best(figures)


def best_copy(probes: Sequence[StoredResult]) -> ProbeFigure | None:
    """The memory bandwidth among ``probes``: the best copy of the best quality (a small one can measure a cache,
    so among small ones the largest buffer first)."""
    figures = []
    for s in probes:
        d = s.result.details
        bw = d.get("bandwidth")
        value = _number(bw.get("gbps")) if isinstance(bw, dict) else None
        if value is None:
            continue
        assert isinstance(bw, dict)
        moved = bw.get("bytes_per_iteration")
        figures.append(ProbeFigure(s, None, value, moved // 2 if isinstance(moved, int) else None,
                                   copy_quality(d), why_not_full(d)))
    return _best(figures)


def dtypes_of(probes: Sequence[StoredResult]) -> list[str]:
    """Every matmul dtype any of ``probes`` measured, in the order first seen."""
    found: dict[str, None] = {}
    for s in probes:
        matmul = s.result.details.get("matmul")
        if isinstance(matmul, dict):
            found.update(dict.fromkeys(str(k) for k in matmul))
    return list(found)
