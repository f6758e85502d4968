"""An interrupted suite says what it left undone per workload — the workload of the unfinished variants and the
workloads it never ran. It said `not finished: fp32, bf16` (whose?) and nothing of the four workloads after them,
or `the rest of the suite` when the stop came while a model was being built; the JSON had no list of them."""

from __future__ import annotations

import pytest

from accelkit.bench.runner import BenchConfig, Reporter
from accelkit.bench.suite import quick, run_suite
from accelkit.cli import bench as cli_bench
from accelkit.timing import LoopConfig


class _StopWhenBuilding(Reporter):
    """Ctrl-C as the suite starts building ``key``'s model (what the user's Ctrl-C raises there)."""

    def __init__(self, key: str) -> None:
        self.key = key

    def note(self, text: str) -> None:
        if f": {self.key} — building" in text:
            raise KeyboardInterrupt


def test_interrupt_while_building_names_the_workloads_not_run(capsys: pytest.CaptureFixture[str]) -> None:
    result = run_suite("quick", BenchConfig(device="cpu", save=False), loop=LoopConfig(min_iterations=1),
                       reporter=_StopWhenBuilding("bert-tiny"))
    keys = [item.key for item in quick().items]
    assert result.interrupted and result.runs == [] and result.stopped_by == "SIGINT"
    assert result.not_run == keys
    data = result.to_json()
    assert data["not_run"] == keys and data["stopped_by"] == "SIGINT"
    with pytest.raises(SystemExit) as exit_info:
        cli_bench._exit_status(result, data, result.runs, [])
    assert exit_info.value.code == 130
    line = capsys.readouterr().err
    assert f"not finished: not run: {', '.join(keys)}" in " ".join(line.split())


class _StopAtVariant(Reporter):
    """Ctrl-C as the ``bf16`` variant is loaded (the two are interleaved: neither has finished); the runner records
    the run as interrupted."""

    def phase(self, lane: str, text: str) -> None:
        if lane.startswith("bf16"):
            raise KeyboardInterrupt


def test_interrupt_mid_workload_names_it_and_the_rest(capsys: pytest.CaptureFixture[str]) -> None:
    loop = LoopConfig(warmup_iterations=0, warmup_time_s=0, min_iterations=1, min_time_s=0, max_iterations=1)
    result = run_suite("quick", BenchConfig(device="cpu", save=False, predict=False, accuracy=False, auto_probe=False),
                       loop=loop, reporter=_StopAtVariant())
    keys = [item.key for item in quick().items]
    assert result.interrupted and result.keys == ["bert-tiny"]
    assert result.runs[0].interrupted and result.runs[0].unfinished == ["fp32", "bf16"]
    assert result.not_run == keys[1:] and result.to_json()["not_run"] == keys[1:]
    with pytest.raises(SystemExit):
        cli_bench._exit_status(result, result.to_json(), result.runs, [])
    line = " ".join(capsys.readouterr().err.split())
    assert f"not finished: bert-tiny (fp32, bf16); not run: {', '.join(keys[1:])}" in line
