"""`accelkit report`: one self-contained HTML file built from the results store.

Sections (each only when it has data): the runs table (with filters), what won each run (the verdicts),
precision/optimization comparison bars with their spread, latency distributions from the raw samples, text-to-image
images/s per variant and each generation call's phases, MFU
against the datasheet peak and against the measured `hw probe` peak, predicted vs measured in each workload's own
unit, the measured roofline from `hw probe`, and the serving latency-throughput curves and TTFT/TPOT distributions
from `loadtest`. Every chart has titled axes with units. plotly.js is inlined, so the file opens with no network.
No torch import: this reads the store (bench rows typed, as :class:`BenchResult`) and draws.
"""

from __future__ import annotations

import json
import math
import os
import stat
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelkit.core import UserError
from accelkit.core.bench_result import BenchResult, Comparison, comparison_against, verdicts
from accelkit.core.units import fmt_bytes, fmt_ratio
from accelkit.hardware.probe_quality import best_copy, best_matmul, dtypes_of
from accelkit.loadtest import plot_data
from accelkit.report.images import images_traces, phase_traces
from accelkit.report.tables import has_nonfinite_output, median_text, mfu_text, throughput_text
from accelkit.report.template import TEMPLATE
from accelkit.results import ResultStore, StoredResult
from accelkit.results.out_file import write_whole

#: at most this many benchmark rows are drawn (newest first); the table lists them all
MAX_PLOTTED = 60
#: the newest this many benchmark rows make the table (`accelkit report --limit`); the header says when there are more
DEFAULT_LIMIT = 500
#: pixels per category row of a horizontal chart (labels stay horizontal and readable, never rotated)
ROW_PX = 26


@dataclass(frozen=True, slots=True)
class BenchRow:
    """A stored bench measurement read back typed."""

    id: int
    run_id: str | None
    label: str
    hardware: str
    created_at: str
    result: BenchResult
    samples: dict[str, list[float]]

    @property
    def key(self) -> str:
        return f"{self.label} · {self.result.step}"

    @property
    def short(self) -> str:
        """A category label: '#12 bf16 · bert tiny-bert b8 s384 · forward'."""
        return f"#{self.id} {self.result.name} · {self.key}"


def bench_rows(store: ResultStore, run_id: str | None, limit: int) -> list[BenchRow]:
    rows = []
    for s in store.query(kind="bench", run_id=run_id, limit=limit):
        m = s.result
        rows.append(BenchRow(id=s.id, run_id=s.run_id, label=str(m.details.get("label", m.name)),
                             hardware=m.hardware or "", created_at=m.created_at,
                             result=BenchResult.from_measurement(m),  # type: ignore[arg-type]
                             samples=getattr(m, "samples", {})))
    return rows


# ---- figures ---------------------------------------------------------------------------------------------
def _axis(title: str, **extra: Any) -> dict[str, Any]:
    """A plotly axis with its title (plotly wants {"text": …}; a bare string is ignored) and room for its ticks."""
    return {"title": {"text": title}, "automargin": True, **extra}


def _fig(data: list[dict[str, Any]], layout: dict[str, Any], *, rows: int = 0) -> dict[str, Any]:
    height = max(380, 140 + ROW_PX * rows) if rows else 420
    # the legend sits above the plot area, so it never covers the x-axis title below it
    base = {"margin": {"l": 20, "r": 20, "t": 40, "b": 20}, "height": height, "template": None,
            "font": {"family": "system-ui, sans-serif", "size": 12}, "showlegend": True,
            "legend": {"orientation": "h", "x": 0, "y": 1.02, "xanchor": "left", "yanchor": "bottom"}}
    base.update(layout)
    return {"data": data, "layout": base}


def _run_groups(rows: list[BenchRow], by: str) -> dict[tuple[str | None, str], list[BenchRow]]:
    """Rows by run id and ``by`` ('label' or 'key'), oldest first (query is newest first): variants in run order."""
    groups: dict[tuple[str | None, str], list[BenchRow]] = {}
    for r in reversed(rows):
        groups.setdefault((r.run_id, getattr(r, by)), []).append(r)
    return groups


def comparison_figure(rows: list[BenchRow]) -> dict[str, Any] | None:
    """Throughput ÷ the first variant, per run and workload · step. Variants compared in one bench form a trace with
    their p25–p75 bars. Rows of separate benches that share a run id (a sweep's points: each its own bench, stored
    as its own baseline, ratio 1.0) were never compared: they form a hatched trace of their throughputs' ratio,
    without a spread. Each trace is named by its run id and hardware (the same workload recurs across runs)."""
    data = []
    for (run_id, key), items in _run_groups(rows, "key").items():
        paired, separate = _pair_with_base(items)
        base = items[0]
        where = f"{key} · run {run_id or '-'} · {base.hardware}"
        if len(paired) >= 2:
            data.append(_paired_trace(paired, base, where))
        if separate:
            reference = [] if len(paired) >= 2 else [(base, 1.0)]
            shown = reference + separate
            data.append({
                "type": "bar", "orientation": "h", "name": f"{where} — separate benches: throughput ratio, no spread",
                "y": [r.result.name for r, _ in shown], "x": [x for _, x in shown],
                "text": [_hover(r) for r, _ in shown], "textposition": "none", "marker": {"pattern": {"shape": "/"}},
                "hovertemplate": "%{text}: %{x:.2f}× " + base.result.name + " by throughput (separate benches, not "
                                 "interleaved: no spread)<extra>%{fullData.name}</extra>",
            })
    if not data:
        return None
    categories = sum(len(d["y"]) for d in data)
    return _fig(data, {"barmode": "group",
                       "xaxis": _axis("throughput ÷ first variant of the run (×; bars p25–p75)"),
                       "yaxis": _axis("variant", autorange="reversed"),
                       "shapes": [{"type": "line", "yref": "paper", "y0": 0, "y1": 1, "x0": 1, "x1": 1,
                                   "line": {"dash": "dot", "color": "#888"}}]}, rows=categories)


def _pair_with_base(items: list[BenchRow]) -> tuple[list[tuple[BenchRow, Comparison]], list[tuple[BenchRow, float]]]:
    """The rows compared in one bench with the first (its comparison; the first itself at 1.0), and the rows of
    separate benches (their throughput ÷ the first's)."""
    base = items[0]
    paired: list[tuple[BenchRow, Comparison]] = []
    separate: list[tuple[BenchRow, float]] = []
    for r in items:
        cmp = comparison_against(r.result, base.result)
        if r is base or cmp is not None:
            paired.append((r, cmp or Comparison(baseline=base.result.name, ratio=1.0)))
        elif r.result.throughput.value and base.result.throughput.value:
            separate.append((r, r.result.throughput.value / base.result.throughput.value))
    return paired, separate


def _paired_trace(paired: list[tuple[BenchRow, Comparison]], base: BenchRow, where: str) -> dict[str, Any]:
    """The bars of variants compared in one bench, with their p25–p75 spread."""
    cmps = [c for _, c in paired]
    return {
        "type": "bar", "orientation": "h", "name": where, "y": [r.result.name for r, _ in paired],
        "x": [c.ratio for c in cmps], "text": [_hover(r) for r, _ in paired], "textposition": "none",
        "error_x": {"type": "data", "symmetric": False,
                    "array": [max(0.0, (c.p75 or c.ratio or 0) - (c.ratio or 0)) for c in cmps],
                    "arrayminus": [max(0.0, (c.ratio or 0) - (c.p25 or c.ratio or 0)) for c in cmps]},
        "hovertemplate": "%{text}: %{x:.2f}× " + base.result.name + "<extra>%{fullData.name}</extra>",
    }


def _hover(r: BenchRow) -> str:
    """A bar's hover: which row, where and when ('#12 bf16 on cpu: Xeon, run 85103489b59d')."""
    return f"#{r.id} {r.result.name} on {r.hardware}, run {r.run_id or '-'}"


def latency_figure(rows: list[BenchRow]) -> dict[str, Any] | None:
    data = []
    for r in reversed(rows):
        samples = r.samples.get("latency_s") or []
        if samples:
            data.append({"type": "box", "orientation": "h", "name": r.short, "x": [x * 1e3 for x in samples],
                         "boxpoints": False, "showlegend": False})
    if not data:
        return None
    return _fig(data, {"xaxis": _axis("latency per iteration (ms, log scale)", type="log"),
                       "yaxis": _axis("result", autorange="reversed")}, rows=len(data))


ABOVE_PEAK_COLOR = "#d62728"  # a bar above 100 %: impossible as measured, drawn red with its explanation


def mfu_figure(rows: list[BenchRow], notes: list[str] | None = None) -> dict[str, Any] | None:
    """MFU against the datasheet peak and against the probe's measured peak, side by side where both exist. A bar
    above 100% is red, says '⚠ above peak' and why in its hover, and is named in ``notes``; a dotted line marks 100%."""
    names, primary, probe, hover_primary, hover_probe = [], [], [], [], []
    for r in reversed(rows):
        mfu = r.result.mfu
        if mfu.value is None:
            continue
        names.append(r.short)
        primary.append(mfu.value * 100)
        hover_primary.append(f"{mfu.peak_flops / 1e12:.4g} TFLOP/s peak — {mfu.peak_source}" if mfu.peak_flops else "")
        share = mfu.probe if mfu.datasheet is not None else None
        probe.append(share.value * 100 if share is not None and share.value is not None else None)
        hover_probe.append(share.source if share is not None else "")
        why = mfu.above_peak or (f"MFU {max(v for v in (primary[-1], probe[-1]) if v is not None):.1f}% exceeds the "
                                 "peak it divides by: the peak (or the counted FLOPs) is wrong"
                                 if max(v or 0 for v in (primary[-1], probe[-1])) > 100 else None)
        if why is not None:
            hover_primary[-1] = f"⚠ above peak: {why}<br>{hover_primary[-1]}"
            if notes is not None:
                notes.append(f"MFU above 100% ({r.short}, result {r.id}): {why}")  # (result_id: None on a stored row)
    if not names:
        return None

    def colors(values: Sequence[float | None], normal: str) -> list[str]:
        return [ABOVE_PEAK_COLOR if v is not None and v > 100 else normal for v in values]

    def labels(values: Sequence[float | None]) -> list[str]:
        return ["⚠ above peak" if v is not None and v > 100 else "" for v in values]

    data: list[dict[str, Any]] = [
        {"type": "bar", "orientation": "h", "y": names, "x": primary, "customdata": hover_primary,
         "text": labels(primary), "textposition": "outside", "marker": {"color": colors(primary, "#1f77b4")},
         "name": "of the dense peak (datasheet on a catalog GPU; the measured probe peak on a CPU)",
         "hovertemplate": "%{x:.2f}%<br>%{customdata}<extra></extra>"}]
    if any(v is not None for v in probe):
        data.append({"type": "bar", "orientation": "h", "y": names, "x": probe, "customdata": hover_probe,
                     "text": labels(probe), "textposition": "outside", "marker": {"color": colors(probe, "#ff7f0e")},
                     "name": "of the peak this device's matmul reached (`hw probe`)",
                     "hovertemplate": "%{x:.2f}%<br>%{customdata}<extra></extra>"})
    top = max(v for v in (*primary, *probe) if v is not None)
    layout: dict[str, Any] = {
        "barmode": "group", "xaxis": _axis("MFU (% of the dense peak of the dtype used)"),
        "yaxis": _axis("result", autorange="reversed")}
    if top > 100:  # the 100 % line, so a bar past it reads as what it is
        layout["shapes"] = [{"type": "line", "x0": 100, "x1": 100, "yref": "paper", "y0": 0, "y1": 1,
                             "line": {"color": ABOVE_PEAK_COLOR, "dash": "dot"}}]
        layout["xaxis"]["range"] = [0, top * 1.25]  # room for the '⚠ above peak' label
    return _fig(data, layout, rows=len(names) * len(data))


def predicted_figure(rows: list[BenchRow]) -> dict[str, Any] | None:
    """Measured against the planner's figure, one trace per unit (samples/s, images/s, tokens/s), the diagonal
    where they agree; hover says what the ratio means."""
    by_unit: dict[str, list[BenchRow]] = {}
    for r in rows:
        pred = r.result.predicted
        if pred is not None and pred.throughput and r.result.throughput.value:
            by_unit.setdefault(pred.unit, []).append(r)
    if not by_unit:
        return None
    data: list[dict[str, Any]] = []
    values: list[float] = []
    for unit, items in by_unit.items():
        xs = [r.result.predicted.throughput for r in items if r.result.predicted]
        ys = [r.result.throughput.value for r in items]
        values += [v for v in (*xs, *ys) if v]
        data.append({"type": "scatter", "mode": "markers", "name": unit, "x": xs, "y": ys,
                     "text": [f"{r.short}<br>{r.result.predicted.explanation or ''}" for r in items if r.result.predicted],
                     "hovertemplate": "%{text}<br>predicted %{x:.4g}, measured %{y:.4g} " + unit + "<extra></extra>"})
    lo, hi = min(values) / 2, max(values) * 2
    data.append({"type": "scatter", "mode": "lines", "x": [lo, hi], "y": [lo, hi], "name": "measured = predicted",
                 "line": {"dash": "dot", "color": "#888"}, "hoverinfo": "skip"})
    return _fig(data, {"xaxis": _axis("predicted by `accelkit plan` (items/s in the step's unit, log scale)", type="log"),
                       "yaxis": _axis("measured (items/s in the same unit, log scale)", type="log")})


def images_figure(rows: list[BenchRow]) -> dict[str, Any] | None:
    """Text-to-image: images/s per variant (``report.images``)."""
    found = images_traces(rows)
    if found is None:
        return None
    traces, n = found
    return _fig(traces, {"xaxis": _axis("images/s (whole pipeline call: text encoders, denoiser steps, VAE decode)"),
                         "yaxis": _axis("result", autorange="reversed")}, rows=n)


def image_phases_figure(rows: list[BenchRow]) -> dict[str, Any] | None:
    """Text-to-image: seconds per generation call by phase, stacked (``report.images``)."""
    found = phase_traces(rows)
    if found is None:
        return None
    traces, n = found
    return _fig(traces, {"barmode": "stack", "xaxis": _axis("seconds per generation call (median per phase)"),
                         "yaxis": _axis("result", autorange="reversed")}, rows=n)


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0 else None


def _probe_peaks(details: dict[str, Any]) -> tuple[float, dict[str, dict[str, Any]]] | None:
    """A probe's bandwidth (GB/s) and its matmul figures by dtype (each with a TFLOP/s), or None when the row lacks
    them — a row stored through the Python API or by another version; one such row stopped the whole report."""
    bandwidth, matmul = details.get("bandwidth"), details.get("matmul")
    gbps = _number(bandwidth.get("gbps")) if isinstance(bandwidth, dict) else None
    if gbps is None or not isinstance(matmul, dict):
        return None
    peaks = {str(k): m for k, m in matmul.items() if isinstance(m, dict) and _number(m.get("tflops")) is not None}
    return (gbps, peaks) if peaks else None


def roofline_figure(store: ResultStore, notes: list[str] | None = None,
                    hardware_names: Collection[str] | None = None) -> dict[str, Any] | None:
    """Attainable FLOP/s = min(peak, bandwidth × arithmetic intensity) per hardware and probed dtype, each from the
    best stored probe of that dtype (``accelkit.hardware.probe_quality``: the best full probe; a quick or smaller
    one only where no better is stored, named in its trace and in ``notes``), the bandwidth likewise; a probe row
    without the figures is named in ``notes``. The catalog roofline (dashed) where the device is in the catalog.
    ``hardware_names``: only those machines' (a report of one run: the hardware its results ran on — a probe is of a
    machine, not of a run, and `report --run` drew every other machine's roofline beside its own)."""
    by_hardware: dict[str, list[StoredResult]] = {}
    for s in store.query(kind="probe", limit=200):  # newest first
        hardware = s.result.hardware or "?"
        if hardware_names is not None and hardware not in hardware_names:
            continue
        if _probe_peaks(s.result.details) is None:
            if notes is not None:
                notes.append(f"probe #{s.id} ({hardware}) has no bandwidth or matmul figures; it is left out of the "
                             "roofline")
            continue
        by_hardware.setdefault(hardware, []).append(s)
    intensities = [10 ** (k / 8) for k in range(-8, 33)]  # 0.1 … 10^4 FLOP/byte
    data: list[dict[str, Any]] = []
    for hardware, probes in by_hardware.items():
        copy = best_copy(probes)
        assert copy is not None  # every probe kept here has a bandwidth
        bw = copy.value * 1e9
        if copy.quality != "full" and notes is not None:
            notes.append(f"{hardware}: the bandwidth is probe #{copy.id}'s ({copy.why}), as no full probe is stored: "
                         "run `accelkit hw probe`")
        for dtype in dtypes_of(probes):
            m = best_matmul(probes, dtype)
            if m is None:
                continue
            tag = "" if m.quality == "full" else {"quick": ", quick", "small": ", below the default sizes"}[m.quality]
            if m.quality != "full" and notes is not None:
                notes.append(f"{hardware} {dtype}: drawn from probe #{m.id} ({m.why}), as no full {dtype} probe is "
                             f"stored: run `accelkit hw probe --dtype {dtype}`")
            data.append({"type": "scatter", "mode": "lines", "name": f"{hardware} {dtype} (measured, #{m.id}{tag})",
                         "x": intensities, "y": [min(m.value * 1e12, bw * i) / 1e12 for i in intensities]})
            row = m.stored.result.details["matmul"][dtype]
            cat_peak, cat_bw = row.get("catalog_peak_tflops"), m.stored.result.details["bandwidth"].get("catalog_gbps")
            if cat_peak and cat_bw:
                data.append({"type": "scatter", "mode": "lines", "line": {"dash": "dash"},
                             "name": f"{hardware} {dtype} (catalog)",
                             "x": intensities, "y": [min(cat_peak * 1e12, cat_bw * 1e9 * i) / 1e12 for i in intensities]})
    if not data:
        return None
    return _fig(data, {"xaxis": _axis("arithmetic intensity (FLOP/byte, log scale)", type="log"),
                       "yaxis": _axis("attainable TFLOP/s (log scale)", type="log")})


def _loadtests(store: ResultStore, run_id: str | None) -> list[StoredResult]:
    return store.query(kind="loadtest", run_id=run_id, limit=20)


def serving_curve_figure(results: list[StoredResult]) -> dict[str, Any] | None:
    """Latency against achieved request throughput, one line per load test (a sweep gives a curve)."""
    data = []
    for s in results:
        curve = plot_data(s.result)["curve"]  # type: ignore[arg-type]
        x = [p["request_throughput"] for p in curve]
        labels = [f"rate {p['rate']}" for p in curve]
        for metric, q, dash in (("ttft_ms", "p50", None), ("ttft_ms", "p99", "dot"), ("tpot_ms", "p50", "dash")):
            y = [(p.get(metric) or {}).get(q) for p in curve]
            data.append({"type": "scatter", "mode": "lines+markers", "x": x, "y": y, "text": labels,
                         "line": {"dash": dash} if dash else {},
                         "name": f"#{s.id} {metric.split('_')[0].upper()} {q}"})
    if not data:
        return None
    return _fig(data, {"xaxis": _axis("achieved request throughput (requests/s)"),
                       "yaxis": _axis("latency (ms)")})


def serving_distribution_figure(results: list[StoredResult]) -> dict[str, Any] | None:
    """TTFT and TPOT distributions per request rate of the newest load test."""
    data = []
    if results:
        newest = results[0]
        for rate, series in plot_data(newest.result)["distributions"].items():  # type: ignore[arg-type]
            for metric in ("ttft_ms", "tpot_ms"):
                if series.get(metric):
                    data.append({"type": "box", "y": series[metric], "boxpoints": False,
                                 "name": f"{metric.split('_')[0].upper()} @ {rate} req/s"})
    if not data:
        return None
    return _fig(data, {"xaxis": _axis("metric @ offered request rate"), "yaxis": _axis("latency (ms)"),
                       "showlegend": False})


# ---- tables ----------------------------------------------------------------------------------------------
def _drift_cell(acc: Any, sqnr: Any) -> str:
    """The table's drift column: inf/NaN, exact (identical, or an infinite SQNR), the SQNR in dB, or '-'."""
    if has_nonfinite_output(acc):
        return "inf/NaN"
    if acc is not None and (acc.identical or (isinstance(sqnr, float) and math.isinf(sqnr))):
        return "exact"
    return f"{sqnr:.1f} dB" if isinstance(sqnr, (int, float)) else "-"


def _table_rows(rows: list[BenchRow]) -> list[dict[str, Any]]:
    out = []
    for r in rows:
        b = r.result
        acc = b.accuracy
        sqnr = acc.sqnr_db if acc is not None else None
        pred = b.predicted.ratio if b.predicted else None
        mfu = mfu_text(b)
        out.append({
            "id": r.id, "created": r.created_at, "run": r.run_id or "", "hardware": r.hardware,
            "workload": r.label, "variant": b.name, "step": b.step,
            # as the bench's terminal table writes them: ',.2f' and '.3f ms' showed 0.00123 samples/s as '0.00'
            "throughput": throughput_text(b), "p50": median_text(b),
            "cv": f"{b.latency_s.cv * 100:.1f}%" if b.latency_s else "-",
            "mfu": mfu,
            # fmt_bytes and fmt_ratio, as the bench table: '.1f MiB' showed 20 KiB as '0.0 MiB', and '.2f' a
            # measured ÷ predicted of 0.0024 (a tiny model on a CPU) as '0.00' — 'measured nothing'
            "memory": fmt_bytes(b.memory_bytes.peak) if b.memory_bytes.peak is not None else "-",
            "energy": f"{b.energy_j_per_item:.4g}" if b.energy_j_per_item is not None else "-",
            "drift": _drift_cell(acc, sqnr),
            "predicted": fmt_ratio(pred) if pred is not None else "-",
            "predicted_title": b.predicted.explanation if b.predicted and b.predicted.explanation else "",
        })
    return out


def run_verdicts(rows: list[BenchRow]) -> list[dict[str, Any]]:
    """What won each run with two or more variants (the same sentences `accelkit bench` prints)."""
    out = []
    for (run_id, label), items in _run_groups(rows, "label").items():
        lines = verdicts([r.result for r in items])
        if lines:
            out.append({"run": run_id or "", "label": label, "hardware": items[0].hardware, "lines": lines})
    return out


def _script_json(value: Any) -> str:
    """JSON to embed in a <script>: <, > and & as \\u escapes, so no stored text ('</script>', '<!--<script>', which
    puts the HTML parser in a state where the script never ends) can leave the script or change how it is parsed."""
    text = json.dumps(value, default=str)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _store_contents(store: ResultStore, run_id: str | None) -> str:
    """'3 plan, 1 sweep' — what the store (or the run) holds, for a report without benchmark results."""
    counts = [(kind, store.count(kind=kind, run_id=run_id)) for kind in store.distinct("kind")]
    return ", ".join(f"{n} {kind}" for kind, n in counts if n)


def _check_store(store: Any) -> None:
    """A store that is not a ResultStore (a path, as a notebook might pass) is one line naming it, not an
    AttributeError from deep inside (found by the Python API hunt)."""
    if not isinstance(store, ResultStore):
        raise TypeError(f"store={store!r} is not a ResultStore; pass accelkit.results.ResultStore(path) (or, to "
                        "write_report, leave store out for the default store)")


def _check_out(path: Path) -> None:
    """Refuse, before the report is built, a path that is a directory or lies in a directory that does not exist:
    one line naming it (the write failed afterwards with IsADirectoryError, or a FileNotFoundError naming the
    temporary file beside it, ``.accelkit-….tmp``, which the caller never gave)."""
    if path.is_dir():
        raise UserError(f"path={str(path)!r} is a directory; give a file path such as {str(path / 'report.html')!r}")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        raise UserError(f"path={str(path)!r}: the directory {str(parent)!r} does not exist; create it first or "
                        "choose another path")


def build_report(store: ResultStore, *, run_id: str | None = None, limit: int = DEFAULT_LIMIT) -> str:
    """The report as an HTML string: the newest ``limit`` benchmark results in the table (the header says how many
    there are), the newest MAX_PLOTTED of them in the figures."""
    _check_store(store)
    from jinja2 import Environment
    from plotly.offline import get_plotlyjs

    notes: list[str] = []
    before = set(store.skipped)
    rows = bench_rows(store, run_id, limit)
    # bench rows within the limit that could not be read (warned about by name): no larger --limit shows them
    unreadable = len(set(store.skipped) - before)
    bench_total = store.count(kind="bench", run_id=run_id)
    plotted = rows[:MAX_PLOTTED]
    loadtests = _loadtests(store, run_id)
    sections = [
        ("comparison", "Precision and optimization comparison", "Throughput of each variant divided by the first "
         "variant of its run (interleaved runs: the median of per-round ratios, bars p25–p75). Hatched: separate benches "
         "that share a run id (a sweep's points), by the ratio of their throughputs — never run side by side, so "
         "without a spread.", comparison_figure(plotted)),
        ("latency", "Latency distributions", "Raw per-iteration samples of the measured phase.", latency_figure(plotted)),
        ("images", "Text-to-image: images/s per variant", "Each `accelkit bench diffusion` result: images per second "
         "of the whole pipeline call (prompts → text encoders → denoiser steps → VAE decode). Hover for seconds per "
         "image, MFU and the image accuracy gate.", images_figure(plotted)),
        ("image-phases", "Text-to-image: where a call's time goes", "Median seconds per generation call of each "
         "phase, timed inside the diffusers pipeline call by hooks on its modules; 'other' is the rest (tokenizers, "
         "the scheduler's update, latent preparation, Python). Hover for the share and each phase's MFU.",
         image_phases_figure(plotted)),
        ("mfu", "MFU against peak", "Model FLOP/s ÷ dense peak of the dtype used. On a catalog GPU twice: against "
         "the datasheet peak and against the peak this GPU's matmul reached in `accelkit hw probe`; on a CPU the "
         "probe's peak is the only one. Hover for the peak and its source. A bar past 100% is red and marked '⚠ "
         "above peak': the peak it divides by is too low (a --quick or small probe) or the FLOPs are wrong — its "
         "hover and the notes above say which.", mfu_figure(plotted, notes)),
        ("predicted", "Predicted vs measured", "The planner's estimate (the same `accelkit plan` call) stored beside "
         "each measurement, in the step's own unit: samples/s for an encoder, images/s for a CNN, tokens/s for a "
         "decoder. Points on the dotted diagonal agree; above it this machine did better than the planner "
         "expected (its efficiency for the device or shape is too low), below it worse (overheads the planner does "
         "not model: small kernels, Python, launch latency). Hover for each ratio in words.", predicted_figure(plotted)),
        ("roofline", "Measured roofline", "min(peak, bandwidth × intensity), per device and dtype from the best "
         "stored `accelkit hw probe` of that dtype: the best full probe — a --quick or smaller one only where no "
         "full one is stored, marked in its name — never simply the newest.",
         roofline_figure(store, notes, None if run_id is None else {r.hardware for r in rows})),
        ("serving", "Serving: latency vs throughput", "Each `accelkit loadtest` (a `--sweep-rates` run gives a "
         "curve): TTFT p50/p99 and TPOT p50 against the request throughput achieved.", serving_curve_figure(loadtests)),
        ("serving-dist", "Serving: TTFT and TPOT distributions", "Per request rate, newest load test.",
         serving_distribution_figure(loadtests)),
    ]
    figures = [{"id": fid, "title": title, "caption": caption, "json": _script_json(fig)}
               for fid, title, caption, fig in sections if fig is not None]
    hardware = sorted({r.hardware for r in rows})
    env = Environment(autoescape=True)
    template = env.from_string(TEMPLATE)
    return template.render(
        plotly_js=get_plotlyjs(), figures=figures, rows=_table_rows(rows), verdicts=run_verdicts(rows),
        hardware=hardware, store_path=str(store.path), total=store.count(), run_id=run_id, bench_total=bench_total,
        unreadable=unreadable,
        notes=notes, contents="" if rows else _store_contents(store, run_id),
    )


def write_report(path: str | Path, *, store: ResultStore | None = None, run_id: str | None = None,
                 limit: int = DEFAULT_LIMIT) -> Path:
    """Write the report to ``path`` (its directory must exist) and return it."""
    path = Path(path)
    if store is not None:
        _check_store(store)
    _check_out(path)
    own = store is None
    store = store or ResultStore(readonly=True)
    try:
        html = build_report(store, run_id=run_id, limit=limit)
    finally:
        if own:
            store.close()
    write_html(path, html)
    return path


def write_html(path: Path, html: str) -> int:
    """Write ``html`` to ``path`` and return the bytes written. A regular file (or a new one) is written whole or
    not at all, through a symlink into its target (accelkit.results.out_file); a device or a pipe that exists
    (``/dev/stdout`` piped, a FIFO, ``/dev/null``) is written in place — out_file resolves ``/dev/stdout`` to
    ``/proc/<pid>/fd/pipe:[…]``, which is no path, and the report failed (``No such file or directory``)."""
    data = html.encode("utf-8")
    try:
        mode = os.stat(path).st_mode
    except OSError:  # not there (yet): a new regular file
        mode = None
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        with open(path, "wb") as f:
            f.write(data)
    else:
        write_whole(path, html)
    return len(data)
