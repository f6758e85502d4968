"""`accelkit report`: one self-contained HTML file built from the results store.

Sections: the runs table (with filters), precision/optimization comparison bars with their spread,
latency distributions from the raw samples, MFU against the peak it was divided by, predicted vs
measured, the measured roofline from `hw probe`, and the serving latency-throughput curves and
TTFT/TPOT distributions from `loadtest`. plotly.js is inlined, so the file opens with no
network. No torch import: this reads the store and draws.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from accelkit.report.template import TEMPLATE
from accelkit.results import ResultStore, StoredResult

#: at most this many benchmark rows are drawn (newest first); the table lists them all
MAX_PLOTTED = 60


def _fig(data: list[dict[str, Any]], layout: dict[str, Any], *, empty: str | None = None) -> dict[str, Any]:
    base = {"margin": {"l": 60, "r": 20, "t": 30, "b": 120}, "height": 420, "template": None,
            "font": {"family": "system-ui, sans-serif", "size": 12}, "showlegend": True}
    base.update(layout)
    if empty and not data:
        base["annotations"] = [{"text": empty, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5,
                                "y": 0.5, "font": {"size": 14}}]
        base["xaxis"] = {"visible": False}
        base["yaxis"] = {"visible": False}
    return {"data": data, "layout": base}


def _bench_rows(store: ResultStore, run_id: str | None, limit: int) -> list[StoredResult]:
    return store.query(kind="bench", run_id=run_id, limit=limit)


def _key(s: StoredResult) -> str:
    d = s.result.details
    return f"{d.get('label', s.result.name)} · {d.get('step', '')}"


def _table_rows(rows: list[StoredResult]) -> list[dict[str, Any]]:
    out = []
    for s in rows:
        r, d = s.result, s.result.details
        acc = d.get("accuracy") or {}
        sqnr = acc.get("sqnr_db")
        pred = (d.get("predicted") or {}).get("ratio")
        out.append({
            "id": s.id, "created": r.created_at, "run": s.run_id or "", "hardware": r.hardware or "",
            "workload": d.get("label", r.name), "variant": d.get("name", ""), "step": d.get("step", ""),
            "throughput": f"{r.throughput:,.2f} {r.throughput_unit}" if r.throughput is not None else "-",
            "p50": f"{r.latency_s.median * 1e3:.3f} ms" if r.latency_s else "-",
            "cv": f"{r.latency_s.cv * 100:.1f}%" if r.latency_s else "-",
            "mfu": f"{r.mfu * 100:.2f}%" if r.mfu is not None else "-",
            "memory": f"{r.memory_bytes['peak'] / 2**20:.1f} MiB" if "peak" in r.memory_bytes else "-",
            "energy": f"{r.energy_j_per_item:.4g}" if r.energy_j_per_item is not None else "-",
            "drift": "exact" if acc.get("identical") or (isinstance(sqnr, float) and math.isinf(sqnr))
            else (f"{sqnr:.1f} dB" if isinstance(sqnr, (int, float)) else "-"),
            "predicted": f"{pred:.2f}" if pred is not None else "-",
        })
    return out


def comparison_figure(rows: list[StoredResult]) -> dict[str, Any]:
    groups: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for s in rows:
        cmp = s.result.details.get("comparison")
        if cmp and cmp.get("ratio") is not None:
            groups.setdefault(f"{s.run_id} {_key(s)}", []).append((s.result.details.get("name", "?"), cmp))
    data = []
    for group, items in groups.items():
        if len(items) < 2:
            continue
        items.reverse()  # query is newest first; variants in run order
        ratios = [c["ratio"] for _, c in items]
        data.append({
            "type": "bar", "name": group.split(" ", 1)[1], "x": [n for n, _ in items], "y": ratios,
            "error_y": {"type": "data", "symmetric": False,
                        "array": [max(0.0, (c.get("p75") or c["ratio"]) - c["ratio"]) for _, c in items],
                        "arrayminus": [max(0.0, c["ratio"] - (c.get("p25") or c["ratio"])) for _, c in items]},
            "hovertemplate": "%{x}: %{y:.2f}× of the first variant<extra>%{fullData.name}</extra>",
        })
    return _fig(data, {"barmode": "group", "yaxis": {"title": "throughput ÷ first variant (p25–p75 bars)"},
                       "shapes": [{"type": "line", "xref": "paper", "x0": 0, "x1": 1, "y0": 1, "y1": 1,
                                   "line": {"dash": "dot", "color": "#888"}}]},
                empty="no run with two or more variants yet: accelkit bench bert --size tiny --precision fp32,bf16")


def latency_figure(rows: list[StoredResult]) -> dict[str, Any]:
    data = []
    for s in reversed(rows):
        samples = getattr(s.result, "samples", {}).get("latency_s") or []
        if samples:
            data.append({"type": "box", "name": f"#{s.id} {s.result.details.get('name', '')} · {_key(s)}",
                         "y": [x * 1e3 for x in samples], "boxpoints": False, "showlegend": False})
    return _fig(data, {"yaxis": {"title": "latency per iteration (ms, log)", "type": "log"}},
                empty="no benchmark results yet")


def mfu_figure(rows: list[StoredResult]) -> dict[str, Any]:
    xs, ys, hover = [], [], []
    for s in reversed(rows):
        mfu = s.result.details.get("mfu") or {}
        if mfu.get("value") is not None:
            xs.append(f"#{s.id} {s.result.details.get('name', '')} · {_key(s)}")
            ys.append(mfu["value"] * 100)
            hover.append(f"peak {mfu['peak_flops'] / 1e12:.3g} TFLOP/s — {mfu['peak_source']}")
    data = [{"type": "bar", "x": xs, "y": ys, "text": hover, "textposition": "none", "name": "MFU",
             "hovertemplate": "%{y:.2f}% of peak<br>%{text}<extra></extra>"}] if xs else []
    return _fig(data, {"yaxis": {"title": "MFU (% of the dense peak of the dtype used)"}, "showlegend": False},
                empty="no MFU yet (run `accelkit hw probe` on a CPU, or bench on a catalog GPU)")


def predicted_figure(rows: list[StoredResult]) -> dict[str, Any]:
    xs, ys, names = [], [], []
    for s in rows:
        pred = s.result.details.get("predicted") or {}
        if pred.get("throughput") and s.result.throughput:
            xs.append(pred["throughput"])
            ys.append(s.result.throughput)
            names.append(f"#{s.id} {s.result.name}")
    data: list[dict[str, Any]] = []
    if xs:
        lo, hi = min(xs + ys) / 2, max(xs + ys) * 2
        data = [
            {"type": "scatter", "mode": "markers", "x": xs, "y": ys, "text": names, "name": "results",
             "hovertemplate": "%{text}<br>predicted %{x:.3g}, measured %{y:.3g}<extra></extra>"},
            {"type": "scatter", "mode": "lines", "x": [lo, hi], "y": [lo, hi], "name": "measured = predicted",
             "line": {"dash": "dot"}},
        ]
    return _fig(data, {"xaxis": {"title": "predicted throughput (planner)", "type": "log"},
                       "yaxis": {"title": "measured throughput", "type": "log"}},
                empty="no planner estimates stored beside measurements yet (accelkit.plan)")


def roofline_figure(store: ResultStore) -> dict[str, Any]:
    """Attainable FLOP/s = min(peak, bandwidth × arithmetic intensity), per probed dtype, for the newest
    probe of each hardware; the catalog roofline (dashed) where the device is in the catalog."""
    latest: dict[str, StoredResult] = {}
    for s in store.query(kind="probe", limit=50):
        latest.setdefault(s.result.hardware or "?", s)
    intensities = [10 ** (k / 8) for k in range(-8, 33)]  # 0.1 … 10^4 FLOP/byte
    data = []
    for hardware, s in latest.items():
        d = s.result.details
        bw = d["bandwidth"]["gbps"] * 1e9
        for dtype, m in d["matmul"].items():
            peak = m["tflops"] * 1e12
            data.append({"type": "scatter", "mode": "lines", "name": f"{hardware} {dtype} (measured, #{s.id})",
                         "x": intensities, "y": [min(peak, bw * i) / 1e12 for i in intensities]})
            cat_peak, cat_bw = m.get("catalog_peak_tflops"), d["bandwidth"].get("catalog_gbps")
            if cat_peak and cat_bw:
                data.append({"type": "scatter", "mode": "lines", "line": {"dash": "dash"},
                             "name": f"{hardware} {dtype} (catalog)",
                             "x": intensities, "y": [min(cat_peak * 1e12, cat_bw * 1e9 * i) / 1e12 for i in intensities]})
    return _fig(data, {"xaxis": {"title": "arithmetic intensity (FLOP/byte, log)", "type": "log"},
                       "yaxis": {"title": "attainable TFLOP/s (log)", "type": "log"}},
                empty="no `accelkit hw probe` result yet")


def _loadtests(store: ResultStore, run_id: str | None) -> list[StoredResult]:
    return store.query(kind="loadtest", run_id=run_id, limit=20)


def serving_curve_figure(results: list[StoredResult]) -> dict[str, Any]:
    """Latency against achieved request throughput, one line per load test (a sweep gives a curve)."""
    from accelkit.loadtest import plot_data

    data = []
    for s in results:
        curve = plot_data(s.result)["curve"]
        x = [p["request_throughput"] for p in curve]
        labels = [f"rate {p['rate']}" for p in curve]
        for metric, q, dash in (("ttft_ms", "p50", None), ("ttft_ms", "p99", "dot"), ("tpot_ms", "p50", "dash")):
            y = [(p.get(metric) or {}).get(q) for p in curve]
            data.append({"type": "scatter", "mode": "lines+markers", "x": x, "y": y, "text": labels,
                         "line": {"dash": dash} if dash else {},
                         "name": f"#{s.id} {metric.split('_')[0].upper()} {q}"})
    return _fig(data, {"xaxis": {"title": "achieved request throughput (req/s)"}, "yaxis": {"title": "ms"}},
                empty="no `accelkit loadtest` result yet")


def serving_distribution_figure(results: list[StoredResult]) -> dict[str, Any]:
    """TTFT and TPOT distributions per request rate of the newest load test."""
    from accelkit.loadtest import plot_data

    data = []
    if results:
        newest = results[0]
        for rate, series in plot_data(newest.result)["distributions"].items():
            for metric in ("ttft_ms", "tpot_ms"):
                if series.get(metric):
                    data.append({"type": "box", "y": series[metric], "boxpoints": False,
                                 "name": f"{metric.split('_')[0].upper()} @ rate {rate}"})
    return _fig(data, {"yaxis": {"title": "ms"}}, empty="no `accelkit loadtest` result yet")


def build_report(store: ResultStore, *, run_id: str | None = None, limit: int = 500) -> str:
    """The report as an HTML string."""
    from jinja2 import Environment
    from plotly.offline import get_plotlyjs

    rows = _bench_rows(store, run_id, limit)
    plotted = rows[:MAX_PLOTTED]
    loadtests = _loadtests(store, run_id)
    figures = [
        ("comparison", "Precision and optimization comparison", "Throughput of each variant divided by the first "
         "variant of its run (interleaved runs: the median of per-round ratios, bars p25–p75).", comparison_figure(plotted)),
        ("latency", "Latency distributions", "Raw per-iteration samples of the measured phase.", latency_figure(plotted)),
        ("mfu", "MFU against peak", "Model FLOP/s ÷ dense peak of the dtype used; hover for the peak and its "
         "source (catalog datasheet, or the measured `hw probe` peak on a CPU).", mfu_figure(plotted)),
        ("predicted", "Predicted vs measured", "The planner's estimate stored beside each measurement.",
         predicted_figure(plotted)),
        ("roofline", "Measured roofline", "From the newest `accelkit hw probe` of each device: min(peak, "
         "bandwidth × intensity).", roofline_figure(store)),
        ("serving", "Serving: latency vs throughput", "Each `accelkit loadtest` (a `--sweep-rates` run gives a "
         "curve): TTFT p50/p99 and TPOT p50 against the request throughput achieved.", serving_curve_figure(loadtests)),
        ("serving-dist", "Serving: TTFT and TPOT distributions", "Per request rate, newest load test.",
         serving_distribution_figure(loadtests)),
    ]
    hardware = sorted({s.result.hardware or "" for s in rows})
    env = Environment(autoescape=True)
    template = env.from_string(TEMPLATE)
    return template.render(
        plotly_js=get_plotlyjs(),
        figures=[{"id": fid, "title": title, "caption": caption,
                  "json": json.dumps(fig, default=str).replace("</", "<\\/")}
                 for fid, title, caption, fig in figures],
        rows=_table_rows(rows), hardware=hardware, store_path=str(store.path), total=store.count(),
        run_id=run_id,
    )


def write_report(path: str | Path, *, store: ResultStore | None = None, run_id: str | None = None) -> Path:
    """Write the report to ``path`` and return it."""
    path = Path(path)
    own = store is None
    store = store or ResultStore()
    try:
        html = build_report(store, run_id=run_id)
    finally:
        if own:
            store.close()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path
