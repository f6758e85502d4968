"""Known-harmless log lines that third-party imports print on every run, filtered at the source.

Only these exact messages go; every other warning from the same loggers still shows:

* torchao tries to load every prebuilt ``_C*.so`` it ships; ``_C_mxfp8`` (built for another Python) and
  ``_C_cutlass_90a`` (SM90 CUTLASS kernels) cannot load on a CPU build and say so with a warning each, though
  nothing accelkit uses needs them (a recipe that would is refused up front with its reason).
* torch ``_pytree`` warns when a library (torchao) still registers an ``Enum`` with ``register_constant()``,
  which torch now supports natively — a message for torchao's authors, not for our users.
"""

from __future__ import annotations

import logging
import re

#: logger name → messages (regexes, searched in the formatted message) that are dropped
KNOWN_HARMLESS: dict[str, tuple[re.Pattern[str], ...]] = {
    # the file is the path up to its first ".so" (torchao logs f"Failed to load {file}: {error}"); the path may hold
    # spaces ("/Users/Jane Doe/…": \S* let the line through there), never another ".so" before the file's own
    "torchao": (re.compile(r"^Failed to load (?:(?!\.so\b).)*[/\\]_C_(mxfp8|cutlass_90a)[^/\\]*\.so\b"),),
    "torch.utils._pytree": (
        re.compile(r"is an Enum subclass and is now natively supported by torch\.compile .*register_constant\(\) "
                   r"on Enum subclasses is deprecated", re.DOTALL),
    ),
}


class _DropKnownHarmless(logging.Filter):
    def __init__(self, patterns: tuple[re.Pattern[str], ...]):
        super().__init__()
        self.patterns = patterns

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a record that cannot format is not one of ours: let logging report it
            return True
        return not any(p.search(message) for p in self.patterns)


def install() -> None:
    """Attach the filters to the loggers (before the libraries create them; idempotent)."""
    for name, patterns in KNOWN_HARMLESS.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropKnownHarmless) for f in logger.filters):
            logger.addFilter(_DropKnownHarmless(patterns))
