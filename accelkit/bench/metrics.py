"""Derived metrics of a benchmark: MFU (with the peak and the FLOPs formula it rests on), accuracy drift
against fp32, and the A/B comparison of interleaved variants.

MFU = achieved model FLOP/s ÷ dense peak FLOP/s of the dtype used (PaLM, Appendix B), given twice on a catalog
GPU: against the datasheet peak and against the peak this device's matmul reached in ``hw probe``. Model FLOPs are
counted once per workload on the fp32 eager model with ``torch.utils.flop_counter.FlopCounterMode`` — on the meta
device, so the count costs no memory at any size (``accelkit.bench.reference``) — (matmuls, convolutions and
attention; optimizer and elementwise work are not model FLOPs), so recomputation (``--recompute``) never inflates
them — counting it would be HFU.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelkit.core.bench_result import DISAGREE, Accuracy, Comparison, MfuResult, PeakShare
from accelkit.core.stats import percentile
from accelkit.hardware import get_device
from accelkit.hardware.probe_quality import ProbeFigure, best_matmul

if TYPE_CHECKING:
    import torch

    from accelkit.results import ResultStore

FLOPS_SOURCE = (
    "torch.utils.flop_counter.FlopCounterMode on one fp32 eager call of the measured step on the meta device "
    "(the same shapes, no memory; matmul/conv/attention; forward + backward for training steps; recomputation not "
    "counted)"
)
FLOPS_SOURCE_ON_DEVICE = (
    "torch.utils.flop_counter.FlopCounterMode on one fp32 eager call of the measured step on this device "
    "(matmul/conv/attention; forward + backward for training steps; recomputation not counted)"
)


# ---- FLOPs -----------------------------------------------------------------------------------------
def _attention_flops(q: Sequence[int], k: Sequence[int], v: Sequence[int]) -> int:
    """QKᵀ and PV of one SDPA call: q (B, H, Tq, D), k (B, Hkv, Tk, D), v (B, Hkv, Tk, Dv). GQA heads
    count with the query heads, as the math they stand for does."""
    b, h, t_q, d = q[0], q[1], q[-2], q[-1]
    t_k, d_v = k[-2], v[-1]
    return 2 * b * h * t_q * t_k * d + 2 * b * h * t_q * t_k * d_v


def _cpu_flash_forward(query, key, value, *args, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
    return _attention_flops(query, key, value)


def _cpu_flash_backward(grad_out, query, key, value, *args, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
    return 2 * _attention_flops(query, key, value)  # dQ, dK, dV, dP: four matmuls of the forward's size


def _grouped_mm_flops(a, b, *args, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
    """``aten._grouped_mm`` (the MoE experts of transformers 5): 2 · K · (output elements), K = ``a``'s last dim.
    a (M_total, K) × b (G, K, N) → (M_total, N), rows split by ``offs``; a (G, M, K) × b (K, N_total) → (M, N_total);
    a (G, M, K) × b (G, K, N) → (G, M, N); a (M, K_total) × b (K_total, N) → (G, M, N) with each group contracting
    over its own slice of K_total (the weight gradient), so that case divides by G. The backward is two more
    ``_grouped_mm`` calls (dA, dB), counted by this same formula: 2× the forward."""
    assert out_shape is not None
    num_out = math.prod(out_shape)
    groups = out_shape[0] if len(a) == 2 and len(b) == 2 else 1
    return int(2 * a[-1] * num_out // groups)


def _grouped_mm_fallback_flops(x, weight, offs, *args, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
    """transformers' ``grouped_mm_fallback`` custom op (a loop of mm where ``_grouped_mm`` cannot run): x (S, K) ×
    weight (E, K, N) → (S, N)."""
    return int(2 * x[0] * x[1] * weight[-1])


def _grouped_mm_fallback_backward_flops(x, weight, offs, grad, *args, out_shape=None, **kwargs) -> int:  # type: ignore[no-untyped-def]
    return 2 * _grouped_mm_fallback_flops(x, weight, offs)  # dX and dW: two matmuls of the forward's size


def _flop_formulas() -> dict[Any, Callable[..., int]]:
    import torch

    aten = torch.ops.aten
    custom: dict[Any, Callable[..., int]] = {
        # torch's counter has no formula for the CPU flash-attention kernel that SDPA picks on a CPU
        aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_forward,
        aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_backward,
        # nor for grouped GEMMs: without these a Mixtral-style model counted attention and the router only
        aten._grouped_mm: _grouped_mm_flops,
    }
    # registered when transformers' MoE integration is imported (a model that has one imports it first)
    fallback = getattr(torch.ops, "transformers", None)
    # each looked up on its own: transformers 5.17 (the GPU image's) registers the forward op only, its backward
    # running as plain mm calls the counter sees anyway; asking for the backward op raised AttributeError there and
    # failed every FLOP count once an MoE model had been imported
    for name, formula in (("grouped_mm_fallback", _grouped_mm_fallback_flops),
                          ("grouped_mm_fallback_backward", _grouped_mm_fallback_backward_flops)):
        if fallback is not None and hasattr(fallback, name):
            custom[getattr(fallback, name)] = formula
    return custom


def meta_grouped_mm() -> Any:
    """A dispatch mode that runs ``aten._grouped_mm`` on meta tensors of any dtype. Its meta kernel copies the CUDA
    kernel's bf16-only check ("Expected inputs of BF16 type"), so the fp32 count of an MoE model failed on the meta
    device; the CPU kernel takes fp32, and the output's shape does not depend on the dtype. Other calls pass through."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class MetaGroupedMM(TorchDispatchMode):  # type: ignore[no-untyped-call]
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            kwargs = kwargs or {}
            if func is torch.ops.aten._grouped_mm.default and args[0].device.type == "meta" \
                    and args[0].dtype != torch.bfloat16:
                a, b, *rest = args
                out_dtype = kwargs.pop("out_dtype", None) or a.dtype
                return func(a.to(torch.bfloat16), b.to(torch.bfloat16), *rest, **kwargs).to(out_dtype)
            return func(*args, **kwargs)

    return MetaGroupedMM()  # type: ignore[no-untyped-call]


def flop_counter() -> Any:
    """A ``FlopCounterMode`` with the formulas torch's lacks (CPU flash attention, grouped GEMMs)."""
    from torch.utils.flop_counter import FlopCounterMode

    return FlopCounterMode(display=False, custom_mapping=_flop_formulas())


def count_flops(fn: Callable[[], object], *, calls: int = 1) -> float:
    """Model FLOPs per call of ``fn``, averaged over ``calls`` calls (a decode step's context grows)."""
    # the meta mode outside the counter: the counter sees each op first, then the meta stand-in runs it
    with meta_grouped_mm(), flop_counter() as counter:
        for _ in range(calls):
            fn()
    return float(counter.get_total_flops()) / calls


# ---- MFU ---------------------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Peak:
    """A dense peak in FLOP/s and where it came from, or why there is none."""

    flops: float | None
    source: str


def catalog_peak(catalog_name: str, dtype: str) -> Peak:
    spec = get_device(catalog_name)
    key = "int8" if dtype == "int8" else dtype
    value = spec.peak(key)
    if value is None:
        return Peak(None, f"the catalog lists no dense {key} peak for {spec.name}")
    return Peak(value, f"catalog: {spec.name} dense {key} ({spec.status}; {spec.source})")


def probe_peak(store: ResultStore, hardware: str, dtype: str) -> tuple[Peak, int | None]:
    """The ``hw probe`` matmul peak for ``dtype`` on ``hardware``: the best full probe stored — a quick one only when
    no full one is, a smaller one only when neither is, the source saying so (``accelkit.hardware.probe_quality``).
    (Peak(None, why), None) if none."""
    peak, best = stored_probe_peak(store, hardware, dtype)
    return peak, None if best is None else best.id


def stored_probe_peak(store: ResultStore, hardware: str, dtype: str) -> tuple[Peak, ProbeFigure | None]:
    """``probe_peak``, with the stored figure it rests on (None when there is none) instead of its id."""
    probes = store.query(kind="probe", hardware=hardware, limit=200)
    if not probes:
        return Peak(None, f"no `accelkit hw probe` result for {hardware!r} in the store"), None
    best = best_matmul(probes, dtype)
    if best is None:
        return Peak(None, f"no stored probe of {hardware!r} measured a {dtype} matmul"), None
    flops, figure = matmul_figure(best.stored.result.details["matmul"][dtype], dtype)
    if best.quality == "full":
        of = f", the best of {best.num_full} full probes" if best.num_full > 1 else ""
        why = f" (a full probe{of})"
    elif best.quality == "quick":  # the peak may be too low, so the MFU it gives may read high: said where it is
        why = (" (a --quick probe, the best stored: no full probe of this dtype is, so an MFU against it can read "
               f"high; `accelkit hw probe --dtype {dtype}` on a quiet machine measures the peak)")
    else:
        why = (f" — {best.why}, so this MFU reads high; no probe at the default size is stored: run "
               f"`accelkit hw probe` without --size for the peak")
    return Peak(
        flops, f"measured: `accelkit hw probe` result {best.id} ({best.stored.result.created_at}), {figure}{why}",
    ), best


def matmul_figure(matmul: dict[str, Any], dtype: str) -> tuple[float, str]:
    """A probe's ``details["matmul"][dtype]`` as (FLOP/s, 'median {dtype} matmul N×N = … TFLOP/s')."""
    tflops, size = float(matmul["tflops"]), matmul.get("size")
    return tflops * 1e12, f"median {dtype} matmul {size}×{size} = {tflops:.4g} TFLOP/s"  # 0.0011, not 0.001


def peak_share(flops_per_item: float | None, items_per_s: float | None, peak: Peak) -> PeakShare:
    value = flops_per_item * items_per_s / peak.flops if flops_per_item and items_per_s and peak.flops else None
    return PeakShare(value=value, peak_flops=peak.flops, source=peak.source)


def mfu_result(
    flops_per_item: float | None, items_per_s: float | None, peak: Peak, flops_source: str, *,
    datasheet: Peak | None = None, probe: Peak | None = None,
    analytic_flops_per_item: float | None = None, analytic_formula: str | None = None,
) -> MfuResult:
    """The typed ``mfu``: the value against ``peak`` (the datasheet on a catalog device, else the probe), the
    FLOPs and their source, and — where there are both — MFU against the datasheet and against the probe."""
    main = peak_share(flops_per_item, items_per_s, peak)
    shares = [main] + [peak_share(flops_per_item, items_per_s, p) for p in (datasheet, probe) if p is not None]
    return MfuResult(
        above_peak=above_peak(shares),
        value=main.value,
        achieved_flops=flops_per_item * items_per_s if flops_per_item and items_per_s else None,
        peak_flops=peak.flops, peak_source=peak.source, flops_per_item=flops_per_item, flops_source=flops_source,
        analytic_flops_per_item=analytic_flops_per_item, analytic_formula=analytic_formula,
        datasheet=None if datasheet is None else peak_share(flops_per_item, items_per_s, datasheet),
        probe=None if probe is None else peak_share(flops_per_item, items_per_s, probe),
    )


def above_peak(shares: Sequence[PeakShare]) -> str | None:
    """Why an MFU above 1 cannot stand, or None when none of ``shares`` is above 1. Against a probe: the probe ran
    slower than this workload's own matmuls (--quick, a smaller side, a busy machine, a dtype without a fast kernel
    where the workload's small matmuls stay in cache), so it is no peak. Against a datasheet: the counted FLOPs or
    the device accelkit identified are wrong; re-probing changes nothing."""
    reasons: dict[str, None] = {}
    for share in shares:
        if share.value is None or share.value <= 1 or share.peak_flops is None:
            continue
        of = f"{share.value:.1%} of {share.peak_flops / 1e12:.4g} TFLOP/s"
        if share.source.startswith("measured"):
            reasons[f"MFU {of} (a `hw probe` figure): that probe ran slower than this workload's own matmuls, so it "
                    "is no peak — run a full `accelkit hw probe` (without --quick or --size) for this dtype on a "
                    "quiet machine; MFU then divides by the best full probe"] = None
        else:
            reasons[f"MFU {of} (a datasheet peak): no run beats its datasheet, so the counted FLOPs or the device "
                    "accelkit identified are wrong"] = None
    return "; ".join(reasons) or None


# ---- accuracy drift --------------------------------------------------------------------------------
def drift(reference: torch.Tensor, output: torch.Tensor, *, logits: bool | None = None) -> Accuracy:
    """How far ``output`` is from the fp32 ``reference`` on the same slice (``accelkit.recipes.gates.drift``:
    max abs error, cosine, SQNR in dB — null with ``identical: true`` when there is no error, so the JSON
    stays strict — and top-1 agreement for outputs whose last dim is a class/vocab axis: ``logits``, a workload's
    ``output_is_logits``; None guesses from the shape). An output with inf/NaN (an fp16 overflow) has no drift
    figure: all are None, with a note saying why, not an exception — the variant is measured and fails its gate."""
    # lazy: recipes import torch, and the CLI loads this module at start-up
    from accelkit.recipes.gates import drift as output_drift

    d = output_drift(reference, output.reshape(reference.shape), logits=logits)
    rows = int(reference.shape[0]) if reference.dim() else None
    if not d.is_finite:  # an overflow is an accuracy failure, measured; the variant's timing stands
        where = (f"the output has inf/NaN ({d.num_nonfinite} of {output.numel()} values)" if d.num_nonfinite
                 else f"the fp32 reference has inf/NaN ({d.num_nonfinite_reference} of {reference.numel()} values)")
        return Accuracy(max_abs_error=None, cosine=None, sqnr_db=None, identical=False, top1_agreement=None,
                        rows=rows, note=f"{where}: no drift figure is finite, so none is recorded and any accuracy "
                                        "gate fails")
    return Accuracy(max_abs_error=d.max_abs_error, cosine=d.cosine, sqnr_db=d.sqnr_db, identical=d.identical,
                    top1_agreement=d.top1_agreement, rows=rows)


# ---- A/B comparison ----------------------------------------------------------------------------------
#: the fewest pairs (interleaved) or blocks per variant (one after another) a firm faster/slower verdict rests on.
#: The verdict asks whether p25–p75 excludes 1; with numpy's linear interpolation p25 sits at position (n − 1)/4 of
#: the sorted ratios, which first lands on the second-smallest at n = 5: with fewer, a quartile is drawn from the
#: extreme pair itself, and with one pair there is no spread at all (p25 = p75 = the ratio).
MIN_PAIRS = 5


def _blocks(n: int) -> str:
    return f"{n} block{'' if n == 1 else 's'}"


def _too_few(counted: str) -> str:
    return (f"inconclusive ({counted}; a spread needs at least {MIN_PAIRS}: a longer --min-time or a larger "
            f"--min-iterations gives more rounds, and --max-iterations, if set, at least {MIN_PAIRS})")


@dataclass(frozen=True, slots=True)
class Totals:
    """The figures printed beside a comparison's ratio: a variant's total throughput (items ÷ measured time) and
    its median latency per iteration of ``items`` items."""

    throughput: float | None
    median_s: float | None
    items: int


def _speedups(base: Totals, other: Totals) -> list[tuple[str, float]]:
    """(name, other ÷ base as a speed-up) of each figure both have: total throughput, and median latency per item
    (an iteration's items may differ between variants, e.g. a data loader's batch)."""
    out = []
    if base.throughput and other.throughput:
        out.append(("total throughput", other.throughput / base.throughput))
    if base.median_s and other.median_s and base.items and other.items:
        out.append(("median latency", (base.median_s / base.items) / (other.median_s / other.items)))
    return out


def _disagreement(ratio: float, lo: float | None, hi: float | None, verdict: str, base: Totals | None,
                  other: Totals | None) -> str | None:
    """Why the printed figures do not tell the verdict's story, or None when they do. A firm verdict (faster,
    slower) needs the total throughput and the median latency on its side of 1; "no difference" needs them not
    both past the spread on one side. A loaded machine is the usual cause: a CPU hog that runs during some blocks
    and not others weighs differently in a median of pairs, a total and a median of iterations — `make demo`
    printed "bf16 fastest at 1.77× [1.75–1.86]" beside throughputs 288.7 vs 324.1 and medians 252 vs 26.1 ms."""
    if base is None or other is None:
        return None
    figures = _speedups(base, other)
    if verdict in ("faster", "slower"):
        against = [(n, r) for n, r in figures if (r > 1) != (ratio > 1) or r == 1]
    elif verdict.startswith("no difference") and lo is not None and hi is not None and len(figures) == 2:
        above, below = all(r > hi for _, r in figures), all(r < lo for _, r in figures)
        against = figures if above or below else []
    else:
        return None
    if not against:
        return None
    said = f"{'faster' if ratio > 1 else 'slower'} at {ratio:.2f}×" if verdict in ("faster", "slower") else \
        f"no difference ({ratio:.2f}× [{lo:.2f}–{hi:.2f}])"
    others = " and ".join(f"{n} gives {r:.2f}×" for n, r in against)
    return (f"{DISAGREE}: the median of pairs of blocks says {said}, but {others} — the load on this machine changed "
            "during the run; re-run it on a quiet machine, or longer (--min-time) so the rounds even it out)")


def compare(baseline: str, base_rates: Sequence[float], rates: Sequence[float], *, interleaved: bool,
            base_totals: Totals | None = None, totals: Totals | None = None) -> Comparison:
    """Throughput ratio of a variant to the baseline. Interleaved: one ratio per round (pair of blocks),
    reported as median with p25–p75; a ratio whose spread includes 1 is "no difference". Sequential:
    ratio of medians with the spread of the two sets of blocks. Fewer than ``MIN_PAIRS`` pairs (or blocks of
    either variant) is "inconclusive", with the count and how to get more: no spread to call it on. Given the
    figures printed beside the ratio (``base_totals``, ``totals``), a verdict they contradict is "inconclusive
    (the figures disagree: …)" with which figure says what (:func:`_disagreement`)."""
    if not base_rates or not rates:
        return Comparison(baseline=baseline, verdict="not measured", interleaved=interleaved)
    lo: float | None
    hi: float | None
    if interleaved:
        pairs = [r / b for r, b in zip(rates, base_rates, strict=False) if b > 0]
        xs = sorted(pairs)
        ratio, lo, hi = percentile(xs, 50), percentile(xs, 25), percentile(xs, 75)
        n, counted = len(pairs), f"{len(pairs)} pair{'' if len(pairs) == 1 else 's'} of blocks"
    else:
        b, r = sorted(base_rates), sorted(rates)
        ratio = percentile(r, 50) / percentile(b, 50)
        lo = percentile(r, 25) / percentile(b, 75)
        hi = percentile(r, 75) / percentile(b, 25)
        pairs = []
        n, counted = min(len(b), len(r)), f"{_blocks(len(b))} of {baseline} and {len(r)} of this variant"
    if n < 2:  # a single ratio has no spread: p25 = p75 = the ratio would claim a precision there is none of
        lo = hi = None
    if n < MIN_PAIRS:
        verdict = _too_few(counted)
    elif lo is not None and hi is not None and lo <= 1.0 <= hi:
        verdict = "no difference (within the run-to-run spread)"
    else:
        verdict = "faster" if ratio > 1 else "slower"
    verdict = _disagreement(ratio, lo, hi, verdict, base_totals, totals) or verdict
    return Comparison(baseline=baseline, ratio=ratio, p25=lo, p75=hi, pairs=len(pairs), interleaved=interleaved,
                      verdict=verdict)
