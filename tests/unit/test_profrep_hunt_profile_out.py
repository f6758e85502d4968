"""`accelkit profile --out DIR` where the trace or the summary cannot be written there: torch writes the trace to
``trace.json.tmp`` and renames it, saying nothing on failure, so the summary's read of the trace was an internal
error (IsADirectoryError, exit 1, after the whole run) and left ``trace.json.tmp`` behind; a ``summary.json`` it could
not write was an internal error too. Now each is one line naming the path and --out (a UserError: exit 2)."""

from __future__ import annotations

import pytest
import torch

from accelkit.core import UserError
from accelkit.monitor.profiler import ProfileConfig, profile_step


def _step() -> None:
    torch.ones(4) + 1


def _config(tmp_path) -> ProfileConfig:
    return ProfileConfig(out_dir=str(tmp_path), wait=0, warmup=1, steps=1)


def test_a_trace_it_cannot_write_is_one_line_and_leaves_nothing(tmp_path):
    (tmp_path / "trace.json" / "kept").mkdir(parents=True)  # a folder torch's rename cannot replace
    with pytest.raises(UserError, match=r"could not write its trace to .*trace\.json \(it is a folder\).*--out"):
        profile_step(_step, _config(tmp_path))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trace.json"]  # no trace.json.tmp left behind


def test_a_summary_it_cannot_write_is_one_line(tmp_path):
    (tmp_path / "summary.json").mkdir()
    with pytest.raises(UserError, match=r"cannot write .*summary\.json .*--out"):
        profile_step(_step, _config(tmp_path))
