"""benchmarks/structured_hostile.py against vLLM (``--server vllm``): the same hostile specs in the fields vLLM
reads (its ``guided_*`` fields are gone: sent as they are, a request would run unguided), a model shape its CPU
attention runs, and a missing vLLM venv refused in one line before anything starts."""

from __future__ import annotations

import subprocess
import sys

import pytest

from accelkit.serve.testing import hostile_request_fields
from tests.conftest import REPO

SCRIPT = REPO / "benchmarks" / "structured_hostile.py"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import structured_hostile
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return structured_hostile


def test_every_hostile_spec_goes_to_vllm_in_a_field_it_reads(bench):
    fields = hostile_request_fields()
    sent = [bench.as_vllm(f) for f in fields]
    assert all(len(s) == 1 and next(iter(s)) in ("structured_outputs", "response_format") for s in sent)
    for original, as_sent in zip(fields, sent, strict=True):
        (name, value), = original.items()
        if name.startswith("guided_"):
            assert as_sent == {"structured_outputs": {name.removeprefix("guided_"): value}}
        else:
            assert as_sent == original
    assert sum(name.startswith("guided_") for f in fields for name in f) >= 3  # (the translation is exercised)


def test_vllm_with_heads_of_16_is_refused(bench, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["structured_hostile.py", "--server", "vllm", "--head-dim", "16"])
    with pytest.raises(SystemExit) as exited:
        bench.main()
    assert exited.value.code == 2 and "heads of 16" in capsys.readouterr().err


def test_a_missing_vllm_python_is_one_error_line(tmp_path):
    out = tmp_path / "out.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--server", "vllm", "--vllm-python",
                           str(tmp_path / "none" / "python"), "--out", str(out)],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --vllm-python ") and proc.stderr.count("\n") == 1
    assert not out.exists()


def test_a_kinds_engine_steps_pool_their_rounds_sums(bench):
    """The share the engine thread ran is the kind's CPU time over its wall time (rounds weigh by their steps, not
    one each), the share it waited for a core its run-queue time over the wall time, for masks its mask-wait time,
    the rest a lock's; and a server
    without the series (vLLM) gives none."""
    rounds = [{"engine_steps": {"seconds": 0.010, "count": 10, "cpu_seconds": 0.009, "runqueue_seconds": 0.001,
                                "mask_wait_seconds": 0.0}},
              {"engine_steps": {"seconds": 0.090, "count": 30, "cpu_seconds": 0.030, "runqueue_seconds": 0.019,
                                "mask_wait_seconds": 0.011}}]
    steps = bench.step_summary(rounds)
    assert steps["steps"] == 40 and steps["mean_step_ms"] == pytest.approx(2.5)
    assert steps["engine_thread_ran_share"] == pytest.approx(0.39)
    assert steps["waited_for_a_core_share"] == pytest.approx(0.20)
    assert steps["waited_for_masks_share"] == pytest.approx(0.11)
    assert steps["waited_on_a_lock_share"] == pytest.approx(0.30)
    assert bench.step_summary([{"engine_steps": None}]) is None
