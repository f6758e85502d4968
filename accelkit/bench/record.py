"""Recording: finished lanes → typed :class:`BenchResult` entries (the one place a single-process result is
built), the comparison with the first variant, the verdicts, and the store (a ``Measurement`` per entry beside
the planner's ``Estimate`` for its variant)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelkit.bench.metrics import Peak, Totals, compare, mfu_result
from accelkit.bench.predict import prediction, variant_spec
from accelkit.core import AccelkitError, Estimate, Measurement, summarize
from accelkit.core.bench_result import (
    Accuracy,
    BenchResult,
    BenchRunResult,
    Comparison,
    Energy,
    Failure,
    InputBound,
    MemoryUse,
    Phases,
    PhaseTime,
    Refusal,
    Throughput,
    verdicts,
)
from accelkit.timing import timer_name

if TYPE_CHECKING:
    from accelkit.bench.peaks import Peaks
    from accelkit.bench.reference import Reference
    from accelkit.bench.runner import BenchConfig, Reporter
    from accelkit.bench.session import Lane
    from accelkit.bench.workloads.base import BenchWorkload
    from accelkit.results import ResultStore


#: the flops_source of a step whose count found no model FLOPs: its MFU is null, and this says why
ZERO_FLOPS = "0 model FLOPs counted (no matmul/conv/attention): MFU not applicable"


class StoreWriter:
    """Writes a run's results to the store until the first write fails; then it stops trying (each try could wait
    out the store's lock timeout) and ``error`` says why. A measurement that cannot be stored is kept in the run's
    result: the caller prints it (``accelkit.cli.store.print_unsaved``) instead of losing it. ``store=None``
    (``--no-save``) writes nothing."""

    def __init__(self, store: ResultStore | None):
        self.store = store
        self.error: str | None = None

    @property
    def can_write(self) -> bool:
        return self.store is not None and self.error is None

    def add(self, result: Estimate | Measurement, *, run_id: str | None = None) -> int | None:
        """The stored row's id, or None: not saving, or this or an earlier write failed."""
        if self.store is None or self.error is not None:
            return None
        try:
            return self.store.add(result, run_id=run_id)
        except AccelkitError as exc:
            self.error = str(exc)
            return None


@dataclass
class RunRecord:
    """The run as it is being recorded (Ctrl-C keeps what is here); :meth:`result` freezes it."""

    workload: str
    label: str
    config: dict[str, Any]
    device: str
    hardware: str
    run_id: str
    environment: dict[str, Any]
    refused: list[Refusal] = field(default_factory=list)
    failed: list[Failure] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    entries: list[BenchResult] = field(default_factory=list)
    result_ids: list[int] = field(default_factory=list)
    interrupted: bool = False
    stopped_by: str | None = None  # SIGINT or SIGTERM
    unfinished: list[str] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    peak_memory_bytes: int | None = None
    peak_memory_scope: str | None = None
    store_error: str | None = None

    def result(self) -> BenchRunResult:
        return BenchRunResult(
            workload=self.workload, label=self.label, config=self.config, device=self.device, hardware=self.hardware,
            run_id=self.run_id, interrupted=self.interrupted, stopped_by=self.stopped_by, unfinished=self.unfinished, refused=self.refused,
            failed=self.failed, notes=self.notes, verdicts=self.verdicts, variants=self.entries,
            environment=self.environment, result_ids=self.result_ids, peak_memory_bytes=self.peak_memory_bytes,
            peak_memory_scope=self.peak_memory_scope, store_error=self.store_error,
        )


class Recorder:
    """Builds and stores the results of one run."""

    def __init__(self, workload: BenchWorkload, config: BenchConfig, device: str, record: RunRecord,
                 writer: StoreWriter, reporter: Reporter, peaks: Peaks, reference: Reference,
                 memory_scope: str | None, energy_scope: str | None, energy_reason: str | None):
        self.workload, self.config, self.device, self.record = workload, config, device, record
        self.writer, self.reporter, self.peaks, self.reference = writer, reporter, peaks, reference
        self.memory_scope, self.energy_scope, self.energy_reason = memory_scope, energy_scope, energy_reason
        self.predictions: dict[str, tuple[Estimate | None, str | None]] = {}
        self.stored: set[str] = set()
        self.interleaved = False
        self.lanes: list[Lane] = []  # every lane that finished (the comparison's baselines)

    # ---- storing -------------------------------------------------------------------------------------------
    def store_finished(self, lanes: list[Lane]) -> None:
        """Turn every finished, not yet stored variant into results (and estimates) and store them."""
        by_variant: dict[str, list[Lane]] = {}
        for lane in lanes:
            by_variant.setdefault(lane.variant.name, []).append(lane)
        new: list[tuple[Lane, int]] = []  # (lane, index of its entry)
        for name, group in by_variant.items():
            if name in self.stored or not all(lane.samples and lane.done(self.config.loop) for lane in group):
                continue
            self.stored.add(name)
            if group[0].recipe_notes:  # once per variant, for the reader (each entry's JSON has them too)
                self.record.notes.append(f"{name}: " + "; ".join(group[0].recipe_notes))
            estimate, reason = self.predictions.get(name, (None, None))
            estimate_id = self._add(estimate) if estimate is not None else None
            for lane in group:
                self.lanes.append(lane)
                self.record.entries.append(self.result(lane, estimate, reason, estimate_id))
                new.append((lane, len(self.record.entries) - 1))
        self._compare()
        for lane, i in new:
            entry = self.record.entries[i]
            result_id = self._add(self.measurement(lane, entry))
            self.record.entries[i] = entry.replace(result_id=result_id)
        for name in dict.fromkeys(lane.variant.name for lane, _ in new):
            self.reporter.stored(name, [self.record.entries[i].result_id for lane, i in new  # type: ignore[misc]
                                        if lane.variant.name == name and self.record.entries[i].result_id])
        self.record.verdicts = verdicts(self.record.entries)

    def _add(self, result: Any) -> int | None:
        rid = self.writer.add(result, run_id=self.record.run_id)
        if rid is not None:  # else the entry keeps result_id None and the run goes on (run_benchmark reads why)
            self.record.result_ids.append(rid)
        return rid

    def measurement(self, lane: Lane, entry: BenchResult) -> Any:
        return entry.to_measurement(
            label=self.record.label, workload=self.workload.name, config=self.record.config, device=self.device,
            hardware=self.record.hardware, environment=self.record.environment,
            spec=variant_spec(self.workload, lane.variant),
            samples={"latency_s": lane.samples, "block_wall_s": lane.block_walls, "block_items_per_s": lane.block_rates},
        )

    # ---- one entry -----------------------------------------------------------------------------------------
    def result(self, lane: Lane, estimate: Estimate | None, reason: str | None, estimate_id: int | None) -> BenchResult:
        stats = summarize(lane.samples)
        measured_s = sum(lane.block_walls)
        items = len(lane.samples) * lane.step.items
        throughput = items / measured_s if measured_s > 0 else None
        unit = f"{lane.step.unit}/s"
        energy = lane.energy_j / items if lane.energy_j is not None and items else None
        variant = lane.variant
        bound = getattr(self.workload, "input_bound", None)
        # wall time per batch (1 / batches per second), not the median next(): prefetching workers hand most
        # batches over at once, so the median call is near zero while a batch still takes its full time to arrive
        input_bound = bound(measured_s / len(lane.samples), variant) if bound is not None and lane.samples else None
        return BenchResult(
            name=variant.name, step=lane.step.name,
            precision=variant.effective_precision if not variant.settings else None,
            options={**variant.options, **variant.settings,
                     **({"fp8_scaling": variant.fp8_scaling} if variant.effective_precision == "fp8" else {})},
            recipe=None if self.workload.task == "input" else variant.recipe(training=self.workload.task == "train"),
            recipe_notes=lane.recipe_notes,
            phases=Phases(load_s=lane.load_s, first_call_s=lane.first_call_s, warmup_iterations=lane.warmup_iterations,
                          warmup_s=lane.warmup_s, measured_iterations=len(lane.samples), measured_s=measured_s,
                          blocks=len(lane.block_walls)),
            latency_s=stats, latency_name=lane.step.latency_name, unbacked_percentiles=list(stats.unbacked),
            noise=stats.noise, throughput=Throughput(value=throughput, unit=unit), mfu=self._mfu(lane, throughput),
            memory_bytes=MemoryUse(
                # what the variant holds in its steady state (weights, optimizer state, caches) + a block's peak rise
                peak=None if lane.step_peak_bytes is None else int(
                    (lane.resident_bytes if lane.resident_bytes is not None else lane.load_bytes or 0)
                    + lane.step_peak_bytes),
                load=lane.load_bytes,
                step_peak_increase=None if lane.step_peak_bytes is None else int(lane.step_peak_bytes),
                reserved_peak=None if lane.reserved_peak_bytes is None else int(lane.reserved_peak_bytes)),
            memory_scope=self.memory_scope,
            energy_j_per_item=energy,
            energy=Energy(j_per_item=energy, items_per_j=1 / energy if energy else None, scope=self.energy_scope,
                          reason=None if self.energy_scope else self.energy_reason),
            accuracy=lane.accuracy or (None if self.workload.task == "input" else Accuracy(note=self._no_drift())),
            loss_first_steps=lane.losses,
            predicted=prediction(estimate, lane.step.name, lane.step.items, unit, throughput, estimate_id),
            predicted_reason=reason, timer=timer_name(self.device),
            input_bound=InputBound.from_dict(input_bound) if input_bound else None,
            gate=lane.gate, phase_breakdown=self._phases(lane),
        )

    def _phases(self, lane: Lane) -> list[PhaseTime] | None:
        """The step's phases (``Step.phases``), each with its MFU: its FLOPs per call over its median seconds, against
        the same peaks as the step's."""
        if lane.step.phases is None:
            return None
        dtype = lane.variant.matmul_dtype
        out = []
        for row in lane.step.phases():
            flops, seconds = row.pop("flops", None), row.get("median_s")
            mfu = None if not flops else mfu_result(
                flops, 1 / seconds if seconds else None, self.peaks.get(dtype), self.reference.flops_source,
                datasheet=self.peaks.datasheet(dtype), probe=self.peaks.probe(dtype))
            out.append(PhaseTime.from_dict({**row, "mfu": mfu}))
        return out

    def _no_drift(self) -> str:
        if not self.config.accuracy:
            return "no fp32 reference output (--no-accuracy)"
        return "no fp32 reference output (" + ("; ".join(self.reference.notes) or "the workload has none") + ")"

    def _mfu(self, lane: Lane, throughput: float | None) -> Any:
        if self.workload.task == "input":
            return mfu_result(None, throughput, Peak(None, "not applicable: an input pipeline does no model FLOPs"),
                              "not applicable")
        dtype = lane.variant.matmul_dtype
        flops, source = self.reference.flops.get(lane.step.name), self.reference.flops_source
        analytic = lane.step.analytic_flops_per_item
        if not flops and analytic:  # not counted (it would not fit): the closed form, said so
            flops, source = analytic, f"analytic: {lane.step.analytic_formula} (FLOPs were not counted)"
        elif flops == 0:  # counted, and there are none (an elementwise model): MFU has nothing to measure
            source = f"{ZERO_FLOPS}; counted by {source}"
        elif not flops:
            source = "not counted"
        datasheet = self.peaks.datasheet(dtype)
        return mfu_result(flops, throughput, self.peaks.get(dtype), source,
                          datasheet=datasheet, probe=self.peaks.probe(dtype),
                          analytic_flops_per_item=analytic, analytic_formula=lane.step.analytic_formula)

    # ---- across entries ------------------------------------------------------------------------------------
    def _baseline(self, step: str) -> Lane | None:
        return next((lane for lane in self.lanes if lane.step.name == step), None)

    def _compare(self) -> None:
        """Each entry against the first variant of its step, from the block rates (stored entries are updated in
        the JSON only; the stored rows carry the raw block rates to recompute it). Ratio, spread and verdict come
        from the one statistic :func:`compare` decides on — the median over pairs, or one after another the ratio
        of median block rates: the total throughputs (each entry's own) were put in the ratio here while the
        verdict and spread came from the medians, so one stalled block printed 'faster' at 0.62× [1.20–1.20]."""
        entries = self.record.entries
        for i, entry in enumerate(entries):
            base = self._baseline(entry.step)
            lane = next(x for x in self.lanes if x.variant.name == entry.name and x.step.name == entry.step)
            if base is None or base is lane:
                entries[i] = entry.replace(comparison=Comparison(baseline=entry.name, ratio=1.0, verdict="baseline"))
                continue
            base_entry = next(e for e in entries if e.name == base.variant.name and e.step == entry.step)
            cmp = compare(base.variant.name, base.block_rates, lane.block_rates, interleaved=self.interleaved,
                          base_totals=_totals(base_entry, base), totals=_totals(entry, lane))
            entries[i] = entry.replace(comparison=cmp)


def _totals(entry: BenchResult, lane: Lane) -> Totals:
    """The figures the table prints beside the comparison: total throughput and median latency per iteration."""
    return Totals(throughput=entry.throughput.value, median_s=entry.latency_s.median if entry.latency_s else None,
                  items=lane.step.items)
