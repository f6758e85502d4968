"""The profiled span is the profiled steps' (the ProfilerStep#N ranges), not the ops' extent: time in a step with no
op running is idle whatever --steps is (before, one step of a matmul then 200 ms of host work read 0% idle at
--steps 1 and 80% at 2), and a step that runs no op is all idle rather than an internal error."""

import time

import pytest
import torch

from accelkit.monitor.profiler import ProfileConfig, profile_step
from accelkit.monitor.trace_analysis import analyze_trace


def _event(name: str, cat: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "cat": cat, "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": 1}


def test_cpu_span_is_the_profiler_steps():
    trace = {"traceEvents": [
        _event("ProfilerStep#3", "user_annotation", 0, 1000),
        _event("aten::mm", "cpu_op", 10, 100),  # 100 µs of ops, then host work until the step ends
        _event("my_range", "user_annotation", 0, 5000),  # other annotations do not widen the span
    ]}
    b = analyze_trace(trace)
    assert b["span_s"] == pytest.approx(1000e-6)
    assert b["exclusive_fraction"]["idle"] == pytest.approx(0.9)


def test_device_span_is_the_steps_on_the_device_timeline():
    trace = {"traceEvents": [
        _event("ProfilerStep#1", "user_annotation", 0, 10_000),  # the CPU's range is not the device's
        _event("ProfilerStep#1", "gpu_user_annotation", 0, 500),
        _event("sm90_xmma_gemm_bf16", "kernel", 100, 100),
        _event("ProfilerStep#2", "gpu_user_annotation", 500, 500),
        _event("sm90_xmma_gemm_bf16", "kernel", 550, 50),
    ]}
    b = analyze_trace(trace)
    assert b["timeline"] == "device" and b["span_s"] == pytest.approx(1000e-6)
    assert b["exclusive_fraction"]["compute"] == pytest.approx(0.15)


def test_ops_outside_the_steps_are_not_counted():
    trace = {"traceEvents": [_event("ProfilerStep#1", "user_annotation", 100, 100),
                             _event("aten::mm", "cpu_op", 0, 150)]}  # half of it before the step
    ex = analyze_trace(trace)["exclusive_fraction"]
    assert ex["compute"] == pytest.approx(0.5) and ex["idle"] == pytest.approx(0.5)


def test_a_trace_without_steps_keeps_the_ops_extent():
    b = analyze_trace({"traceEvents": [_event("aten::mm", "cpu_op", 10, 100)]})
    assert b["span_s"] == pytest.approx(100e-6) and b["exclusive_fraction"]["idle"] == 0


def test_idle_does_not_depend_on_the_number_of_steps(tmp_path):
    layer, x = torch.nn.Linear(32, 32), torch.randn(4, 32)

    def step():
        layer(x)
        time.sleep(0.03)  # host work with no torch op, after the step's only ops

    idle = [profile_step(step, ProfileConfig(wait=0, warmup=1, steps=n, out_dir=str(tmp_path / str(n))))
            ["breakdown"]["exclusive_fraction"]["idle"] for n in (1, 2)]
    assert min(idle) > 0.5, idle  # ops take well under a millisecond of each 30 ms step


def test_a_step_without_ops_is_all_idle(tmp_path):
    summary = profile_step(lambda: None, ProfileConfig(wait=0, warmup=1, steps=1, out_dir=str(tmp_path)))
    b = summary["breakdown"]
    assert b["timeline"] == "cpu" and b["busy_s"] == 0 and b["exclusive_fraction"]["idle"] == 1.0
    assert b["span_s"] > 0
