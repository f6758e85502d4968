"""The typed result of a benchmark: one :class:`BenchResult` per (variant, step), one :class:`BenchRunResult` per
run. Built in one place (``accelkit.bench.record``; the distributed bench builds the same type from its ranks),
stored as a ``Measurement`` by :meth:`BenchResult.to_measurement`, read back by :meth:`BenchResult.from_measurement`
(the report and ``results export`` read it typed). ``to_json()`` is the document ``accelkit bench --json`` prints;
its field names are those docs/bench.md documents.

Like optimum-benchmark's typed reports: every figure carries its unit in its name or a sibling field, and every
null carries the reason next to it.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Literal

from accelkit.core.recipe import Recipe
from accelkit.core.result import Measurement
from accelkit.core.spec import Spec, spec_field
from accelkit.core.stats import Stats
from accelkit.core.workload import Workload

__all__ = [
    "Accuracy", "BenchResult", "BenchRunResult", "Comparison", "Energy", "Failure", "InputBound", "MemoryUse",
    "MfuResult", "OutputGate", "PeakShare", "PhaseTime", "Phases", "Prediction", "Refusal", "Throughput",
    "comparison_against", "finite", "verdicts",
]


def finite(value: float | None) -> float | None:
    """``value``, or None when it is not a finite number (a NaN loss is an observation, but not JSON)."""
    return value if value is not None and math.isfinite(value) else None


@dataclass(frozen=True, slots=True, kw_only=True)
class Phases(Spec):
    """Time spent in each phase of docs/methodology.md, recorded separately."""

    load_s: float | None = spec_field(None, min=0.0, doc="Building the model and applying the variant.")
    first_call_s: float | None = spec_field(None, min=0.0, doc="The cold first call (includes any compilation).")
    warmup_iterations: int = spec_field(0, min=0, doc="Warm-up iterations run and discarded.")
    warmup_s: float = spec_field(0.0, min=0.0, doc="Warm-up wall time.")
    measured_iterations: int = spec_field(0, min=0, doc="Iterations in the measured steady state.")
    measured_s: float = spec_field(0.0, min=0.0, doc="Wall time of the measured blocks.")
    blocks: int = spec_field(0, min=0, doc="Measured blocks (rounds of an interleaved run).")


@dataclass(frozen=True, slots=True, kw_only=True)
class Throughput(Spec):
    value: float | None = spec_field(None, min=0.0, doc="Items ÷ total measured wall time (not a mean of rates).")
    unit: str = spec_field("items/s", doc="'samples/s', 'images/s' or 'tokens/s'.")
    per_device: float | None = spec_field(None, min=0.0, doc="Distributed runs: value ÷ world size.")


@dataclass(frozen=True, slots=True, kw_only=True)
class PeakShare(Spec):
    """MFU against one peak: the datasheet's dense peak, or what this device's matmul reached in `hw probe`."""

    value: float | None = spec_field(None, min=0.0, doc="Achieved model FLOP/s ÷ this peak; None without a peak.")
    peak_flops: float | None = spec_field(None, min=0.0, doc="The peak, FLOP/s.")
    source: str = spec_field(doc="Where the peak comes from, or why there is none.")


@dataclass(frozen=True, slots=True, kw_only=True)
class MfuResult(Spec):
    """Model FLOPs utilisation with the FLOPs and the peak it rests on."""

    value: float | None = spec_field(None, min=0.0, doc="MFU against peak_flops (datasheet on a catalog device, else probe).")
    achieved_flops: float | None = spec_field(None, min=0.0, doc="Model FLOP/s achieved.")
    peak_flops: float | None = spec_field(None, min=0.0, doc="The dense peak of the dtype used, FLOP/s.")
    peak_source: str = spec_field("", doc="Where peak_flops comes from.")
    flops_per_item: float | None = spec_field(None, min=0.0, doc="Model FLOPs per item (sample, image, token).")
    flops_source: str = spec_field("", doc="How the FLOPs were counted.")
    analytic_flops_per_item: float | None = spec_field(None, min=0.0, doc="The closed-form figure, where there is one.")
    analytic_formula: str | None = spec_field(None, doc="Its formula.")
    datasheet: PeakShare | None = spec_field(None, doc="MFU against the catalog's dense datasheet peak (GPUs).")
    probe: PeakShare | None = spec_field(None, doc="MFU against the `hw probe` matmul peak of the same dtype.")
    above_peak: str | None = spec_field(
        None, doc="Set when an MFU here (value, datasheet or probe) exceeds 1 — no run beats its dense peak, so the "
                  "peak or the FLOPs are wrong: which, and what to do. None when every MFU is at most 1.")


@dataclass(frozen=True, slots=True, kw_only=True)
class MemoryUse(Spec):
    peak: int | None = spec_field(None, min=0, doc="Resident after load + the peak increase during a block, bytes.")
    load: int | None = spec_field(None, min=0, doc="Resident bytes the load added.")
    step_peak_increase: int | None = spec_field(None, min=0, doc="Peak increase during a measured block, bytes.")
    reserved_peak: int | None = spec_field(None, min=0, doc="CUDA: the caching allocator's reserved peak, bytes.")
    model_states: int | None = spec_field(None, min=0, doc="Distributed: parameters + gradients + optimizer per rank.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Energy(Spec):
    j_per_item: float | None = spec_field(None, min=0.0, doc="Joules per item; None with the reason.")
    items_per_j: float | None = spec_field(None, min=0.0, doc="Items per joule.")
    scope: str | None = spec_field(None, doc="What the counter covers (GPU board, CPU package).")
    reason: str | None = spec_field(None, doc="Why energy is null.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Accuracy(Spec):
    """Output drift against the fp32 eager reference on the same fixed slice of the batch."""

    max_abs_error: float | None = spec_field(None, doc="max |output − reference|.")
    cosine: float | None = spec_field(None, doc="Cosine similarity of the flattened outputs.")
    sqnr_db: float | None = spec_field(None, doc="10·log10(‖ref‖² / ‖out − ref‖²); None when identical.")
    identical: bool | None = spec_field(None, doc="Bit-for-bit equal outputs.")
    top1_agreement: float | None = spec_field(
        None, doc="Fraction of positions with the same argmax (logits), over the positions whose reference top-1 "
                  "leads clearly (> 0.05 σ of its logits); None for outputs that are not logits or with no clear one.")
    rows: int | None = spec_field(None, min=1, doc="Rows of the batch compared (a small fixed slice).")
    note: str | None = spec_field(None, doc="Why there is no drift figure.")


@dataclass(frozen=True, slots=True, kw_only=True)
class OutputGate(Spec):
    """A workload's own pass/fail rule on its output against the fp32 reference (text-to-image: the final latents
    and the decoded image of the same seeded call), with the figures and thresholds it rests on."""

    criterion: str = spec_field(doc="The rule, in words, with its thresholds.")
    passed: bool | None = spec_field(None, doc="Whether the output meets it; None when there is nothing to compare.")
    figures: dict[str, float | None] = spec_field(default_factory=dict, doc="The measured figures, by name.")
    thresholds: dict[str, float] = spec_field(default_factory=dict, doc="The bound each figure must meet, by name.")
    note: str | None = spec_field(None, doc="Why a figure is missing, or the gate failed.")


@dataclass(frozen=True, slots=True, kw_only=True)
class PhaseTime(Spec):
    """One phase inside a measured call (text-to-image: text encoders, denoiser, VAE decode, the rest), timed in the
    real call, every call after the first: where the time goes."""

    phase: str = spec_field(doc="The phase: 'text encoders', 'denoiser', 'vae decode' or 'other'.")
    calls: int = spec_field(0, min=0, doc="Calls of the phase's modules per measured call (the denoiser: steps).")
    median_s: float | None = spec_field(None, min=0.0, doc="Median seconds the phase takes per measured call.")
    share: float | None = spec_field(None, min=0.0, doc="The phase's seconds over the measured calls ÷ those calls' "
                                     "seconds ('other' the rest: the shares add to 1).")
    call_median_s: float | None = spec_field(None, min=0.0, doc="Median seconds of one call of it (one step).")
    per_step_s: list[float] | None = spec_field(None, doc="The denoiser: median seconds of each step, in order.")
    mfu: MfuResult | None = spec_field(
        None, doc="The phase's model FLOPs per image (FlopCounterMode, read at its hooks: its FLOPs per measured call ÷ "
                  "the images per call, as the step's flops_per_item), at the call's rate (FLOPs per call over "
                  "median_s), against the datasheet and the probe.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Prediction(Spec):
    """The planner's figure for the same workload and recipe, in the step's own unit."""

    estimate_id: int | None = spec_field(None, doc="The stored Estimate's id.")
    throughput: float | None = spec_field(None, min=0.0, doc="Predicted items/s of this step, in `unit`.")
    unit: str = spec_field("items/s", doc="The measured step's unit (samples/s, images/s, tokens/s).")
    mfu: float | None = spec_field(None, min=0.0, doc="The planner's MFU.")
    ratio: float | None = spec_field(None, min=0.0, doc="Measured ÷ predicted throughput.")
    seconds_per_call: float | None = spec_field(None, min=0.0, doc="Predicted seconds per call of the step.")
    bottleneck: str | None = spec_field(None, doc="The planner's bottleneck (compute, memory, …).")
    note: str | None = spec_field(None, doc="Why there is no predicted throughput.")
    explanation: str | None = spec_field(None, doc="What the ratio says, in one sentence.")


#: how a comparison's verdict begins when the figures printed beside it contradict it (accelkit.bench.metrics.compare):
#: ``verdicts`` then names no winner at all
DISAGREE = "inconclusive (the figures disagree"


@dataclass(frozen=True, slots=True, kw_only=True)
class Comparison(Spec):
    """Throughput against the run's first variant of the same step."""

    baseline: str = spec_field(doc="The baseline variant.")
    ratio: float | None = spec_field(None, min=0.0, doc="Throughput ÷ the baseline's.")
    p25: float | None = spec_field(None, min=0.0, doc="25th percentile of the per-round ratios (or the spread).")
    p75: float | None = spec_field(None, min=0.0, doc="75th percentile.")
    pairs: int = spec_field(0, min=0, doc="Interleaved rounds the ratio rests on.")
    interleaved: bool | None = spec_field(None, doc="Whether the variants ran in rounds.")
    verdict: str = spec_field(
        "baseline", doc="baseline, faster, slower, no difference (…), inconclusive (N pairs of blocks; …: fewer than "
                        "5, no spread to call it on, and how to get more) or not measured.")

    @property
    def is_inconclusive(self) -> bool:
        """Too few pairs of blocks for a verdict: the ratio is a reading, not a result."""
        return self.verdict.startswith("inconclusive")


@dataclass(frozen=True, slots=True, kw_only=True)
class InputBound(Spec):
    step_time_s: float = spec_field(min=0.0, doc="The training step time given (--step-time).")
    batch_time_s: float = spec_field(
        min=0.0, doc="The loader's wall seconds per batch (measured time ÷ batches; not the median next(), which "
                     "prefetching hides).")
    headroom: float | None = spec_field(None, min=0.0, doc="step ÷ batch time; below 1 the step waits for data.")
    verdict: str = spec_field(doc="input-bound or not.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Refusal(Spec):
    name: str = spec_field(doc="The variant.")
    reason: str = spec_field(doc="Why it cannot run here, and what to change.")


@dataclass(frozen=True, slots=True, kw_only=True)
class Failure(Spec):
    name: str = spec_field(doc="The variant that raised.")
    phase: str = spec_field(doc="The phase it raised in (load, first call, warm-up, measure).")
    error: str = spec_field(doc="The exception, 'Type: message'.")


#: fields of a BenchResult that only some runs have; ``to_json`` leaves them out when they are empty
_OPTIONAL = ("input_bound", "loss_first_steps", "world_size", "num_nodes", "layout", "backend", "memory_check",
             "ranks", "grad_comm", "quality", "gate", "phase_breakdown")


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchResult(Spec):
    """What was measured for one (variant, step)."""

    name: str = spec_field(doc="The variant, e.g. 'bf16+compile'.")
    step: str = spec_field(doc="The timed step: forward, train step, prefill, decode, next batch.")
    precision: str | None = spec_field(None, doc="The variant's precision (None for loader settings).")
    options: dict[str, Any] = spec_field(default_factory=dict, doc="compile / recompute / channels_last / settings.")
    recipe: Recipe | None = spec_field(None, doc="The Recipe this variant ran (None for the data loader).")
    recipe_notes: list[str] = spec_field(
        default_factory=list, doc="What the recipe did to the model, one line per technique (e.g. the share of the "
                                  "matmul weights an fp8 or int8 conversion reached).")
    phases: Phases = spec_field(default_factory=Phases, doc="Phase timings.")
    latency_s: Stats | None = spec_field(None, doc="Per-iteration latency statistics, seconds.")
    latency_name: str = spec_field("step latency", doc="What one iteration is: TTFT, per-token latency …")
    unbacked_percentiles: list[str] = spec_field(default_factory=list, doc="Percentiles too few samples back.")
    noise: str = spec_field("ok", doc="ok, noisy (IQR/median > 10%) or unstable (> 25%).")
    throughput: Throughput = spec_field(default_factory=Throughput, doc="Items per second.")
    mfu: MfuResult = spec_field(default_factory=MfuResult, doc="Model FLOPs utilisation.")
    memory_bytes: MemoryUse = spec_field(default_factory=MemoryUse, doc="Memory, bytes.")
    memory_scope: str | None = spec_field(None, doc="What the memory figures cover, or why there are none.")
    energy_j_per_item: float | None = spec_field(None, min=0.0, doc="= energy.j_per_item.")
    energy: Energy = spec_field(default_factory=Energy, doc="Energy per item with its scope.")
    accuracy: Accuracy | None = spec_field(None, doc="Drift against fp32; None for an input pipeline.")
    loss_first_steps: list[float | None] | None = spec_field(
        None, doc="Training: the loss of the first steps (first call + warm-up) on the fixed batch.")
    predicted: Prediction | None = spec_field(None, doc="The planner's figure; None with predicted_reason.")
    predicted_reason: str | None = spec_field(None, doc="Why there is no prediction.")
    comparison: Comparison | None = spec_field(None, doc="Against the first variant of the run.")
    timer: str = spec_field("perf_counter_ns", doc="cuda events or perf_counter_ns.")
    result_id: int | None = spec_field(None, doc="The stored Measurement's id.")
    input_bound: InputBound | None = spec_field(None, doc="Data loader: would the given step wait for data?")
    world_size: int | None = spec_field(None, min=1, doc="Distributed: ranks.")
    num_nodes: int | None = spec_field(None, min=1, doc="Distributed: nodes.")
    layout: str | None = spec_field(None, doc="Distributed: e.g. 'dp2 zero3 (FSDP2)'.")
    backend: str | None = spec_field(None, doc="Distributed: gloo or nccl.")
    memory_check: dict[str, Any] | None = spec_field(None, doc="Distributed: model states per rank vs the planner.")
    ranks: list[dict[str, Any]] | None = spec_field(None, doc="Distributed: per-rank detail.")
    grad_comm: dict[str, Any] | None = spec_field(
        None, doc="Distributed with --grad-compression: gradient bytes per step per rank, counted, vs the planner.")
    quality: dict[str, Any] | None = spec_field(
        None, doc="Distributed with --grad-compression: the loss gate against the uncompressed run.")
    gate: OutputGate | None = spec_field(
        None, doc="The workload's own accuracy gate against fp32 (text-to-image: latents and decoded image).")
    phase_breakdown: list[PhaseTime] | None = spec_field(
        None, doc="Phases inside one measured call (text-to-image: text encoders, denoiser steps, VAE decode).")

    @property
    def key(self) -> str:
        return f"{self.name} · {self.step}"

    def to_json(self) -> dict[str, Any]:
        """The entry of ``accelkit bench --json`` (optional fields only where the run has them)."""
        data = self.to_dict()
        for name in _OPTIONAL:
            if data[name] is None:
                del data[name]
        return data

    def to_measurement(
        self, *, label: str, workload: str, config: dict[str, Any], device: str, hardware: str,
        environment: dict[str, Any], spec: Workload | None, samples: dict[str, list[float]],
        num_devices: int = 1, memory: dict[str, int] | None = None, extra: dict[str, Any] | None = None,
    ) -> Measurement:
        """This result as the store keeps it: the headline fields typed, the rest under ``details``."""
        details = {"workload": workload, "label": label, "config": config, "device": device, **(extra or {}),
                   **{k: v for k, v in self.to_json().items() if k != "latency_s"}}
        name = f"{label} · {self.name} · {self.step}" + (f" · {self.layout}" if self.layout else "")
        return Measurement(
            kind="bench", name=name, workload=spec, hardware=hardware, num_devices=num_devices,
            throughput=self.throughput.value, throughput_unit=self.throughput.unit, latency_s=self.latency_s,
            memory_bytes=memory if memory is not None else {
                k: v for k, v in self.memory_bytes.to_dict().items() if isinstance(v, int)},
            mfu=self.mfu.value, energy_j_per_item=self.energy_j_per_item, details=details,
            environment=environment, samples=samples,
        )

    @classmethod
    def from_measurement(cls, measurement: Measurement) -> BenchResult:
        """Read a stored bench row back, typed. Keys this version does not know (rows written by another
        version) are dropped; the ones it knows are validated."""
        data = _known(cls, measurement.details)
        data["latency_s"] = measurement.latency_s
        data.setdefault("name", measurement.name)
        data.setdefault("step", "")
        nested: dict[str, type[Spec]] = {"phases": Phases, "throughput": Throughput, "mfu": MfuResult,
                                         "memory_bytes": MemoryUse, "energy": Energy, "accuracy": Accuracy,
                                         "predicted": Prediction, "comparison": Comparison, "gate": OutputGate}
        for name, tp in nested.items():
            if isinstance(data.get(name), dict):
                data[name] = _known(tp, data[name])
        return cls.from_dict(data)


def _known(cls: type[Spec], data: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``data`` that are fields of ``cls``."""
    names = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]  # every Spec is a dataclass
    return {k: v for k, v in data.items() if k in names}


_RUN_OPTIONAL = ("world_size", "num_nodes", "layout", "zero", "ranks", "store_error", "stopped_by", "unstored_results")


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchRunResult(Spec):
    """One `accelkit bench` run of one workload: every variant's results, and what did not run."""

    workload: str = spec_field(doc="The workload's name.")
    label: str = spec_field(doc="Short label with the shapes.")
    config: dict[str, Any] = spec_field(default_factory=dict, doc="The workload config.")
    device: str = spec_field(doc="cpu or cuda:N.")
    hardware: str = spec_field(doc="The catalog name, or the detected device.")
    run_id: str = spec_field(doc="Groups the stored rows of this run.")
    interrupted: bool = spec_field(False, doc="Stopped by Ctrl-C (SIGINT) or SIGTERM; the finished variants are kept.")
    stopped_by: str | None = spec_field(None, doc="The signal that stopped it, SIGINT or SIGTERM (absent when none did).")
    unfinished: list[str] = spec_field(default_factory=list, doc="Variants not finished when interrupted.")
    refused: list[Refusal] = spec_field(default_factory=list, doc="Variants this device cannot run, with why.")
    failed: list[Failure] = spec_field(default_factory=list, doc="Variants that raised, with the error.")
    notes: list[str] = spec_field(default_factory=list, doc="What the reader should know.")
    verdicts: list[str] = spec_field(default_factory=list, doc="Which variant won each step, and by how much.")
    variants: list[BenchResult] = spec_field(default_factory=list, doc="One entry per (variant, step).")
    environment: dict[str, Any] = spec_field(default_factory=dict, doc="Versions, device, threads, the bench config.")
    result_ids: list[int] = spec_field(default_factory=list, doc="Stored rows (estimates and measurements).")
    peak_memory_bytes: int | None = spec_field(
        None, min=0, doc="The whole run's peak (reference pass included), bytes; see peak_memory_scope.")
    peak_memory_scope: str | None = spec_field(None, doc="What peak_memory_bytes covers.")
    world_size: int | None = spec_field(None, min=1, doc="Distributed: ranks.")
    num_nodes: int | None = spec_field(None, min=1, doc="Distributed: nodes.")
    layout: str | None = spec_field(None, doc="Distributed: the layout.")
    zero: int | None = spec_field(None, min=0, max=3, doc="Distributed: the ZeRO stage.")
    ranks: list[dict[str, Any]] | None = spec_field(None, doc="Distributed: per-rank detail of the first variant.")
    store_error: str | None = spec_field(
        None, doc="Why the results store could not take this run's results (absent when it could): the entries "
                  "from the failed write on have no result_id, and no later write was tried.")
    unstored_results: list[dict[str, Any]] | None = spec_field(
        None, doc="With store_error: the results that were not stored (estimates and measurements, raw samples "
                  "included), as `accelkit results export` writes them — `accelkit results import` takes the "
                  "printed document and stores them.")

    @property
    def status(self) -> Literal["ok", "failed", "interrupted"]:
        return "interrupted" if self.interrupted else ("failed" if self.failed else "ok")

    def to_json(self) -> dict[str, Any]:
        data = self.to_dict()
        data["variants"] = [v.to_json() for v in self.variants]
        for name in _RUN_OPTIONAL:
            if data[name] is None:
                del data[name]
        return data


def comparison_against(entry: BenchResult, base: BenchResult) -> Comparison | None:
    """``entry``'s stored comparison when it was made against ``base`` — in the same bench, so interleaved or with
    a spread — else None. Rows of separate benches (each point of a sweep is its own bench and its own baseline,
    {baseline: itself, ratio: 1.0}) share a run id but were never compared: their ratio is the throughputs'."""
    cmp = entry.comparison
    if cmp is None or cmp.ratio is None or cmp.baseline != base.name:
        return None
    if cmp.verdict == "baseline" and entry is not base:  # its own baseline, another row of the same name
        return None
    return cmp


def _ratio(entry: BenchResult, base: BenchResult) -> float:
    """``entry`` against the baseline: the comparison's ratio (the median over pairs of blocks — robust to a few
    slow blocks) when it was made against ``base``, else the throughputs' (total items ÷ total time)."""
    if entry is base:
        return 1.0
    cmp = comparison_against(entry, base)
    if cmp is not None and cmp.ratio is not None:
        return cmp.ratio
    return (entry.throughput.value or 0.0) / (base.throughput.value or 1.0)


def _within_spread(entry: BenchResult, base: BenchResult) -> bool:
    """Whether ``entry``'s comparison with ``base`` found no difference (the ratio is within the noise)."""
    cmp = comparison_against(entry, base)
    return cmp is not None and cmp.verdict.startswith("no difference")


def _ratio_text(entry: BenchResult, base: BenchResult, *, named: bool = False) -> str:
    """'1.31× [1.27–1.35]' against ``base`` (the interleaved comparison when there is one), 'fp32' after it when
    ``named``, then ', within the run-to-run spread' when the comparison found no difference. Without a comparison
    against ``base`` the throughputs' ratio, said to be one: it has no spread."""
    cmp = comparison_against(entry, base)
    name = f" {base.name}" if named else ""
    if cmp is not None and cmp.ratio is not None:
        spread = f" [{cmp.p25:.2f}–{cmp.p75:.2f}]" if cmp.p25 is not None and cmp.p75 is not None else ""
        same = ", within the run-to-run spread" if _within_spread(entry, base) else ""
        return f"{cmp.ratio:.2f}×{spread}{name}{same}"
    plain = "" if entry is base else " by throughput, not interleaved: no spread"
    return f"{_ratio(entry, base):.2f}×{name}{plain}"


def _inconclusive(entry: BenchResult, base: BenchResult) -> str:
    """'; inconclusive (3 pairs of blocks; …)' when ``entry``'s comparison with ``base`` rests on too few pairs."""
    cmp = comparison_against(entry, base)
    return f" — {cmp.verdict}" if cmp is not None and cmp.is_inconclusive else ""


def _rate(value: float | None) -> str:
    """4 significant digits, never in e-notation: 59,450 and 0.0123, not 5.945e+04."""
    if not value:
        return "0"
    return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"


def _disagrees(entry: BenchResult, base: BenchResult, unit: str) -> str:
    """A note when the total throughputs point the other way from the paired ratio (a noisy machine: a few very
    slow blocks weigh in a total, not in a median of pairs)."""
    cmp = comparison_against(entry, base)
    if cmp is None or cmp.ratio is None or not entry.throughput.value or not base.throughput.value:
        return ""
    if cmp.verdict.startswith(DISAGREE):  # the verdict says so already, and why
        return ""
    if (cmp.ratio > 1) == (entry.throughput.value > base.throughput.value) or cmp.ratio == 1:
        return ""
    return (f" (total throughput says otherwise, {_rate(entry.throughput.value)} vs {_rate(base.throughput.value)} {unit}: "
            f"a few slow blocks weigh in the totals; the median of pairs is the robust figure)")


def _ms(entry: BenchResult) -> str:
    """The median latency as the bench table prints it (report.tables._seconds): 252 ms, 1.2 s, 40 µs."""
    assert entry.latency_s is not None
    value = entry.latency_s.median
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if value >= scale:
            return f"{value / scale:.3g} {unit}"
    return f"{value / 1e-9:.3g} ns"


def verdicts(entries: list[BenchResult]) -> list[str]:
    """Per step with two or more variants: which was fastest and by how much against the first, with MFU and,
    for training, the loss after the first steps — what `bench` prints under its table and the report shows."""
    out: list[str] = []
    for step in dict.fromkeys(e.step for e in entries):
        group = [e for e in entries if e.step == step and e.throughput.value]
        if len(group) < 2:
            continue
        base = group[0]

        def ratio(e: BenchResult, base: BenchResult = base) -> float:
            return _ratio(e, base)

        # ranked by the same ratio the line quotes: ranked by throughput, a noisy run printed "bf16 fastest at
        # 0.61× fp32" (a few slow fp32 blocks lowered its total throughput while bf16 lost most pairs)
        best = max(group, key=ratio)
        unit = base.throughput.unit
        contender = max(group[1:], key=ratio) if best is base else best
        if (cmp := comparison_against(contender, base)) is not None and cmp.verdict.startswith(DISAGREE):
            # the figures contradict each other: no winner, and every figure printed, so the line shows why
            lat = f", median latency {_ms(contender)} vs {_ms(base)}" if contender.latency_s and base.latency_s else ""
            out.append(f"{step}: no verdict between {contender.name} and {base.name} — {cmp.verdict}; printed: "
                       f"{_ratio_text(contender, base, named=True)} by the median of pairs, total throughput "
                       f"{_rate(contender.throughput.value)} vs {_rate(base.throughput.value)} {unit}{lat}")
            continue
        # a ratio on too few pairs of blocks names no winner: 'measured fastest', and the verdict says why not
        if best is base:
            second = max(group[1:], key=ratio)
            unsettled = _inconclusive(second, base) or _within_spread(second, base)
            settled = "measured fastest" if unsettled else "was fastest"
            out.append(f"{step}: the baseline {base.name} {settled} ({_rate(base.throughput.value)} {unit}); next "
                       f"{second.name} at {_ratio_text(second, base)}{_inconclusive(second, base)}"
                       f"{_disagrees(second, base, unit)}")
            continue
        # inconclusive (too few pairs) or no difference (within the noise): not a winner, only the best measured
        settled = "measured fastest" if _inconclusive(best, base) or _within_spread(best, base) else "fastest"
        parts = [f"{step}: {best.name} {settled} at {_ratio_text(best, base, named=True)} "
                 f"({_rate(best.throughput.value)} vs {_rate(base.throughput.value)} {unit}){_inconclusive(best, base)}"
                 f"{_disagrees(best, base, unit)}"]
        if best.mfu.value is not None and base.mfu.value is not None:
            parts.append(f"MFU {best.mfu.value:.1%} vs {base.mfu.value:.1%}")
        if best.loss_first_steps and base.loss_first_steps:
            n = min(len(best.loss_first_steps), len(base.loss_first_steps))
            ours, theirs = best.loss_first_steps[n - 1], base.loss_first_steps[n - 1]
            if ours is not None and theirs is not None:
                parts.append(f"loss after {n} steps {ours:.4g} vs {theirs:.4g}")
        out.append("; ".join(parts))
    return out
