"""Exceptions that the CLI and the HTTP API turn into one clear message."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def closest(name: str, known: Iterable[str]) -> str | None:
    """The one of ``known`` closest to ``name`` (a typo's fix, difflib's usual cutoff), or None when none is close."""
    near = difflib.get_close_matches(name, list(known), n=1)
    return near[0] if near else None


class AccelkitError(Exception):
    """A failure to report to a person without a traceback (runtime failure: CLI exit 1)."""


class UserError(AccelkitError, ValueError):
    """The user asked for something invalid (CLI exit 2). The message names the value and the fix."""


class UnknownNameError(UserError, KeyError):
    """A name not in a catalog; the message suggests the closest known names."""

    def __init__(self, what: str, name: str, known: Iterable[str], listing: Iterable[str] | None = None,
                 more: str | None = None):
        """``more``: what else the user may give instead (e.g. a path), appended to the suggestion."""
        known = sorted(set(known))
        shown = list(listing) if listing is not None else known
        close = difflib.get_close_matches(name.lower(), [k.lower() for k in known], n=3, cutoff=0.4)
        by_lower = {k.lower(): k for k in known}
        hint = (
            f"did you mean {', '.join(by_lower[c] for c in close)}?"
            if close
            else f"known: {', '.join(shown[:20])}{' …' if len(shown) > 20 else ''}"
        )
        super().__init__(f"unknown {what} {name!r}; {hint}" + (f" — {more}" if more else ""))
        self.name = name

    def __str__(self) -> str:  # KeyError would otherwise quote the message
        return str(self.args[0])
