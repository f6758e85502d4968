"""Writing a command's ``--out`` file (``accelkit report``, ``accelkit results export``) whole or not at all."""

from __future__ import annotations

import os
import tempfile
from contextlib import suppress
from pathlib import Path


def write_whole(path: str | Path, text: str) -> None:
    """Write ``text`` (UTF-8) to ``path``. A regular file is written whole or not at all: a temporary file beside it,
    renamed over it (a full disk left a 0-byte report behind), keeping the mode of the file it replaces (a new one:
    0666 less the umask). A symlink is followed: the file it points at is replaced, not the link (renaming over the
    link turned it into a regular file and left the published target stale), and the temporary name is short
    (``.accelkit-XXXXXXXX.tmp``: one made from the target's name failed for a valid 245-character name; both found
    in review). A device or pipe (/dev/stdout, a FIFO) is written in place. An OSError is the caller's to word."""
    real = Path(os.path.realpath(path))
    if real.exists() and not real.is_file():
        with open(real, "w", encoding="utf-8") as f:
            f.write(text)
        return
    mode = real.stat().st_mode & 0o7777 if real.exists() else 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(dir=real.parent, prefix=".accelkit-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            os.fchmod(f.fileno(), mode)
            f.write(text)
        os.replace(tmp, real)
    except BaseException:
        with suppress(OSError):
            os.unlink(tmp)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
