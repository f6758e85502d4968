"""Text-to-image results in the HTML report: images/s per variant, and seconds per generation call split by phase
(text encoders, denoiser, VAE decode, the rest). Returns plotly traces and axis titles; ``report.html`` lays them
out like its other figures. No torch."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelkit.report.html import BenchRow

PHASE_COLORS = {"text encoders": "#8e6c8a", "denoiser": "#4c78a8", "vae decode": "#f58518", "other": "#bab0ac"}


def image_rows(rows: Sequence[BenchRow]) -> list[BenchRow]:
    """Text-to-image results (images/s with a phase breakdown), oldest first: a run's variants in run order."""
    return [r for r in reversed(rows) if r.result.phase_breakdown and r.result.throughput.unit == "images/s"
            and r.result.throughput.value]


def _name(r: BenchRow) -> str:
    return f"#{r.id} {r.result.name} · {r.label}"


def images_traces(rows: Sequence[BenchRow]) -> tuple[list[dict[str, Any]], int] | None:
    """One bar per text-to-image result: images/s, with seconds per image, MFU and the gate in the hover."""
    items = image_rows(rows)
    if not items:
        return None
    hover = []
    for r in items:
        v = r.result
        gate = "" if v.gate is None else f"; accuracy gate {'pass' if v.gate.passed else 'FAIL'}"
        mfu = "" if v.mfu.value is None else f"; MFU {v.mfu.value * 100:.2f}%"
        hover.append(f"{1 / v.throughput.value:.4g} s/image{mfu}{gate} — {r.hardware}")  # type: ignore[operator]
    trace = {"type": "bar", "orientation": "h", "y": [_name(r) for r in items],
             "x": [r.result.throughput.value for r in items], "text": hover, "textposition": "none",
             "name": "images/s (the whole pipeline call)",
             "hovertemplate": "%{x:.4g} images/s<br>%{text}<extra></extra>"}
    return [trace], len(items)


def phase_traces(rows: Sequence[BenchRow]) -> tuple[list[dict[str, Any]], int] | None:
    """Stacked bars: median seconds per generation call of each phase, per text-to-image result."""
    items = image_rows(rows)
    if not items:
        return None
    names = [_name(r) for r in items]
    traces = []
    for phase, color in PHASE_COLORS.items():
        xs, text = [], []
        for r in items:
            p = next((p for p in r.result.phase_breakdown or [] if p.phase == phase), None)
            xs.append(p.median_s if p is not None else None)
            share = f"{p.share * 100:.1f}% of the call" if p is not None and p.share is not None else ""
            mfu = f", MFU {p.mfu.value * 100:.2f}%" if p is not None and p.mfu is not None and p.mfu.value else ""
            text.append(share + mfu)
        traces.append({"type": "bar", "orientation": "h", "y": names, "x": xs, "name": phase, "text": text,
                       "textposition": "none", "marker": {"color": color},
                       "hovertemplate": phase + ": %{x:.4g} s<br>%{text}<extra></extra>"})
    return traces, len(items)
