"""The breakdown/overlap arithmetic on synthetic traces with answers worked out by hand."""

import pytest

from accelkit.monitor.trace_analysis import Interval, analyze_trace, breakdown, intersect, merge, subtract


def test_span_helpers():
    assert merge([(5, 7), (0, 2), (1, 3), (7, 8)]) == [(0, 3), (5, 8)]
    assert intersect([(0, 10)], [(2, 3), (5, 12)]) == [(2, 3), (5, 10)]
    assert subtract([(0, 10)], [(2, 3), (5, 12)]) == [(0, 2), (3, 5)]
    assert subtract([(0, 2), (4, 6)], [(1, 5)]) == [(0, 1), (5, 6)]


def test_breakdown_known_answer():
    # span 0..100 µs: compute 0-40 and 60-80 (60 µs); communication 30-70 (40 µs, overlapping
    # compute on 30-40 and 60-70 = 20 µs); memcpy 85-90 (5 µs); idle 80-85 and 90-100 = 15 µs
    events = [
        Interval(0, 40, "compute"), Interval(10, 20, "compute"),  # nested: counted once
        Interval(60, 80, "compute"), Interval(30, 70, "communication"), Interval(85, 90, "memcpy"),
        Interval(99, 100, "compute"),
    ]
    b = breakdown(events)
    assert b["span_s"] == pytest.approx(100e-6)
    assert b["compute_s"] == pytest.approx(61e-6)
    assert b["communication_s"] == pytest.approx(40e-6)
    assert b["overlap_s"] == pytest.approx(20e-6)
    assert b["overlap_pct"] == pytest.approx(50.0)
    assert b["idle_s"] == pytest.approx(14e-6)
    ex = b["exclusive_fraction"]
    assert ex["compute"] == pytest.approx(0.61) and ex["communication"] == pytest.approx(0.20)
    assert ex["memcpy"] == pytest.approx(0.05) and ex["idle"] == pytest.approx(0.14)
    assert sum(ex.values()) == pytest.approx(1.0)


def test_no_communication_means_no_overlap_figure():
    assert breakdown([Interval(0, 10, "compute")])["overlap_pct"] is None


def test_analyze_device_timeline_ignores_cpu_ops():
    trace = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 1000},
        {"ph": "X", "cat": "kernel", "name": "sm90_xmma_gemm_bf16", "ts": 100, "dur": 50},
        {"ph": "X", "cat": "kernel", "name": "ncclDevKernel_AllReduce_Sum_bf16_RING_LL", "ts": 120, "dur": 60},
        {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 200, "dur": 10},
        {"ph": "i", "cat": "kernel", "name": "marker", "ts": 5},
    ]}
    b = analyze_trace(trace)
    assert b["timeline"] == "device"
    assert b["span_s"] == pytest.approx(110e-6)  # 100 → 210 on the device
    assert b["overlap_s"] == pytest.approx(30e-6) and b["overlap_pct"] == pytest.approx(50.0)
    assert b["memcpy_s"] == pytest.approx(10e-6)


def test_analyze_cpu_timeline_classifies_by_name():
    trace = {"traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 0, "dur": 10},
        {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "ts": 5, "dur": 10},
        {"ph": "X", "cat": "cpu_op", "name": "aten::copy_", "ts": 20, "dur": 5},
        {"ph": "X", "cat": "python_function", "name": "forward", "ts": 0, "dur": 30},
    ]}
    b = analyze_trace(trace)
    assert b["timeline"] == "cpu" and b["span_s"] == pytest.approx(25e-6)
    assert b["communication_s"] == pytest.approx(10e-6) and b["overlap_s"] == pytest.approx(5e-6)
    with pytest.raises(ValueError):
        analyze_trace({"traceEvents": []})
