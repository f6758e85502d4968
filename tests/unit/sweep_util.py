"""Sweep files written for a test and loaded as `accelkit sweep` loads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelkit.core import UserError
from accelkit.sweep.spec import SweepSpec, load_sweep


def load_text(tmp_path: Path, text: str) -> SweepSpec:
    """The sweep file holding ``text``, loaded."""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    return load_sweep(path)


def refusal(tmp_path: Path, text: str) -> str:
    """Why the sweep file holding ``text`` is refused as it loads: the one-line message, less the file's name that
    opens it."""
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_sweep(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ") and "\n" not in message
    return message.removeprefix(f"{path}: ")
