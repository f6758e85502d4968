"""Terminal tables for benchmark results (rich): pure formatting of the typed
:class:`~accelkit.core.bench_result.BenchRunResult` the runner returns; no torch."""

from __future__ import annotations

from typing import Any

from rich.table import Table

from accelkit.core.bench_result import Accuracy, BenchResult, BenchRunResult, Comparison, MfuResult
from accelkit.core.units import fmt_bytes, fmt_ratio


def _num(value: float | None, digits: int = 2) -> str:
    if value is None:
        return "-"
    if value != 0 and abs(value) < 10 ** -digits:
        return f"{value:.2e}"
    return f"{value:,.{digits}f}"


def _seconds(value: float | None) -> str:
    if value is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def throughput_text(v: BenchResult) -> str:
    """A throughput as the bench table writes it: '1,234.50 samples/s', '1.23e-03 samples/s' (not '0.00')."""
    return "-" if v.throughput.value is None else f"{_num(v.throughput.value)} {v.throughput.unit}"


def median_text(v: BenchResult) -> str:
    """The median latency as the bench table writes it: 252 ms, 1.2 s, 40 µs."""
    return "-" if v.latency_s is None else _seconds(v.latency_s.median)


def _ratio(cmp: Comparison | None) -> str:
    if cmp is None or cmp.ratio is None:
        return "-"
    if cmp.verdict == "baseline":
        return "1.00 (baseline)"
    text = f"{cmp.ratio:.2f}×"
    if cmp.p25 is not None and cmp.p75 is not None:
        text += f" [{cmp.p25:.2f}–{cmp.p75:.2f}]"
    if cmp.verdict.startswith("no difference"):
        text += " ≈"
    elif cmp.is_inconclusive:
        text += " ?"
    return text


def has_nonfinite_output(acc: Accuracy | None) -> bool:
    """Compared, but an output had inf/NaN: no drift figure (all null), the note says which side."""
    return acc is not None and acc.identical is False and acc.cosine is None


def _drift(acc: Accuracy | None) -> str:
    if has_nonfinite_output(acc):
        return "inf/NaN"
    if acc is None or acc.cosine is None:
        return "-"
    if acc.identical:
        return "exact"
    return "-" if acc.sqnr_db is None else f"SQNR {acc.sqnr_db:.1f} dB"


def mfu_text(v: BenchResult) -> str:
    """MFU against the datasheet, and against the probe's measured peak where there are both."""
    return share_text(v.mfu)


def share_text(mfu: MfuResult | None) -> str:
    """'41.20% (44.0% of probe)': an MFU against its main peak, and against the probe's where there are both."""
    if mfu is None or mfu.value is None:
        return "-"
    text = f"{mfu.value * 100:.2f}%"
    probe = mfu.probe
    if mfu.datasheet is not None and probe is not None and probe.value is not None:
        text += f" ({probe.value * 100:.1f}% of probe)"
    if mfu.above_peak is not None or mfu.value > 1:  # impossible as measured: the footnote says why
        text += " ⚠ above peak"
    return text


def bench_table(run: BenchRunResult) -> Table:
    """One row per (variant, step): throughput, latency, spread, ratio to the baseline, MFU, memory, energy,
    drift and measured ÷ predicted."""
    t = Table(title=f"{run.label} on {run.hardware} ({run.device})", title_justify="left", header_style="bold")
    columns = ["variant", "step", "throughput", "latency p50", "p90", "CV · IQR/med", "vs first [p25–p75]", "MFU",
               "peak mem", "J/item", "drift vs fp32", "meas/pred"]
    for i, col in enumerate(columns):
        t.add_column(col, justify="left" if i < 2 or i == 10 else "right")
    for v in run.variants:
        lat = v.latency_s
        assert lat is not None
        p90 = _seconds(lat.p90) + ("*" if "p90" in v.unbacked_percentiles else "")
        pred = v.predicted.ratio if v.predicted else None
        mem = v.memory_bytes.peak
        noise = {"noisy": " (noisy)", "unstable": " (unstable)"}.get(v.noise, "")
        t.add_row(
            v.name, v.step, f"{_num(v.throughput.value)} {v.throughput.unit}",
            # the noise flag is IQR/median's (robust to the few outliers that make a CV of 800%): shown beside it
            median_text(v), p90, f"{lat.cv * 100:.1f}% · {lat.iqr_over_median * 100:.1f}%{noise}",
            _ratio(v.comparison), mfu_text(v),
            fmt_bytes(mem) if mem is not None else "-", _num(v.energy_j_per_item, 4), _drift(v.accuracy),
            "-" if pred is None else fmt_ratio(pred),
        )
    return t


def bench_footnotes(run: BenchRunResult) -> list[str]:
    """The lines under the table: refusals, failures, verdicts, MFU peaks and FLOPs source, energy, noise and
    percentile notes."""
    lines = [f"refused {r.name}: {r.reason}" for r in run.refused]
    lines += [f"FAILED {f.name} ({f.phase}): {f.error}" for f in run.failed]
    lines += run.verdicts
    lines += run.notes
    lines += [f"drift ({v.key}): {v.accuracy.note}" for v in run.variants
              if has_nonfinite_output(v.accuracy) and v.accuracy is not None and v.accuracy.note]
    for v in run.variants:
        lines += _above_peak_lines(v)
    lines += _peak_lines(run)
    if run.variants:
        lines += _first_variant_lines(run)
    for v in run.variants:
        if v.input_bound is not None:
            ib = v.input_bound
            lines.append(f"{v.name}: {ib.verdict} (batch {ib.batch_time_s * 1e3:.1f} ms vs step "
                         f"{ib.step_time_s * 1e3:.1f} ms)")
    return lines


def _above_peak_lines(v: BenchResult) -> list[str]:
    """An MFU above 100 %: against a probe, the probe ran below this run (a loaded machine, or --quick); against a
    datasheet peak, the FLOPs counted or the device identified is wrong — re-probing would not change it."""
    m = v.mfu
    if m.above_peak is not None:
        return [f"⚠ MFU above 100% ({v.key}): {m.above_peak}"]
    # a result stored before above_peak: (share, its source, whether that peak is a probe's)
    shares = [(m.value, m.peak_source, "probe" in m.peak_source.lower())] if m.probe is None else \
        [(m.probe.value, m.probe.source, True)]
    if m.probe is not None and m.datasheet is not None:
        shares.append((m.datasheet.value, m.datasheet.source, False))
    lines = []
    for value, source, probed in shares:
        if value is None or value <= 1:
            continue
        fix = ("re-run `accelkit hw probe` (without --quick) on a quiet machine" if probed else
               "a datasheet peak cannot be beaten: check the counted FLOPs and the device accelkit identified")
        lines.append(f"MFU above 100% ({v.key}: {value:.1%} of {source}) — {fix}")
    return lines


def _peak_lines(run: BenchRunResult) -> list[str]:
    """Each distinct MFU peak (and probe beside a datasheet peak), once."""
    lines: list[str] = []
    for v in run.variants:
        texts = [f"MFU peak ({v.precision or '-'}): {v.mfu.peak_source}"]
        if v.mfu.datasheet is not None and v.mfu.probe is not None:
            texts.append(f"MFU vs probe ({v.precision or '-'}): {v.mfu.probe.source}")
        lines += [text for text in texts if text not in lines]
    return lines


def _first_variant_lines(run: BenchRunResult) -> list[str]:
    """What every variant shares, said once from the first: FLOPs source, energy and memory scope, the prediction,
    the timer; and across them: unbacked percentiles, noise, inconclusive comparisons."""
    v = run.variants[0]
    energy = v.energy
    lines = [f"MFU FLOPs: {v.mfu.flops_source}",
             f"energy: {energy.scope}" if energy.scope else f"energy: null — {energy.reason}",
             f"memory: {v.memory_scope}"]
    if run.peak_memory_bytes is not None:
        lines.append(f"whole run's peak memory: {fmt_bytes(run.peak_memory_bytes)} ({run.peak_memory_scope})")
    if v.predicted_reason:
        lines.append(f"predicted: {v.predicted_reason}")
    if v.predicted and v.predicted.explanation:
        lines.append(f"predicted ({v.key}): {v.predicted.explanation}")
    if any(x.unbacked_percentiles for x in run.variants):
        n = min(x.latency_s.n for x in run.variants if x.latency_s)
        lines.append(f"* not backed: p90 needs ≥ 44 samples, p99 ≥ 459 (LoadGen rule); fewest here n={n}")
    noisy = [x.key for x in run.variants if x.noise != "ok"]
    if noisy:
        lines.append("noise: IQR/median above 10% for " + ", ".join(noisy) + " — close other work or run longer")
    lines.append(f"timer: {v.timer}; ≈ marks a ratio within the run-to-run spread (no difference)")
    inconclusive: dict[str, list[str]] = {}
    for x in run.variants:
        if x.comparison is not None and x.comparison.is_inconclusive:
            inconclusive.setdefault(x.comparison.verdict, []).append(x.key)
    lines += [f"? {', '.join(keys)}: {verdict}" for verdict, keys in inconclusive.items()]
    return lines


def published_table(published: list[dict[str, Any]]) -> Table:
    t = Table(title="Published per-device figures next to ours", title_justify="left",
              header_style="bold")
    for col in ("workload", "device", "published", "what", "source", "ours (best variant)"):
        t.add_column(col)
    for p in published:
        ours = f"{_num(p['ours_best'])} {p['ours_unit']} ({p['ours_variant']})" if p["ours_best"] else "-"
        t.add_row(p["key"], p["hardware"], f"{p['value']:,} {p['unit']}", str(p["what"]), str(p["source"]), ours)
    return t
