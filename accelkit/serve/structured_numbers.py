"""Numbers between bounds as regular expressions, for structured outputs' JSON schemas: the integers in
``[lo, hi]`` digit by digit (:func:`integer_range`), and JSON numbers without an exponent whose value a reader
that rounds to doubles keeps within ``[lo, hi]`` (:func:`number_range`). Both exact; tested against Python's own
reading of every text tried.
"""

from __future__ import annotations

import math
from decimal import Decimal

MAX_BOUND_DIGITS = 18  # an integer's minimum/maximum: the digit-by-digit regex grows with the square of its digits


def _same_length_range(lo: str, hi: str) -> str:
    """Digit strings of one length between ``lo`` and ``hi`` (inclusive, ``lo <= hi``), digit by digit."""
    common = next((i for i, (a, b) in enumerate(zip(lo, hi, strict=True)) if a != b), len(lo))
    prefix, lo, hi = lo[:common], lo[common:], hi[common:]
    if not lo:
        return prefix
    rest = len(lo) - 1
    tail = f"[0-9]{{{rest}}}" if rest else ""
    if lo[1:] == "0" * rest and hi[1:] == "9" * rest:  # whole blocks: [lo0-hi0] then any digits
        return f"{prefix}[{lo[0]}-{hi[0]}]{tail}"
    parts = [lo[0] + _same_length_range(lo[1:], "9" * rest)]
    if int(hi[0]) - int(lo[0]) > 1:
        parts.append(f"[{int(lo[0]) + 1}-{int(hi[0]) - 1}]{tail}")
    parts.append(hi[0] + _same_length_range("0" * rest, hi[1:]))
    return f"{prefix}(?:{'|'.join(parts)})"


def _natural_range(lo: int, hi: int | None) -> list[str]:
    """Alternatives spelling the integers ``lo..hi`` (``lo >= 0``; ``hi`` None: no upper bound) without leading
    zeros."""
    parts = []
    if lo == 0:
        parts.append("0")
        lo = 1
    if hi is not None and hi < lo:
        return parts
    digits = len(str(lo))
    while hi is None or digits <= len(str(hi)):
        if hi is None and lo == 10 ** (digits - 1):  # every number of this many digits or more
            parts.append(f"[1-9][0-9]{{{digits - 1},}}")
            break
        top = hi if hi is not None and digits == len(str(hi)) else 10**digits - 1
        parts.append(_same_length_range(str(lo), str(top)))
        lo, digits = 10**digits, digits + 1
    return parts


def integer_range(lo: int | None, hi: int | None) -> str | None:
    """A regex of exactly the integers in ``lo..hi`` as JSON spells them (no ``-0``; None: unbounded), or None
    when there is none."""
    parts = []
    if lo is None or lo < 0:  # the negatives: "-" and a magnitude in max(1, -hi)..-lo
        magnitude_lo = 1 if hi is None or hi >= 0 else -hi
        if lo is None or magnitude_lo <= -lo:
            parts += [f"-(?:{p})" for p in _natural_range(magnitude_lo, None if lo is None else -lo)]
    if hi is None or hi >= 0:
        parts += _natural_range(max(lo or 0, 0), hi)
    return "(?:" + "|".join(parts) + ")" if parts else None


def _zeros(rest: str) -> int:
    return len(rest) - len(rest.lstrip("0"))


def _fraction_ge(rest: str) -> str:
    """Digits after a point (maybe none) whose value 0.d is at least 0.``rest`` (no trailing zeros). A run of
    zeros is one alternative, not one nested group per zero (5e-324 has 323: too deep for the regex parser)."""
    if not rest:
        return "[0-9]*"
    if zeros := _zeros(rest):
        return f"(?:0{{0,{zeros - 1}}}[1-9][0-9]*|0{{{zeros}}}{_fraction_ge(rest[zeros:])})"
    if rest[0] == "9":
        return f"9{_fraction_ge(rest[1:])}"
    return f"(?:[{int(rest[0]) + 1}-9][0-9]*|{rest[0]}{_fraction_ge(rest[1:])})"


def _fraction_le(rest: str) -> str:
    """Digits after a point (maybe none) whose value 0.d is at most 0.``rest`` (no trailing zeros)."""
    if not rest:
        return "0*"
    if zeros := _zeros(rest):
        return f"(?:0{{0,{zeros}}}|0{{{zeros}}}{_fraction_le(rest[zeros:])})"
    return f"(?:|[0-{int(rest[0]) - 1}][0-9]*|{rest[0]}{_fraction_le(rest[1:])})"


def _fraction(lo: str, hi: str | None) -> str:
    """A point and digits that follow an integer part, the fraction's value in 0.lo..0.hi (digit strings without
    trailing zeros; hi None: any fraction from 0.lo up)."""
    if hi is None:
        body = _fraction_ge(lo) if lo else "[0-9]+"
    elif lo == hi:
        body = f"{lo}0*" if lo else "0+"
    elif not lo:  # 0..hi: _fraction_le but at least one digit
        zeros = _zeros(hi)
        body = (f"(?:0{{1,{zeros}}}|0{{{zeros}}}{_fraction_le(hi[zeros:])})" if zeros else
                f"(?:[0-{int(hi[0]) - 1}][0-9]*|{hi[0]}{_fraction_le(hi[1:])})")
    else:  # lo < hi: a common start, then at the first digit where they differ: lo's and up / between / hi's and down
        width = max(len(lo), len(hi))
        i = next(k for k in range(width) if lo.ljust(width, "0")[k] != hi.ljust(width, "0")[k])
        lo_rest, hi_rest = lo[i:], hi[i:]
        parts = [f"{lo_rest[0]}{_fraction_ge(lo_rest[1:])}"] if lo_rest else []
        first = int(lo_rest[0]) + 1 if lo_rest else 0
        if first <= int(hi_rest[0]) - 1:
            parts.append(f"[{first}-{int(hi_rest[0]) - 1}][0-9]*")
        parts.append(f"{hi_rest[0]}{_fraction_le(hi_rest[1:])}")
        if lo_rest:
            body = f"{hi[:i]}(?:{'|'.join(parts)})"
        else:  # the common start is lo and zeros: d may stop anywhere among them (it is lo then)
            zeros = i - len(lo)
            body = f"{lo}(?:0{{0,{zeros}}}|0{{{zeros}}}(?:{'|'.join(parts)}))"
    return f"\\.{body}"


def _split(value: Decimal) -> tuple[int, str]:
    """A non-negative decimal's integer part and its fraction's digits (no trailing zeros)."""
    whole, _, fraction = format(abs(value), "f").partition(".")
    return int(whole), fraction.rstrip("0")


def _magnitudes(lo: Decimal, hi: Decimal | None) -> list[str]:
    """Alternatives spelling the decimals in lo..hi (``0 <= lo``, hi None: unbounded) with a point and no
    exponent."""
    whole_lo, fraction_lo = _split(lo)
    if hi is None:
        return [f"{whole_lo}{_fraction(fraction_lo, None)}",
                *(f"{p}\\.[0-9]+" for p in _natural_range(whole_lo + 1, None))]
    whole_hi, fraction_hi = _split(hi)
    if whole_lo == whole_hi:
        return [f"{whole_lo}{_fraction(fraction_lo, fraction_hi)}"]
    return [f"{whole_lo}{_fraction(fraction_lo, None)}",
            *(f"{p}\\.[0-9]+" for p in _natural_range(whole_lo + 1, whole_hi - 1)),
            f"{whole_hi}{_fraction('', fraction_hi)}"]


def number_range(lo: float | None, hi: float | None) -> str | None:
    """A regex of the numbers in ``lo..hi`` (None: unbounded) written without an exponent, or None when there
    is none. A JSON reader takes a number with a point as a double (rounded to nearest, which is monotonic: text
    at least ``repr(lo)`` reads as at least ``lo``) and one without as an exact integer (between the integers
    around lo and hi): both readings stay within the bounds. A negative zero may come out when 0 is inside."""
    if lo is not None and hi is not None and lo > hi:
        return None
    parts = [integer_range(None if lo is None else math.ceil(lo), None if hi is None else math.floor(hi)) or ""]
    low = None if lo is None else Decimal(repr(lo))
    high = None if hi is None else Decimal(repr(hi))
    zero = Decimal(0)
    if low is None or low < 0:  # "-" and a magnitude in max(-high, 0)..-low
        parts += [f"-{m}" for m in _magnitudes(max(-high, zero) if high is not None else zero,
                                               None if low is None else -low)]
    if high is None or high >= 0:
        parts += _magnitudes(max(low, zero) if low is not None else zero, high)
    return "(?:" + "|".join(p for p in parts if p) + ")"
