"""`hw probe --min-time` (issue #33): how long each timed loop of the probe measures — a check of a probe in a
fraction of --quick's time; `tune --min-time` (its measurement loop's field) also bounds the quick probe a tune runs.
A bad value is one error line naming the flag, exit 2; a probe shorter than a full one's loops is stored as a quick
one (never ranked as a full peak)."""

import pytest

from accelkit.hardware.probe import FULL_MIN_TIME_S, ProbeConfig, _note, probe, quick_probe_min_time
from accelkit.hardware.probe_quality import matmul_quality, why_not_full
from accelkit.timing import LoopConfig
from tests.conftest import main_in_process


@pytest.mark.parametrize("command", [("hw", "probe", "--quick", "--device", "cpu", "--no-save"),
                                     ("tune", "bert", "--size", "tiny", "--no-save")])
@pytest.mark.parametrize(("value", "says"), [("-1", "--min-time '-1' is out of range; the least is 0"),
                                             ("abc", "--min-time 'abc' is not valid; give a number"),
                                             ("1e9", "--min-time '1e9' is out of range; the most is 86400")])
def test_a_bad_min_time_is_one_error_line(capsys, command, value, says):
    code, out, err = main_in_process(capsys, *command, "--min-time", value)
    assert code == 2 and out == "" and err.strip().splitlines() == [f"error: {says}"], err


def test_min_time_with_collectives_is_refused_not_ignored(capsys):
    code, out, err = main_in_process(capsys, "hw", "probe", "--collectives", "--min-time", "0.1")
    assert code == 2 and out == "" and err.strip().splitlines() == [
        "error: --min-time applies to the matmul and copy probe, not --collectives; use --quick for short collective "
        "loops, or drop --min-time"], err


def test_min_time_is_in_both_helps(capsys):
    for command in (("hw", "probe"), ("tune",)):
        code, out, _ = main_in_process(capsys, *command, "--help")
        assert code == 0 and "--min-time" in out


def test_the_probe_loop_measures_min_time_and_warms_up_no_longer():
    assert ProbeConfig(quick=True).loop == LoopConfig.quick()
    assert ProbeConfig().loop.min_time_s == FULL_MIN_TIME_S
    short = ProbeConfig(quick=True, min_time_s=0.05).loop
    assert (short.min_time_s, short.warmup_time_s) == (0.05, 0.05)
    assert short.min_iterations == LoopConfig.quick().min_iterations  # as many samples as --quick
    long = ProbeConfig(min_time_s=5.0).loop
    assert (long.min_time_s, long.warmup_time_s) == (5.0, LoopConfig(min_time_s=3.0, min_iterations=20).warmup_time_s)
    assert ProbeConfig(min_time_s=1.0).short and not ProbeConfig(min_time_s=FULL_MIN_TIME_S).short
    assert ProbeConfig(quick=True).short and not ProbeConfig().short


def test_a_short_probe_is_stored_as_a_quick_one():
    """Without --quick but with loops under a full probe's: named, noted and ranked as a --quick probe (measured at
    small sizes here, for speed; a default-size row of the same details reads as quick, not full)."""
    result = probe(ProbeConfig(device="cpu", dtypes=("fp32",), matmul_size=64, copy_bytes=1 << 20, min_time_s=0.01))
    d = result.details
    assert d["quick"] and result.name.endswith("(quick)")
    assert d["matmul"]["fp32"]["stats"]["n"] >= ProbeConfig().loop.min_iterations  # the full probe's iteration minimum
    at_default_size = {**d, "matmul": {"fp32": {**d["matmul"]["fp32"], "size": 2048}}}
    assert matmul_quality(at_default_size, "fp32") == "quick"
    assert why_not_full(at_default_size, "fp32").startswith("a --quick probe")
    assert not ProbeConfig(min_time_s=FULL_MIN_TIME_S).short  # a full probe's loop length is a full probe
    note = _note(False, 2048, 256 << 20, 2048, 256 << 20, min_time_s=0.01)
    assert note.startswith("a --min-time 0.01 probe (a full one measures 3 s a loop) counts as a --quick one")
    assert _note(False, 2048, 256 << 20, 2048, 256 << 20, min_time_s=5.0).startswith("no datasheet peak")


def test_a_probe_run_for_a_shorter_measurement_is_as_short():
    """bench/tune run a quick probe for MFU or the planner: no longer than their own loops when those are shorter."""
    assert quick_probe_min_time(0.2) == 0.2
    assert quick_probe_min_time(LoopConfig.quick().min_time_s) is None and quick_probe_min_time(10.0) is None
