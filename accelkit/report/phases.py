"""Terminal output for results whose measured call has phases inside it (text-to-image: text encoders, denoiser
steps, VAE decode): where the time goes per variant, each phase's MFU, and the image accuracy gate. Pure formatting."""

from __future__ import annotations

from rich.table import Table

from accelkit.core.bench_result import BenchResult, BenchRunResult, OutputGate
from accelkit.core.units import fmt_count
from accelkit.report.tables import share_text


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value:.3g} s" if value >= 1 else f"{value * 1e3:.3g} ms"


def seconds_per_item(v: BenchResult) -> float | None:
    """Seconds per image (1 ÷ images/s over the measured time)."""
    return 1 / v.throughput.value if v.throughput.value else None


def phase_table(run: BenchRunResult) -> Table | None:
    """One row per (variant, phase): calls per measured call, median seconds per call and share of it, one call of
    the phase (one denoiser step), FLOPs per call and the phase's MFU; None when no variant has phases."""
    entries = [v for v in run.variants if v.phase_breakdown]
    if not entries:
        return None
    t = Table(title="where a generation call's time goes (timed inside the pipeline call; median over the calls after "
                    "the first)", title_justify="left", header_style="bold")
    for i, col in enumerate(("variant", "phase", "calls", "per call", "share", "one call", "FLOPs/image", "MFU")):
        t.add_column(col, justify="left" if i < 2 else "right")
    for v in entries:
        for p in v.phase_breakdown or []:
            flops = p.mfu.flops_per_item if p.mfu is not None else None
            t.add_row(v.name, p.phase, str(p.calls) if p.calls else "-", _s(p.median_s),
                      "-" if p.share is None else f"{p.share * 100:.1f}%",
                      _s(p.call_median_s) if p.calls > 1 else "-", fmt_count(flops) if flops else "-",
                      share_text(p.mfu))
    return t


def gate_text(gate: OutputGate) -> str:
    """'latent cosine 0.9997 (≥ 0.99), image PSNR 42.6 dB (≥ 30) — pass'."""
    f, th = gate.figures, gate.thresholds
    cosine, psnr = f.get("latent_cosine"), f.get("image_psnr_db")
    parts = [f"latent cosine {'-' if cosine is None else f'{cosine:.5f}'} (≥ {th.get('latent_cosine', '-')})",
             "image PSNR " + ("∞" if psnr is None and gate.note and "identical" in gate.note else
                              "-" if psnr is None else f"{psnr:.1f} dB") + f" (≥ {th.get('image_psnr_db', '-'):g} dB)"]
    verdict = "-" if gate.passed is None else ("pass" if gate.passed else "FAIL")
    return ", ".join(parts) + f" — {verdict}" + (f" ({gate.note})" if gate.note and not gate.passed else "")


def phase_lines(run: BenchRunResult) -> list[str]:
    """Under the phase table: seconds per image and images/s per variant, each step's time where the denoiser
    slows or speeds up along the trajectory, and the accuracy gate."""
    lines = []
    for v in run.variants:
        if not v.phase_breakdown and v.gate is None:
            continue
        spi = seconds_per_item(v)
        if spi is not None and v.throughput.unit == "images/s":
            lines.append(f"{v.name}: {_s(spi)} per image ({v.throughput.value:.4g} images/s)")
        denoiser = next((p for p in v.phase_breakdown or [] if p.per_step_s), None)
        if denoiser is not None and denoiser.per_step_s and len(denoiser.per_step_s) > 1:
            steps = denoiser.per_step_s
            lines.append(f"{v.name}: denoiser steps {', '.join(_s(s) for s in steps[:8])}"
                         + (f" … ({len(steps)} steps)" if len(steps) > 8 else ""))
        if v.gate is not None:
            lines.append(f"{v.name}: accuracy gate — {gate_text(v.gate)}")
    gates = [v.gate for v in run.variants if v.gate is not None]
    if gates:
        lines.append(f"accuracy gate: {gates[0].criterion}")
    return lines
