"""The operator tables of `accelkit profile`, built from real torch ``FunctionEvent`` objects shaped as kineto
reports them, so that the double entries of a CUDA run (the CPU op and its kernel) are torch's own."""

import pytest
from torch.autograd.profiler_util import EventList, FunctionEvent
from torch.profiler import DeviceType

from accelkit.monitor.profiler import _top_ops


def _cpu_op(id_: int, name: str, start_us: int, end_us: int, use_device: str | None = None) -> FunctionEvent:
    return FunctionEvent(id=id_, name=name, thread=0, start_us=start_us, end_us=end_us, use_device=use_device, stack=[])


def _device_event(id_: int, name: str, start_us: int, end_us: int, **kwargs) -> FunctionEvent:
    return FunctionEvent(id=id_, name=name, thread=7, start_us=start_us, end_us=end_us, device_type=DeviceType.CUDA,
                         use_device="cuda", stack=[], **kwargs)


def _averages(events: list[FunctionEvent], use_device: str | None) -> EventList:
    events_list = EventList(events, use_device=use_device)
    events_list._build_tree()
    return events_list.key_averages()


def _cuda_step_averages() -> EventList:
    """Two steps of aten::mm (a 100 µs GEMM kernel) and aten::add (a 20 µs kernel): 240 µs of device time.

    As kineto reports them, each CPU op carries its kernel's time as self device time AND each kernel is its own
    event (device type CUDA); the step's record_function range is mirrored on the device timeline too.
    """
    events: list[FunctionEvent] = []
    for step in range(2):
        t = step * 1000
        mm = _cpu_op(10 * step + 1, "aten::mm", t, t + 50, "cuda")
        mm.append_kernel("sm90_xmma_gemm_bf16", 0, 100)
        add = _cpu_op(10 * step + 2, "aten::add", t + 60, t + 70, "cuda")
        add.append_kernel("elementwise_add", 0, 20)
        events += [
            mm, add,
            _device_event(10 * step + 3, "sm90_xmma_gemm_bf16", t + 10, t + 110),
            _device_event(10 * step + 4, "elementwise_add", t + 120, t + 140),
            _device_event(10 * step + 5, "ProfilerStep#1", t, t + 150, is_user_annotation=True),
        ]
    return _averages(events, "cuda")


def test_device_table_counts_each_kernel_once():
    """Before, aten::mm and its kernel were both rows: shares about half their size and 0.24 ms/step listed for
    0.12 ms of device time."""
    averages = _cuda_step_averages()
    # torch itself puts the CPU op's kernel time under self device time: the double entry is real
    assert {e.key: e.self_device_time_total for e in averages}["aten::mm"] == 200

    rows = _top_ops(averages, "self_device_time_total", top=10, steps=2)
    assert [r["name"] for r in rows] == ["sm90_xmma_gemm_bf16", "elementwise_add"]
    assert [r["share"] for r in rows] == pytest.approx([100 / 120, 20 / 120])
    assert [r["self_ms_per_step"] for r in rows] == pytest.approx([0.100, 0.020])
    assert [r["calls_per_step"] for r in rows] == [1.0, 1.0]


def test_device_table_top_limits_rows_not_the_total():
    rows = _top_ops(_cuda_step_averages(), "self_device_time_total", top=1, steps=2)
    assert [(r["name"], r["share"]) for r in rows] == [("sm90_xmma_gemm_bf16", pytest.approx(100 / 120))]


def test_cpu_table_of_a_cuda_run_lists_cpu_ops_only():
    rows = _top_ops(_cuda_step_averages(), "self_cpu_time_total", top=10, steps=2)
    assert [r["name"] for r in rows] == ["aten::mm", "aten::add"]
    assert [r["share"] for r in rows] == pytest.approx([50 / 60, 10 / 60])


def test_cpu_only_run_self_times_and_no_device_rows():
    """aten::linear (100 µs) calls aten::addmm (70 µs): self CPU time 30 + 70, shares of 100 µs per step."""
    events = []
    for step in range(2):
        t = step * 1000
        events += [_cpu_op(10 * step + 1, "aten::linear", t, t + 100), _cpu_op(10 * step + 2, "aten::addmm", t + 10, t + 80)]
    averages = _averages(events, None)
    rows = _top_ops(averages, "self_cpu_time_total", top=10, steps=2)
    assert [(r["name"], r["self_ms_per_step"], r["share"]) for r in rows] == [
        ("aten::addmm", pytest.approx(0.070), pytest.approx(0.7)), ("aten::linear", pytest.approx(0.030), pytest.approx(0.3))]
    assert _top_ops(averages, "self_device_time_total", top=10, steps=2) == []
