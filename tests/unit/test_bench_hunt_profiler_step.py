"""`accelkit profile`'s operator table ranks operators: the profiler's own ``ProfilerStep#N`` range (an annotation
spanning the whole step; its self time is the Python between ops) was a row of it, with a share of the total — on a
GPU run, whose CPU ops only launch kernels, it topped the CPU table. It is now left out of the rows and the shares,
and reported apart (``profiler_step`` in the summary)."""

import pytest
from torch.autograd.profiler_util import EventList, FunctionEvent

from accelkit.monitor.profiler import _profiler_step, _top_ops


def _averages() -> EventList:
    """Two steps: each a 500 µs ProfilerStep range holding a 100 µs aten::mm and a 20 µs aten::add (380 µs of the
    step is outside any op: the range's self time)."""
    events = []
    for step in range(2):
        t = step * 1000
        events += [FunctionEvent(id=10 * step + 1, name=f"ProfilerStep#{step}", thread=0, start_us=t, end_us=t + 500,
                                 stack=[]),
                   FunctionEvent(id=10 * step + 2, name="aten::mm", thread=0, start_us=t + 10, end_us=t + 110,
                                 stack=[]),
                   FunctionEvent(id=10 * step + 3, name="aten::add", thread=0, start_us=t + 200, end_us=t + 220,
                                 stack=[])]
    events_list = EventList(events)
    events_list._build_tree()
    return events_list.key_averages()


def test_profiler_step_is_not_ranked_with_the_operators() -> None:
    rows = _top_ops(_averages(), "self_cpu_time_total", top=10, steps=2)
    assert [r["name"] for r in rows] == ["aten::mm", "aten::add"]
    assert [r["share"] for r in rows] == pytest.approx([100 / 120, 20 / 120])


def test_profiler_step_is_reported_apart() -> None:
    apart = _profiler_step(_averages(), steps=2)
    assert apart is not None and apart["name"] == "ProfilerStep*"
    assert apart["self_cpu_ms_per_step"] == pytest.approx(0.380)
    assert apart["cpu_ms_per_step"] == pytest.approx(0.500)
