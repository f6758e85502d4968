"""Where the time goes, from a Chrome/Perfetto trace (what ``torch.profiler`` exports) — pure Python.

Events are sorted into compute, communication and memory copies; each category's intervals are merged
(concurrent events count once). Over the profiled span — the ``ProfilerStep#N`` annotations the profiler's
schedule records, so time between the ops (host work, data waits) is idle; the ops' extent where a trace has
none:

- ``busy`` = |compute ∪ communication ∪ memcpy|, ``idle`` = span − busy;
- an exclusive split (compute first, then communication, then memcpy) whose shares plus idle sum to 1;
- overlap = |compute ∩ communication| and the overlap percentage = overlap / communication time, as
  Holistic Trace Analysis defines compute/communication overlap.

GPU traces are analysed on the device timeline (kernels, memcpy/memset: flat, one event per kernel); CPU-only
traces on the ``cpu_op`` timeline, where ops nest (``aten::linear`` > ``aten::addmm``; DDP's ``c10d::allreduce_``
inside ``AccumulateGrad``): each instant of a thread belongs to its innermost op (its self time), so an op's
category is not painted over the ops it calls.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

Category = Literal["compute", "communication", "memcpy"]
Span = tuple[float, float]

# Collectives by the names torch.distributed gives them, not by words such as "broadcast" that compute ops share
# (aten::broadcast_tensors, which F.mse_loss calls): CPU ops c10d::allreduce_, c10d::broadcast_,
# _c10d_functional::all_reduce, record_param_comms; backend ranges gloo:all_reduce, nccl:all_reduce; device
# kernels ncclDevKernel_AllReduce_Sum_bf16_RING_LL (RCCL's kernels are named nccl* too).
_COMM = re.compile(r"^(?:_?c10d(?:_functional)?::|(?:gloo|nccl|rccl|mpi|ucc):|record_param_comms$)|\b[nr]ccl", re.I)
_CPU_MEMCPY = {"aten::copy_", "aten::to", "aten::_to_copy", "aten::contiguous", "aten::clone", "aten::empty_like"}
_DEVICE_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
#: the schedule's step ranges (``prof.step()``): a user annotation on the CPU, mirrored on the device timeline
_PROFILER_STEP = re.compile(r"^ProfilerStep#\d+$")
_STEP_CATS = {"cpu": "user_annotation", "device": "gpu_user_annotation"}


@dataclass(frozen=True, slots=True)
class Interval:
    """One event on a timeline, in microseconds (Chrome trace units)."""

    start: float
    end: float
    category: Category


def merge(spans: Iterable[Span]) -> list[Span]:
    """Union of intervals as sorted, disjoint spans."""
    out: list[Span] = []
    for start, end in sorted(spans):
        if out and start <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], end))
        else:
            out.append((start, end))
    return out


def total(spans: Iterable[Span]) -> float:
    return sum(end - start for start, end in spans)


def intersect(a: list[Span], b: list[Span]) -> list[Span]:
    """Intersection of two merged span lists (two-pointer sweep)."""
    out, i, j = [], 0, 0
    while i < len(a) and j < len(b):
        start, end = max(a[i][0], b[j][0]), min(a[i][1], b[j][1])
        if start < end:
            out.append((start, end))
        if a[i][1] < b[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: list[Span], b: list[Span]) -> list[Span]:
    """a − b for merged span lists."""
    out: list[Span] = []
    j = 0
    for start, end in a:
        cur = start
        while j < len(b) and b[j][1] <= cur:
            j += 1
        k = j
        while k < len(b) and b[k][0] < end:
            if b[k][0] > cur:
                out.append((cur, b[k][0]))
            cur = max(cur, b[k][1])
            k += 1
        if cur < end:
            out.append((cur, end))
    return out


def breakdown(intervals: list[Interval], span: Span | None = None) -> dict[str, Any]:
    """Temporal breakdown of ``intervals`` over ``span`` (default: first start to last end), seconds.

    With a ``span``, intervals are clipped to it (what ran outside the profiled steps is not counted), and no
    intervals at all is a span that is all idle."""
    if not intervals and span is None:
        raise ValueError("no events to analyse")
    lo, hi = span or (min(i.start for i in intervals), max(i.end for i in intervals))
    by_cat = {c: merge((max(i.start, lo), min(i.end, hi)) for i in intervals if i.category == c and i.start < hi and i.end > lo)
              for c in ("compute", "communication", "memcpy")}
    length = hi - lo
    busy = merge(s for spans in by_cat.values() for s in spans)
    compute, comm, memcpy = by_cat["compute"], by_cat["communication"], by_cat["memcpy"]
    comm_only = subtract(comm, compute)
    memcpy_only = subtract(subtract(memcpy, compute), comm)
    overlap = total(intersect(compute, comm))
    us = 1e-6
    return {
        "span_s": length * us,
        "busy_s": total(busy) * us,
        "idle_s": (length - total(busy)) * us,
        "compute_s": total(compute) * us,
        "communication_s": total(comm) * us,
        "memcpy_s": total(memcpy) * us,
        "exclusive_fraction": {
            "compute": total(compute) / length if length else 0.0,
            "communication": total(comm_only) / length if length else 0.0,
            "memcpy": total(memcpy_only) / length if length else 0.0,
            "idle": (length - total(busy)) / length if length else 0.0,
        },
        "overlap_s": overlap * us,
        "overlap_pct": 100.0 * overlap / total(comm) if comm else None,
    }


def classify(event: dict[str, Any], timeline: str) -> Category | None:
    """Category of one trace event on the chosen timeline, or None to ignore it."""
    if event.get("ph") != "X" or "dur" not in event:
        return None
    name, cat = str(event.get("name", "")), event.get("cat")
    if timeline == "device":
        if cat not in _DEVICE_CATS:
            return None
        if cat in ("gpu_memcpy", "gpu_memset"):
            return "memcpy"
        return "communication" if _COMM.search(name) else "compute"
    if cat != "cpu_op":
        return None
    if _COMM.search(name):
        return "communication"
    return "memcpy" if name in _CPU_MEMCPY else "compute"


def self_intervals(events: Iterable[dict[str, Any]]) -> list[Interval]:
    """The CPU timeline's ops as self intervals: per thread, each op less the ops nested inside it.

    Ops on one thread nest (a stack); an op's children are the ops that start and end within it. Without this a
    nested op's time went to its outermost parent (found in review): DDP's ``c10d::allreduce_`` inside
    ``AccumulateGrad`` read as compute (overlap 100%, communication 0%), and ``aten::copy_`` under
    ``aten::linear`` never as a memory copy. Ops that only partly overlap on one thread are not nested: both
    keep their time."""
    threads: defaultdict[tuple[Any, Any], list[tuple[float, float, Category]]] = defaultdict(list)
    for e in events:
        category = classify(e, "cpu")
        if category is not None:
            start = float(e["ts"])
            threads[(e.get("pid"), e.get("tid"))].append((start, start + float(e["dur"]), category))
    out: list[Interval] = []
    for ops in threads.values():
        ops.sort(key=lambda op: (op[0], -op[1]))  # a parent before its children, also when they start together
        children: list[list[Span]] = [[] for _ in ops]
        running: list[int] = []  # ops not yet ended, outermost first
        for i, (start, end, _) in enumerate(ops):
            running = [j for j in running if ops[j][1] > start]
            parent = next((j for j in reversed(running) if ops[j][1] >= end), None)
            if parent is not None:
                children[parent].append((start, end))
            running.append(i)
        for (start, end, category), inner in zip(ops, children, strict=True):
            out.extend(Interval(a, b, category) for a, b in subtract([(start, end)], merge(inner)))
    return out


def profiled_span(events: list[dict[str, Any]], timeline: str) -> Span | None:
    """First start to last end of the ``ProfilerStep#N`` ranges on ``timeline``; None when the trace has none."""
    steps = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
             if e.get("ph") == "X" and "dur" in e and e.get("cat") == _STEP_CATS[timeline]
             and _PROFILER_STEP.match(str(e.get("name", "")))]
    return (min(s for s, _ in steps), max(e for _, e in steps)) if steps else None


def analyze_trace(trace: dict[str, Any]) -> dict[str, Any]:
    """Breakdown of a Chrome trace dict; picks the device timeline when the trace has device events.

    The span is the profiled steps' (``profiled_span``), else the ops' extent. A step that runs no op at all is
    all idle over its steps; a trace with neither ops nor steps is a ValueError."""
    events = trace.get("traceEvents", trace if isinstance(trace, list) else [])
    timeline = "device" if any(e.get("cat") in _DEVICE_CATS for e in events) else "cpu"
    if timeline == "cpu":
        intervals = self_intervals(events)
    else:
        intervals = []
        for e in events:
            category = classify(e, timeline)
            if category is not None:
                start = float(e["ts"])
                intervals.append(Interval(start, start + float(e["dur"]), category))
    span = profiled_span(events, timeline)
    if not intervals and span is None:
        raise ValueError("the trace has no operator or kernel events")
    return {"timeline": timeline, **breakdown(intervals, span)}
