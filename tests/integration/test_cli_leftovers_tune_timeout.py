"""`accelkit tune … --nproc-per-node N --collective-timeout S`, as `bench` and `hw probe --collectives` take it
(``DistConfig.collective_timeout_s``): bad values are one-line usage errors before any launch, and the flag is refused
without --nproc-per-node (one process: no launch to bound). That it reaches the ranks' process group is read from a
tune run test_tune_compression makes anyway (test_the_collective_timeout_reaches_the_ranks there). And tune's loop
flags (`--min-time` …, as bench's) are checked as bench checks them."""

from __future__ import annotations

import pytest

from tests.conftest import accelkit

TUNE = ("tune", "llm-train", "--model", "tiny-llama", "--batch-size", "2", "--seq-len", "16", "--device", "cpu",
        "--no-save")


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


@pytest.mark.parametrize(("flag", "value", "why"), [("--min-time", "-1", "out of range; the least is 0"),
                                                    ("--warmup-time", "abc", "not valid; give a number"),
                                                    ("--min-iterations", "0", "out of range; the least is 1"),
                                                    ("--warmup", "1.5", "not valid; give a whole number")])
def test_loop_flags_are_one_line_usage_errors(flag, value, why):
    proc = accelkit(*TUNE, flag, value)
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-2000:]
    assert proc.stderr.strip() == f"error: {flag} {value!r} is {why}", proc.stderr
