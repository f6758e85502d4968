"""Recording: finished lanes → typed :class:`BenchResult` entries (the one place a single-process result is
built), the comparison with the first variant, the verdicts, and the store (a ``Measurement`` per entry beside
the planner's ``Estimate`` for its variant)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelkit.bench.metrics import FLOPS_SOURCE_ON_DEVICE, Peak, Totals, compare, mfu_result
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
from accelkit.results.store import unstored_record
from accelkit.timing import timer_name

if TYPE_CHECKING:
    from accelkit.bench.peaks import Peaks
    from accelkit.bench.reference import Reference
    from accelkit.bench.runner import BenchConfig, Reporter
    from accelkit.bench.session import Lane
    from accelkit.bench.variants import Variant
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
        #: what was to be stored and was not (the failed write and every later one), as exported records: the
        #: caller prints them under ``unstored_results`` for `accelkit results import` — raw samples included
        self.unstored: list[dict[str, Any]] = []

    @property
    def can_write(self) -> bool:
        return self.store is not None and self.error is None

    def add(self, result: Estimate | Measurement, *, run_id: str | None = None) -> int | None:
        """The stored row's id, or None: not saving, or this or an earlier write failed."""
        if self.store is None and self.error is None:  # not saving (--no-save)
            return None
        if self.store is not None and self.error is None:
            try:
                return self.store.add(result, run_id=run_id)
            except AccelkitError as exc:
                self.error = str(exc)
        self.unstored.append(unstored_record(result, run_id))
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
    unstored_results: list[dict[str, Any]] | None = None  # (with store_error: what the writer could not store)
    # distributed runs (``accelkit.distributed``): the launch, and the per-rank detail of the first variant
    world_size: int | None = None
    num_nodes: int | None = None
    layout: str | None = None
    zero: int | None = None
    ranks: list[dict[str, Any]] | None = None

    def result(self) -> BenchRunResult:
        """The run's typed result: the one place a :class:`BenchRunResult` is assembled, for a single-process run
        and for rank 0's document of a distributed one alike."""
        return BenchRunResult(
            workload=self.workload, label=self.label, config=self.config, device=self.device, hardware=self.hardware,
            run_id=self.run_id, interrupted=self.interrupted, stopped_by=self.stopped_by, unfinished=self.unfinished, refused=self.refused,
            failed=self.failed, notes=self.notes, verdicts=self.verdicts, variants=self.entries,
            environment=self.environment, result_ids=self.result_ids, peak_memory_bytes=self.peak_memory_bytes,
            peak_memory_scope=self.peak_memory_scope, store_error=self.store_error, world_size=self.world_size,
            num_nodes=self.num_nodes, layout=self.layout, zero=self.zero, ranks=self.ranks,
            unstored_results=self.unstored_results,
        )

    @classmethod
    def resume(cls, run: BenchRunResult) -> RunRecord:
        """A record holding ``run`` as it stands, to go on recording into (a distributed run: the launches after
        the first add their variants to the first's)."""
        return cls(
            workload=run.workload, label=run.label, config=run.config, device=run.device, hardware=run.hardware,
            run_id=run.run_id, environment=run.environment, refused=list(run.refused), failed=list(run.failed),
            notes=list(run.notes), entries=list(run.variants), result_ids=list(run.result_ids),
            interrupted=run.interrupted, stopped_by=run.stopped_by, unfinished=list(run.unfinished),
            verdicts=list(run.verdicts), peak_memory_bytes=run.peak_memory_bytes,
            peak_memory_scope=run.peak_memory_scope, store_error=run.store_error, world_size=run.world_size,
            num_nodes=run.num_nodes, layout=run.layout, zero=run.zero, ranks=run.ranks,
            unstored_results=None if run.unstored_results is None else list(run.unstored_results),
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
        the same peaks as the step's. ``mfu.flops_per_item`` is per item, as the step's own is (the phases' figures
        add up to it): the call's FLOPs ÷ the step's items; a phase's items/s is the step's items ÷ its median
        seconds, so its achieved FLOP/s and MFU are the call's (per call at --batch-size 2 they read twice the step's
        flops_per_item under the same key; found in a hunt)."""
        if lane.step.phases is None:
            return None
        dtype = lane.variant.matmul_dtype
        items = lane.step.items
        out = []
        for row in lane.step.phases(len(lane.samples)):
            flops, seconds = row.pop("flops", None), row.get("median_s")
            mfu = None if not flops else mfu_result(
                flops / items, items / seconds if seconds else None, self.peaks.get(dtype), self.reference.flops_source,
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


# ---- distributed: every rank's record → one entry --------------------------------------------------------------
# Timing: every rank runs the same iterations (the agreed loop), a step is bulk-synchronous, so the step latency of
# iteration i is the slowest rank's; throughput = world items per step × iterations ÷ the slowest rank's measured
# time.


@dataclass(frozen=True, slots=True, kw_only=True)
class RankMeasurement:
    """One rank's measurements of one variant of a distributed training step: what ``accelkit.distributed.worker``
    gathers to rank 0, where :func:`distributed_entry` builds the variant's result from every rank's."""

    rank: int
    local_rank: int
    host: str
    device: str  # cpu, or this rank's cuda:LOCAL_RANK
    items: int  # items (images, sequences) this rank's step takes
    unit: str
    analytic_flops_per_item: float | None  # the closed form, where the workload has one
    analytic_formula: str | None
    load_s: float
    first_call_s: float
    flops_per_call: float  # this rank's model FLOPs per step, counted (0: none counted)
    warmup_iterations: int
    warmup_s: float
    samples_s: list[float]  # this rank's latency per measured step
    block_walls_s: list[float]  # this rank's wall time per measured block
    agreed_walls_s: list[float]  # the block walls every rank agreed on (the slowest rank's)
    #: parameters, gradients, optimizer (this rank's local shards), their sum model_states, and peak
    memory_bytes: dict[str, int]
    peak_scope: str  # what memory_bytes["peak"] measures
    recipe_notes: list[str] = field(default_factory=list)
    #: with gradient compression in the run: the bytes of this rank's gradient collectives per step (grad_comm.py)
    grad_comm: dict[str, Any] | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class RankSetup:
    """The launch the ranks measured in: its size, device and backend, ZeRO stage, and the peaks MFU is taken
    against (each a whole device's: a CPU's ranks share it, :func:`rank_share`)."""

    world_size: int
    num_nodes: int
    local_world_size: int
    device: str  # rank 0's device: cpu, cuda:0
    backend: str
    zero: int
    peak: Peak
    datasheet: Peak | None = None
    probe: Peak | None = None


MEMORY_SCOPE = ("model states per rank = bytes of this rank's local tensors (FSDP2 DTensor.to_local()) of "
                "parameters, gradients and optimizer states — what the planner's weights+gradients+optimizer "
                "predict; peak is reported separately")
TOLERANCE = 0.10

_ZERO_NOTES = {
    0: "DDP: every rank holds full states; its gradient buckets (a second copy of the gradients used for the "
       "all-reduce) are not model states and are not counted",
    2: "FSDP2 with reshard_after_forward=False re-shards the parameters after backward, so at rest (when they "
       "are counted) they are sharded like ZeRO-3; the planner's ZeRO-2 counts whole parameters (their in-step "
       "peak) — expect measured below predicted",
    3: "FSDP2 fully_shard: parameters, gradients and optimizer states sharded over the ranks (ZeRO-3)",
}


def layout_name(world_size: int, zero: int) -> str:
    return f"dp{world_size} zero{zero} ({'DDP' if zero == 0 else 'FSDP2'})"


def rank_share(peak: Peak, ranks: int) -> Peak:
    """The part of a CPU's peak one of ``ranks`` ranks on it has (cores ÷ ranks threads each)."""
    return Peak(None if peak.flops is None else peak.flops / ranks, f"{peak.source} ÷ {ranks} ranks sharing it")


def memory_check(ranks: list[RankMeasurement], estimate: Estimate | None, zero: int) -> dict[str, Any]:
    """Measured model states per rank beside the planner's ZeRO-stage figure for the same layout."""
    measured = [r.memory_bytes["model_states"] for r in ranks]
    check: dict[str, Any] = {"zero": zero, "measured_model_states_bytes": measured, "scope": MEMORY_SCOPE,
                             "note": _ZERO_NOTES.get(zero), "tolerance": TOLERANCE}
    if estimate is None:
        return {**check, "predicted": None, "ratio_per_rank": None, "within_tolerance": None}
    pred = {k: int(estimate.memory_bytes.get(k, 0)) for k in ("weights", "gradients", "optimizer")}
    total = sum(pred.values())
    ratios = [m / total if total else None for m in measured]
    return {**check, "predicted": {**pred, "model_states": total}, "ratio_per_rank": ratios,
            "within_tolerance": all(r is not None and abs(r - 1) <= TOLERANCE for r in ratios)}


GRAD_COMM_TOLERANCE = 0.05
GRAD_COMM_SCOPE = ("bytes of the buffers each rank hands to its gradient collectives per training step (nccl-tests' "
                   "size S; a ring moves 2(n−1)/n · S), counted inside torch's DDP communication hook / FSDP2's "
                   "reduce-scatter over the warm-up and measured steps; gradient_bytes = the plain buckets the hook "
                   "was given (what none sends)")


def grad_comm_check(ranks: list[RankMeasurement], estimate: Estimate | None, compression: str) -> dict[str, Any] | None:
    """Counted gradient bytes per step per rank beside the planner's ``grad_reduction`` for the same layout."""
    counted = [r.grad_comm for r in ranks]
    if not all(counted):
        return None
    measured = [int(c["sent_bytes_per_step"]) for c in counted]  # type: ignore[index]
    plain = [int(c["gradient_bytes_per_step"]) for c in counted]  # type: ignore[index]
    reduction = (estimate.details or {}).get("grad_reduction") if estimate is not None else None
    predicted = reduction["buffer_bytes_per_step"] if reduction else None
    ratios = [m / predicted if predicted else None for m in measured]
    return {
        "compression": compression, "scope": GRAD_COMM_SCOPE, "tolerance": GRAD_COMM_TOLERANCE,
        "measured_bytes_per_step": measured, "gradient_bytes_per_step": plain,
        "sent_over_gradient": [m / g if g else None for m, g in zip(measured, plain, strict=True)],
        "constant_over_steps": all(c["min_sent_bytes"] == c["max_sent_bytes"] for c in counted),  # type: ignore[index]
        "predicted_bytes_per_step": predicted, "ratio_per_rank": ratios,
        "within_tolerance": None if predicted is None else all(abs(r - 1) <= GRAD_COMM_TOLERANCE for r in ratios
                                                               if r is not None),
        "predicted": reduction, "per_rank": counted,
    }


def quality_check(variant: Any, quality: dict[str, dict[str, Any] | None] | None,
                  max_loss_increase: float) -> dict[str, Any] | None:
    """The loss gate of a compressed variant against its uncompressed twin (or the reference's own curve)."""
    mine = (quality or {}).get(variant.name)
    if mine is None:
        return None
    # lazy: recipes import torch, and the CLI loads this module at start-up
    from accelkit.recipes.grad_compression import gate_document, loss_gate

    if variant.compression == "none":
        return {"role": "reference", "steps": len(mine["losses"]), **mine}
    reference = variant.without_compression().name
    ref = (quality or {}).get(reference)
    if ref is None:
        return {"role": "candidate", **mine, "note": f"no reference run {reference} to compare with"}
    gate = loss_gate(ref["losses"], mine["losses"], reference_eval=ref["eval_loss"], candidate_eval=mine["eval_loss"],
                     max_loss_increase=max_loss_increase, reference_name=reference, name=variant.name)
    return {"role": "candidate", **gate_document(gate, mine["losses"]), "eval_loss": mine["eval_loss"],
            "reference_losses": ref["losses"], "reference_eval_loss": ref["eval_loss"]}


def rank_detail(r: RankMeasurement) -> dict[str, Any]:
    """A rank's line of the entry's ``ranks``."""
    samples = r.samples_s
    measured = sum(r.block_walls_s)
    return {
        "rank": r.rank, "local_rank": r.local_rank, "host": r.host, "device": r.device,
        "iterations": len(samples), "measured_s": measured,
        "latency_median_s": summarize(samples).median if samples else None,
        "throughput": len(samples) * r.items / measured if measured else None,
        "load_s": r.load_s, "first_call_s": r.first_call_s, "flops_per_step": r.flops_per_call,
        "memory_bytes": r.memory_bytes, "peak_scope": r.peak_scope,
        **({"grad_comm": r.grad_comm} if r.grad_comm else {}),
    }


def slowest_rank_latency(ranks: list[RankMeasurement]) -> list[float]:
    """Each measured step's latency: the slowest rank's time for it (the step ends when every rank is done)."""
    return [max(xs) for xs in zip(*(r.samples_s for r in ranks), strict=True)]


def _distributed_mfu(setup: RankSetup, first: RankMeasurement, per_device: float | None) -> Any:
    """MFU per device: world throughput ÷ world size against one device's peak (a CPU's share of it per rank)."""
    flops_per_item = first.flops_per_call / first.items if first.flops_per_call else None
    peak, datasheet, probe = setup.peak, setup.datasheet, setup.probe
    source = (FLOPS_SOURCE_ON_DEVICE + " on rank 0; MFU per device = world throughput ÷ world_size ÷ peak"
              if flops_per_item else "not counted")
    if setup.device == "cpu" and setup.local_world_size > 1:  # the ranks of a node share its CPU: each has its share
        peak = rank_share(peak, setup.local_world_size)
        datasheet = None if datasheet is None else rank_share(datasheet, setup.local_world_size)
        probe = None if probe is None else rank_share(probe, setup.local_world_size)
        source += f"; on a CPU each rank's peak is the CPU's ÷ {setup.local_world_size} (the ranks on it)"
    return mfu_result(flops_per_item, per_device, peak, source, datasheet=datasheet, probe=probe,
                      analytic_flops_per_item=first.analytic_flops_per_item, analytic_formula=first.analytic_formula)


def distributed_entry(setup: RankSetup, workload: BenchWorkload, variant: Variant, ranks: list[RankMeasurement],
                      estimate: Estimate | None, reason: str | None, estimate_id: int | None, *,
                      losses: dict[str, dict[str, Any] | None] | None = None,
                      max_loss_increase: float = 0.0) -> BenchResult:
    """The typed result of one variant of a distributed training step, from every rank's measurements (the same
    type :meth:`Recorder.result` builds for a single process), with the distributed fields filled."""
    first = ranks[0]
    latency = slowest_rank_latency(ranks)
    stats = summarize(latency)
    measured_s = sum(first.agreed_walls_s)
    items_per_step = sum(r.items for r in ranks)
    throughput = len(latency) * items_per_step / measured_s if measured_s > 0 else None
    unit = f"{first.unit}/s"
    per_device = throughput / setup.world_size if throughput else None
    spec = variant_spec(workload, variant, dp=setup.world_size, zero=setup.zero)
    return BenchResult(
        name=variant.name, step="train step", precision=variant.effective_precision if not variant.settings else None,
        options={**variant.options, **variant.settings}, recipe=spec.recipe if spec is not None else None,
        recipe_notes=list(first.recipe_notes),
        world_size=setup.world_size, num_nodes=setup.num_nodes, layout=layout_name(setup.world_size, setup.zero),
        backend=setup.backend,
        phases=Phases(load_s=max(r.load_s for r in ranks), first_call_s=max(r.first_call_s for r in ranks),
                      warmup_iterations=first.warmup_iterations, warmup_s=first.warmup_s,
                      measured_iterations=len(latency), measured_s=measured_s, blocks=len(first.agreed_walls_s)),
        latency_s=stats, latency_name="step latency (slowest rank)", unbacked_percentiles=list(stats.unbacked),
        noise=stats.noise, throughput=Throughput(value=throughput, unit=unit, per_device=per_device),
        mfu=_distributed_mfu(setup, first, per_device),
        memory_bytes=MemoryUse(peak=max(r.memory_bytes["peak"] for r in ranks),
                               model_states=max(r.memory_bytes["model_states"] for r in ranks)),
        memory_scope=first.peak_scope + "; model states: " + MEMORY_SCOPE,
        memory_check=memory_check(ranks, estimate, setup.zero),
        energy=Energy(reason="not measured on distributed runs yet (one counter per node would be needed)"),
        accuracy=Accuracy(note="no fp32 drift on distributed runs (each rank trains on its own batch)"),
        predicted=prediction(estimate, "train step", items_per_step, unit, throughput, estimate_id),
        predicted_reason=reason, timer=timer_name(setup.device) + ", per rank; the step is the slowest rank's",
        ranks=[rank_detail(r) for r in ranks],
        grad_comm=grad_comm_check(ranks, estimate, variant.compression),
        quality=quality_check(variant, losses, max_loss_increase),
    )


def distributed_measurement(record: RunRecord, setup: RankSetup, workload: BenchWorkload, variant: Variant,
                            entry: BenchResult, ranks: list[RankMeasurement]) -> Measurement:
    """The stored row of a distributed entry: the slowest rank's step latencies and each rank's own."""
    mem = {k: max(int(r.memory_bytes[k]) for r in ranks) for k in ("parameters", "gradients", "optimizer")}
    samples = {"latency_s": slowest_rank_latency(ranks), "block_wall_s": ranks[0].agreed_walls_s,
               **{f"rank{r.rank}_latency_s": r.samples_s for r in ranks}}
    return entry.to_measurement(
        label=record.label, workload=workload.name, config=record.config, device=record.device,
        hardware=record.hardware, environment=record.environment,
        spec=variant_spec(workload, variant, dp=setup.world_size, zero=setup.zero), samples=samples,
        num_devices=setup.world_size, memory={**mem, "total": int(entry.memory_bytes.peak or 0)},
    )

