"""`accelkit tune … --nproc-per-node N --collective-timeout S`, as `bench` and `hw probe --collectives` take it
(``DistConfig.collective_timeout_s``): it reaches the ranks' process group; bad values are one-line usage errors
before any launch, and the flag is refused without --nproc-per-node (one process: no launch to bound)."""

from __future__ import annotations

import json

import pytest

from tests.conftest import accelkit

TUNE = ("tune", "llm-train", "--model", "tiny-llama", "--batch-size", "2", "--seq-len", "16", "--device", "cpu",
        "--no-save")


def test_the_collective_timeout_reaches_the_ranks():
    """tune's launch had the fixed default (600 s) whatever the user needed; one trial keeps the launch short."""
    proc = accelkit(*TUNE, "--nproc-per-node", "2", "--max-trials", "1", "--collective-timeout", "45", "--progress",
                    "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[rank 0/2] process group: gloo, a collective waits at most 45 s for its peers" in proc.stderr
    trials = {t["name"]: t["status"] for t in json.loads(proc.stdout)["trials"]}
    assert trials["fp32"] == "measured"


@pytest.mark.parametrize("value", ["0", "-5", "0.5", "nan", "inf", "1e400", "604801", "abc", ""])
def test_bad_values_are_one_line_usage_errors(value):
    proc = accelkit(*TUNE, "--nproc-per-node", "2", "--collective-timeout", value)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"error: --collective-timeout {value!r} is "), line


def test_without_nproc_per_node_the_flag_is_refused():
    proc = accelkit(*TUNE, "--collective-timeout", "30")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("error: --collective-timeout applies to --nproc-per-node N (the torchrun launch that "
                                   "tunes gradient compression); add --nproc-per-node 2 or more, or drop it"), proc.stderr
