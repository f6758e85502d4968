"""`profile`'s workload flags and choices: a flag the workload does not take is refused as `bench` refuses it, the
data loader is built as `bench` plans it, --step picks a step, and each default run keeps its own trace."""

import json
from pathlib import Path

import pytest

from accelkit.core import UserError
from accelkit.monitor.profile_workload import profile_workload
from accelkit.monitor.profiler import ProfileConfig, profile_step

FAST = {"wait": 0, "warmup": 1, "steps": 1}


@pytest.mark.parametrize(("name", "options", "message"), [
    ("resnet", {"size": "tiny", "seq_len": 4096},
     "--seq-len does not apply to `profile resnet`; it applies to `profile bert`, `profile llm-train`"),
    ("custom", {"module": "json:loads", "model": "llama-3.1-8b"}, "--model does not apply to `profile --module`; "
     "it applies to `profile bert`, `profile resnet`, `profile llm`, `profile llm-train`, `profile diffusion`"),
])
def test_a_flag_the_workload_does_not_take_is_refused(tmp_path, name, options, message):
    with pytest.raises(UserError) as caught:  # before anything is built: json:loads would fail if it were called
        profile_workload(name, options, ProfileConfig(**FAST, out_dir=str(tmp_path)), device="cpu")
    assert str(caught.value) == message


def test_the_data_loader_profiles_its_first_setting(tmp_path):
    """A bare Variant lacked the loader's settings: an internal error (KeyError: 'num_workers')."""
    summary, measurement = profile_workload("dataloader", {"batch_size": 2, "image_size": 8},
                                            ProfileConfig(**FAST, out_dir=str(tmp_path)), device="cpu")
    assert summary["step"] == "next batch" and summary["workload"].startswith("dataloader")
    assert summary["top_cpu_ops"] and measurement.kind == "profile"


def test_step_picks_the_llm_decode_step(tmp_path):
    options = {"model": "tiny-llama", "batch_size": 1, "prompt_len": 8, "output_len": 4}
    summary, measurement = profile_workload("llm", options, ProfileConfig(**FAST, out_dir=str(tmp_path)),
                                            device="cpu", step_name="decode")
    assert summary["step"] == "decode" and measurement.name.endswith(" decode")
    with pytest.raises(UserError, match=r"--step 'nope': llm tiny-llama b1 p8 o4 has no such step; its steps are "
                                        r"'prefill', 'decode'"):
        profile_workload("llm", options, ProfileConfig(**FAST, out_dir=str(tmp_path)), device="cpu", step_name="nope")


def test_default_runs_keep_their_own_trace_at_an_absolute_path(tmp_path, monkeypatch):
    """One shared accelkit-profile/trace.json: each run overwrote the trace that stored results named (relatively)."""
    monkeypatch.chdir(tmp_path)
    first, second = (profile_step(lambda: None, ProfileConfig(**FAST)) for _ in range(2))
    traces = [Path(s["trace"]) for s in (first, second)]
    assert all(t.is_absolute() and t.is_file() for t in traces)
    assert traces[0] != traces[1] and {t.parent.parent for t in traces} == {tmp_path / "accelkit-profile"}
    assert json.loads((traces[0].parent / "summary.json").read_text())["trace"] == str(traces[0])
    given = profile_step(lambda: None, ProfileConfig(**FAST, out_dir="prof"))  # a folder given is used as it is
    assert given["trace"] == str(tmp_path / "prof" / "trace.json")
