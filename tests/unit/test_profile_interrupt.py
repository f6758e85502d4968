"""Ctrl-C (or SIGTERM, turned into it) while `accelkit profile` runs: the partial trace the profiler writes on its way
out is named, or the run's own empty folder removed — the command said only "interrupted" and left a trace of tens
of MB nobody was told of, or an empty folder (found in review) — and it exits 130 (143 for SIGTERM)."""

import json
import sys

import pytest
import torch

from accelkit.monitor.profiler import ProfileConfig, ProfileInterrupted, profile_step
from tests.conftest import main_in_process


def _stops_at(call: int):
    """A step that raises KeyboardInterrupt (as Ctrl-C does) on its ``call``-th call."""
    calls = [0]
    x = torch.randn(32, 32)

    def step() -> None:
        calls[0] += 1
        if calls[0] == call:
            raise KeyboardInterrupt
        x @ x

    return step


def test_an_interrupt_while_recording_names_the_partial_trace(tmp_path):
    config = ProfileConfig(wait=0, warmup=1, steps=50, out_dir=str(tmp_path / "out"))
    with pytest.raises(ProfileInterrupted) as stopped:
        profile_step(_stops_at(6), config)
    assert stopped.value.trace == (tmp_path / "out" / "trace.json").resolve()
    events = json.loads(stopped.value.trace.read_text())["traceEvents"]
    assert sum(e.get("name", "").startswith("ProfilerStep#") for e in events) >= 4  # the steps recorded so far
    assert not (tmp_path / "out" / "summary.json").exists()


def test_an_interrupt_before_recording_leaves_no_empty_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --out: a folder of this run's own under ./accelkit-profile
    with pytest.raises(ProfileInterrupted) as stopped:
        profile_step(_stops_at(1), ProfileConfig(wait=1, warmup=1, steps=3))
    assert stopped.value.trace is None
    assert not any((tmp_path / "accelkit-profile").iterdir())


def test_the_command_says_where_the_partial_trace_is_and_exits_130(capsys, tmp_path, monkeypatch):
    (tmp_path / "stopping.py").write_text(
        "import torch\n"
        "class Stops(torch.nn.Linear):\n"
        "    calls = 0\n"
        "    def forward(self, x):\n"
        "        Stops.calls += 1\n"
        "        if Stops.calls == 6:\n"
        "            raise KeyboardInterrupt\n"
        "        return super().forward(x)\n"
        "def factory():\n"
        "    return Stops(8, 8), (torch.randn(2, 8),)\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "stopping", raising=False)
    code, _, err = main_in_process(capsys, "profile", "--module", "stopping:factory", "--wait", "0", "--warmup", "1",
                                   "--steps", "50", "--out", str(tmp_path / "prof"), "--no-save")
    assert code == 130, err
    line = err.strip().splitlines()[-1]
    assert line.startswith("interrupted: not profiled to the end; the partial trace of the steps recorded so far "
                           f"is at {(tmp_path / 'prof' / 'trace.json').resolve()}"), err
