"""Units and formatting. Decimal (GB = 10^9 bytes, as datasheets use) and binary (GiB = 2^30) are both
spelled out; nothing here guesses which one a bare number meant."""

from __future__ import annotations

import math
import re

KB, MB, GB, TB = 10**3, 10**6, 10**9, 10**12
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": KB, "mb": MB, "gb": GB, "tb": TB,
    "kib": KiB, "mib": MiB, "gib": GiB, "tib": TiB,
    "k": KiB, "m": MiB, "g": GiB, "t": TiB,
}
_SIZE_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*$")


def parse_size(text: str | int, *, field: str = "size") -> int:
    """'80GB' → 80·10^9, '16GiB' or '16G' → 16·2^30, '1024' → 1024 bytes.

    Single letters (K/M/G/T) are binary, as in `ulimit` and PyTorch's allocator settings.
    """
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"{field}={text} is negative; give a size such as 16GiB or 80GB")
        return text
    match = _SIZE_RE.match(str(text))
    unit = match.group(2).lower() if match else None
    if not match or unit not in _SIZE_UNITS:
        raise ValueError(f"{field}={text!r} is not a size; write e.g. 512MiB, 16GiB or 80GB")
    size = float(match.group(1)) * _SIZE_UNITS[unit]
    if not math.isfinite(size):  # 400 digits read as inf: int() raised OverflowError (an internal error, exit 1)
        raise ValueError(f"{field}={text!r} is past any size (more than 1.8e308 bytes); write e.g. 512MiB, 16GiB "
                         "or 80GB")
    return int(size)


def fmt_bytes(num_bytes: float | None, *, binary: bool = True) -> str:
    """Human size: GiB by default (what allocators report), GB with ``binary=False`` (datasheets)."""
    if num_bytes is None:
        return "-"
    units = ("B", "KiB", "MiB", "GiB", "TiB") if binary else ("B", "KB", "MB", "GB", "TB")
    base = 1024.0 if binary else 1000.0
    value = float(num_bytes)
    for unit in units:
        if abs(value) < base or unit == units[-1]:
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.2f} {unit}"
        value /= base
    raise AssertionError("unreachable")


def fmt_count(n: float | None) -> str:
    """1.2e9 → '1.20 B' (billions), for parameter and token counts."""
    if n is None:
        return "-"
    for suffix, scale in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f} {suffix}"
    return f"{n:.0f}"


def fmt_ratio(ratio: float) -> str:
    """A ratio such as measured ÷ predicted: 2 decimals, or 2 significant figures below 0.1 — a tiny model on a CPU
    runs at 0.00029 of the planner's figure, and '0.00' read as 'measured nothing' (found in review)."""
    return f"{ratio:.2f}" if ratio >= 0.1 else f"{ratio:.2g}"


def and_list(items: list[str]) -> str:
    """``['a', 'b', 'c']`` as ``'a, b and c'`` (one item as itself)."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]
