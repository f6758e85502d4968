"""The CPU timeline counts each instant of a thread for its innermost op: a nested op's time is its own, not its
outermost parent's (before, DDP on gloo read overlap 100% / communication 0%, and memcpy was always 0%)."""

import pytest
import torch
import torch.distributed as dist

from accelkit.monitor.profiler import ProfileConfig, profile_step
from accelkit.monitor.trace_analysis import analyze_trace


def _op(name: str, ts: float, dur: float, tid: int = 1) -> dict:
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "pid": 1, "tid": tid}


def test_a_collective_inside_accumulate_grad_is_communication_not_overlap():
    # DDP's shape on gloo: AccumulateGrad 0-100 µs calls the bucket's allreduce 40-70 µs on the same thread
    trace = {"traceEvents": [
        _op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", 0, 100),
        _op("c10d::allreduce_", 40, 30),
    ]}
    b = analyze_trace(trace)
    assert b["communication_s"] == pytest.approx(30e-6) and b["compute_s"] == pytest.approx(70e-6)
    assert b["overlap_s"] == 0 and b["overlap_pct"] == 0
    assert b["exclusive_fraction"]["communication"] == pytest.approx(0.3)


def test_a_copy_under_linear_is_a_memory_copy():
    # aten::linear 0-100 > aten::addmm 10-90 > aten::copy_ 20-60 (and an inner op of the copy, 30-40)
    trace = {"traceEvents": [
        _op("aten::linear", 0, 100), _op("aten::addmm", 10, 80), _op("aten::copy_", 20, 40),
        _op("aten::empty_strided", 30, 10),
    ]}
    b = analyze_trace(trace)
    assert b["memcpy_s"] == pytest.approx(30e-6)  # the copy less its inner op
    ex = b["exclusive_fraction"]
    assert ex["compute"] == pytest.approx(0.7) and ex["memcpy"] == pytest.approx(0.3) and ex["idle"] == 0


def test_only_ops_of_one_thread_nest():
    # the same two spans on two threads run at the same time: still an overlap
    trace = {"traceEvents": [_op("aten::mm", 0, 100, tid=1), _op("c10d::allreduce_", 40, 30, tid=2)]}
    b = analyze_trace(trace)
    assert b["overlap_s"] == pytest.approx(30e-6) and b["overlap_pct"] == pytest.approx(100.0)


def test_one_process_gloo_ddp_step(tmp_path):
    """A real DDP step: its allreduce runs under AccumulateGrad; it is communication and does not overlap compute
    on the one thread that runs both."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        torch.manual_seed(0)
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Sequential(torch.nn.Linear(64, 64),
                                                                              torch.nn.Linear(64, 64)))
        x = torch.randn(8, 64)

        def step():
            model(x).square().mean().backward()

        summary = profile_step(step, ProfileConfig(wait=0, warmup=1, steps=2, out_dir=str(tmp_path / "prof")))
    finally:
        dist.destroy_process_group()
    trace = (tmp_path / "prof" / "trace.json").read_text()
    assert "c10d::allreduce_" in trace and "AccumulateGrad" in trace
    b = summary["breakdown"]
    assert b["communication_s"] > 0 and b["exclusive_fraction"]["communication"] > 0
    assert b["overlap_pct"] == 0
