"""The benchmark runner: one workload × its variants through the phases of docs/methodology.md.

    refuse → predict → for each variant: load → first call → (reference: drift, FLOPs) → warm-up
           → steady state (interleaved blocks A B A B …, or one variant after another) → store

Every (variant, step) pair is a *lane*: LLM inference has two steps (prefill, decode), so two lanes per
variant. A variant is finished when all its lanes meet the stopping rule; finished variants are stored
as they finish (sequential) or together (interleaved). Ctrl-C stops the run, stores the finished
variants and re-raises nothing: the result says ``interrupted`` and which variants were not finished.
"""

from __future__ import annotations

import dataclasses
import gc
import signal
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelkit.bench.metrics import FLOPS_SOURCE, Peak, catalog_peak, compare, count_flops, drift, mfu_block, probe_peak
from accelkit.bench.variants import Variant, device_refusal
from accelkit.bench.workloads.base import BenchWorkload, Prepared, Step
from accelkit.core import Estimate, Measurement, UserError, summarize
from accelkit.core.spec import Spec, spec_field
from accelkit.timing import (
    Block,
    LoopConfig,
    block_iterations,
    interleaved_blocks,
    lane_done,
    timer_name,
    warm_up,
)

if TYPE_CHECKING:
    from accelkit.results import ResultStore


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig(Spec):
    """How a benchmark runs (the workload's own shapes live in its config)."""

    device: str = spec_field("auto", doc="'auto' (first GPU, else CPU), 'cpu' or 'cuda[:N]'.")
    loop: LoopConfig = spec_field(default_factory=LoopConfig, doc="Warm-up and stopping rule per variant.")
    interleave: bool = spec_field(True, doc="Run the variants' measured blocks in rounds (A B A B …).")
    seed: int = spec_field(0, min=0, doc="Seed of the random weights and inputs.")
    accuracy: bool = spec_field(True, doc="Compare each variant's output with fp32 on a fixed batch.")
    predict: bool = spec_field(True, doc="Store the planner's estimate beside each measurement.")
    auto_probe: bool = spec_field(True, doc="On a CPU without a stored probe, run `hw probe --quick` for the MFU peak.")
    save: bool = spec_field(True, doc="Store each finished variant (Measurement + the planner's Estimate).")


class Reporter:
    """Progress callbacks; the CLI draws a progress bar from them. The default does nothing."""

    def refused(self, variant: str, reason: str) -> None: ...

    def phase(self, lane: str, text: str) -> None: ...

    def progress(self, lane: str, iterations: int, measured_s: float, config: LoopConfig) -> None: ...

    def note(self, text: str) -> None: ...

    def stored(self, variant: str, result_ids: list[int]) -> None: ...


@dataclass
class Lane:
    """One (variant, step): its prepared callable and everything measured about it."""

    variant: Variant
    step: Step
    load_s: float
    load_bytes: int | None
    first_call_s: float | None = None
    warmup_iterations: int = 0
    warmup_s: float = 0.0
    per_iteration_s: float = 0.0
    samples: list[float] = field(default_factory=list)
    block_walls: list[float] = field(default_factory=list)
    block_rates: list[float] = field(default_factory=list)  # items/s per block (for the A/B pairs)
    step_peak_bytes: float | None = None
    reserved_peak_bytes: float | None = None
    energy_j: float | None = None
    accuracy: dict[str, Any] | None = None

    @property
    def name(self) -> str:
        return f"{self.variant.name} · {self.step.name}"

    def add_block(self, block: Block) -> None:
        self.samples.extend(block.samples_s)
        self.block_walls.append(block.wall_s)
        self.block_rates.append(len(block.samples_s) * self.step.items / block.wall_s if block.wall_s > 0 else 0.0)

    def done(self, loop: LoopConfig) -> bool:
        return lane_done(len(self.samples), sum(self.block_walls), loop)


@dataclass
class BenchRun:
    """What ``run_benchmark`` returns: the JSON document, the stored ids, and how it ended."""

    workload: str
    label: str
    config: dict[str, Any]
    device: str
    hardware: str
    run_id: str
    variants: list[dict[str, Any]] = field(default_factory=list)
    refused: list[dict[str, str]] = field(default_factory=list)
    unfinished: list[str] = field(default_factory=list)
    interrupted: bool = False
    notes: list[str] = field(default_factory=list)
    environment: dict[str, Any] = field(default_factory=dict)
    result_ids: list[int] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload, "label": self.label, "config": self.config, "device": self.device,
            "hardware": self.hardware, "run_id": self.run_id, "interrupted": self.interrupted,
            "unfinished": self.unfinished, "refused": self.refused, "notes": self.notes,
            "variants": self.variants, "environment": self.environment, "result_ids": self.result_ids,
        }


# ---- device and peak ---------------------------------------------------------------------------------
def resolve_device(name: str) -> str:
    from accelkit.hardware.probe import _resolve_device

    return _resolve_device(name)


def identify(device: str) -> tuple[str, str | None]:
    """(hardware name as the store spells it, catalog name or None) — the same names `hw probe` uses."""
    from accelkit.hardware.detect import cpu_info

    if device == "cpu":
        return "cpu: " + str(cpu_info(with_torch=False)["model"]), None
    import torch

    from accelkit.hardware import match_device_name

    name = torch.cuda.get_device_properties(device).name
    match = match_device_name(name)
    return (match.name if match else name), (match.name if match else None)


class Peaks:
    """Dense peak per dtype for MFU: the catalog on a known accelerator, else the latest probe (running a
    quick one on demand when allowed)."""

    def __init__(self, device: str, hardware: str, catalog: str | None, store: ResultStore | None, auto_probe: bool,
                 reporter: Reporter):
        self.device, self.hardware, self.catalog = device, hardware, catalog
        self.store, self.auto_probe, self.reporter = store, auto_probe, reporter
        self._cache: dict[str, Peak] = {}

    def prefetch(self, dtypes: list[str]) -> None:
        """Probe every missing dtype in one quick probe up front (before anything is timed)."""
        if self.catalog is not None or self.store is None or not self.auto_probe:
            return
        from accelkit.hardware.probe import ProbeConfig, probe, supported_dtypes

        support = supported_dtypes(self.device)
        missing = [d for d in dict.fromkeys(dtypes)
                   if support.get(d, "no") is None and probe_peak(self.store, self.hardware, d)[0].flops is None]
        if missing:
            self.reporter.note(f"no {'/'.join(missing)} matmul peak for {self.hardware} in the store: "
                               f"running `accelkit hw probe --quick --dtype {','.join(missing)}` for MFU")
            self.store.add(probe(ProbeConfig(device=self.device, dtypes=tuple(missing), quick=True)))

    def get(self, dtype: str) -> Peak:
        if dtype not in self._cache:
            self._cache[dtype] = self._resolve(dtype)
        return self._cache[dtype]

    def _resolve(self, dtype: str) -> Peak:
        if self.catalog is not None:
            return catalog_peak(self.catalog, dtype)
        how = f"run `accelkit hw probe --device {self.device} --dtype {dtype}` to measure it"
        if self.store is None:
            return Peak(None, f"MFU unavailable: no results store to read a probe from; {how}")
        peak, _ = probe_peak(self.store, self.hardware, dtype)
        if peak.flops is not None:
            return peak
        from accelkit.hardware.probe import ProbeConfig, probe, supported_dtypes

        if supported_dtypes(self.device).get(dtype, "not probed") is not None:
            return Peak(None, f"MFU unavailable: `hw probe` measures no {dtype} matmul peak on this device")
        if not self.auto_probe:
            return Peak(None, f"MFU unavailable: {peak.source}; {how}")
        self.reporter.note(f"no {dtype} peak for {self.hardware} in the store: running `hw probe --quick --dtype {dtype}`")
        result = probe(ProbeConfig(device=self.device, dtypes=(dtype,), quick=True))
        self.store.add(result)
        return probe_peak(self.store, self.hardware, dtype)[0]


# ---- prediction ----------------------------------------------------------------------------------------
def predict_variant(
    workload: BenchWorkload, variant: Variant, device: str, catalog: str | None
) -> tuple[Estimate | None, str | None]:
    """The planner's estimate for one variant of a workload (None with the reason when it has none)."""
    spec = workload.spec()
    if spec is None:
        return None, f"{workload.name}: no architecture the planner can model"
    from accelkit.core import Cluster
    from accelkit.plan import plan, resolve_hardware

    training = workload.task == "train"
    recipe = variant.recipe(training=training)
    if training:  # the planner takes a training batch from the layout: micro_batch × grad_accum × dp
        recipe = recipe.replace(micro_batch=spec.batch_size)
    try:
        hw = resolve_hardware(catalog or ("cpu" if device == "cpu" else device))
        estimate = plan(spec.replace(recipe=recipe), Cluster(device=hw))
    except Exception as exc:  # a planner gap must not lose a measurement
        return None, f"the planner could not estimate this workload ({type(exc).__name__}: {exc})"
    return estimate, None


#: which planner figure (seconds per call of the step) matches each measured step
_PREDICTED_SECONDS = {
    "prefill": "prefill_time_s", "forward": "prefill_time_s", "decode": "decode_time_per_token_s",
    "train step": "step_time_s",
}


def predicted_block(estimate: Estimate | None, reason: str | None, lane: Lane, throughput: float | None,
                    unit: str, estimate_id: int | None) -> dict[str, Any] | None:
    """The planner's figure for this lane and measured ÷ predicted (throughput), or None with the reason."""
    if estimate is None:
        return None
    details = estimate.details or {}
    predicted_tput: float | None = None
    seconds = details.get(_PREDICTED_SECONDS.get(lane.step.name, ""))
    if isinstance(seconds, (int, float)) and seconds > 0:
        predicted_tput = lane.step.items / float(seconds)
    if predicted_tput is None and estimate.throughput and _same_unit(estimate.throughput_unit, unit):
        predicted_tput = estimate.throughput
    return {
        "estimate_id": estimate_id,
        "throughput": predicted_tput,
        "unit": unit,
        "mfu": estimate.mfu,
        "ratio": throughput / predicted_tput if throughput and predicted_tput else None,
        "seconds_per_call": seconds if isinstance(seconds, (int, float)) else None,
        "bottleneck": details.get("bottleneck"),
        "note": None if predicted_tput else f"the estimate gives {estimate.throughput_unit!r}, not {unit}",
    }


def _same_unit(a: str | None, b: str) -> bool:
    norm = lambda s: (s or "").split("/")[0].strip().rstrip("s").lower()  # noqa: E731
    return bool(a) and norm(a) == norm(b)


# ---- the run ---------------------------------------------------------------------------------------------
def plan_variants(
    workload: BenchWorkload,
    requested: list[Variant],
    device: str,
    reporter: Reporter,
    *,
    extra_refusal: Callable[[Variant], str | None] | None = None,
) -> tuple[list[Variant], list[dict[str, str]]]:
    """Split the variants into runnable and refused (one line each, told to ``reporter``); ``extra_refusal``
    adds a caller's own reasons (e.g. what a distributed run cannot do). Nothing runnable is a UserError."""
    runnable, refused = [], []
    for v in workload.variants(requested):
        reason = workload.refusal(v, device)
        if reason is None and workload.task != "input":
            reason = device_refusal(v, device, training=workload.task == "train")
        if reason is None and extra_refusal is not None:
            reason = extra_refusal(v)
        if reason:
            refused.append({"name": v.name, "reason": reason})
        else:
            runnable.append(v)
    for r in refused:
        reporter.refused(r["name"], r["reason"])
    if not runnable:
        raise UserError("nothing to run: every variant was refused (" + "; ".join(
            f"{r['name']}: {r['reason']}" for r in refused) + ")")
    return runnable, refused


def run_benchmark(
    workload: BenchWorkload,
    requested: list[Variant],
    config: BenchConfig | None = None,
    *,
    store: ResultStore | None = None,
    reporter: Reporter | None = None,
    run_id: str | None = None,
) -> BenchRun:
    """Benchmark ``workload`` over ``requested`` variants; store each finished variant in ``store``."""
    import torch

    from accelkit.hardware.detect import environment

    config = config or BenchConfig()
    reporter = reporter or Reporter()
    device = resolve_device(config.device)
    runnable, refused = plan_variants(workload, requested, device, reporter)
    workload.check(device)
    hardware, catalog = identify(device)
    run = BenchRun(workload=workload.name, label=workload.label, config=workload.config.to_dict(), device=device,
                   hardware=hardware, run_id=run_id or uuid.uuid4().hex[:12], refused=refused,
                   environment={**environment(with_torch=True), "timer": timer_name(device), "bench": config.to_dict()})
    interleave = config.interleave and workload.can_interleave and len(runnable) > 1
    if config.interleave and not workload.can_interleave and len(runnable) > 1:
        run.notes.append(f"{workload.name} variants ran one after another (interleaving would be unfair here)")
    session = _Session(workload, config, device, run, store, reporter, Peaks(
        device, hardware, catalog, store, config.auto_probe, reporter))
    torch.manual_seed(config.seed)
    if workload.task != "input":
        session.peaks.prefetch([v.matmul_dtype for v in runnable])
    restore = _catch_sigint(session)
    try:
        session.run(runnable, interleave=interleave, catalog=catalog)
    except KeyboardInterrupt:
        run.interrupted = True
        session.store_finished()
        run.unfinished = [v.name for v in runnable if v.name not in {e["name"] for e in run.variants}]
    finally:
        restore()
        session.close_all()
    return run


def _catch_sigint(session: _Session) -> Callable[[], None]:
    """Ctrl-C raises KeyboardInterrupt at once *and* sets a flag that the run checks between blocks and
    phases: an interrupt that lands inside a finalizer (``__del__``) is swallowed by Python, the flag is
    not. While the run lasts, such a swallowed interrupt is also kept off stderr (Python would print it
    as an "ignored exception" traceback); other unraisable errors still print. Returns the function that
    puts the previous handler and hook back (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous, previous_hook = signal.getsignal(signal.SIGINT), sys.unraisablehook

    def handler(signum: int, frame: Any) -> None:
        session.interrupt_requested = True
        raise KeyboardInterrupt

    def unraisable(info: Any) -> None:
        if not issubclass(info.exc_type, KeyboardInterrupt):
            previous_hook(info)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)
        sys.unraisablehook = previous_hook

    signal.signal(signal.SIGINT, handler)
    sys.unraisablehook = unraisable
    return restore


class _Session:
    """The state of one run (lanes, reference output, FLOPs), so that Ctrl-C can store what finished."""

    def __init__(self, workload: BenchWorkload, config: BenchConfig, device: str, run: BenchRun,
                 store: ResultStore | None, reporter: Reporter, peaks: Peaks):
        from accelkit.bench.trackers import energy_tracker, memory_tracker

        self.workload, self.config, self.device, self.run_ = workload, config, device, run
        self.store, self.reporter, self.peaks = store, reporter, peaks
        self.loop = config.loop
        self.memory, self.memory_reason = memory_tracker(device)
        self.energy, self.energy_reason = energy_tracker(device)
        self.lanes: list[Lane] = []
        self.prepared: dict[str, Prepared] = {}
        self.reference: Any = None
        self.flops: dict[str, float] = {}  # step name → model FLOPs per item
        self.predictions: dict[str, tuple[Estimate | None, str | None]] = {}
        self.stored: set[str] = set()
        self.saving = store is not None and config.save
        self.interleaved = False
        self.interrupt_requested = False

    def checkpoint(self) -> None:
        """Raise the Ctrl-C that a finalizer may have swallowed."""
        if self.interrupt_requested:
            raise KeyboardInterrupt

    # ---- phases ----------------------------------------------------------------------------------------
    def run(self, variants: list[Variant], *, interleave: bool, catalog: str | None) -> None:
        self.interleaved = interleave
        for v in variants:
            self.predictions[v.name] = (
                predict_variant(self.workload, v, self.device, catalog) if self.config.predict
                else (None, "prediction turned off (--no-predict)"))
        needs_reference = self.workload.task != "input" and not any(v.is_plain and v.precision == "fp32" for v in variants)
        if needs_reference:
            self._reference_only()
        for v in variants:
            lanes = self._load(v)
            for lane in lanes:
                self._warm(lane)
            if not interleave:
                self._measure(lanes)
                self.store_finished()
                self._close(v.name)
        if interleave:
            self._measure(self.lanes)
            self.store_finished()

    def _reference_only(self) -> None:
        """fp32 eager output and FLOPs when no fp32 variant runs (then freed before the variants)."""
        self.reporter.phase("fp32 reference", "building the fp32 reference for accuracy drift and FLOPs")
        prepared = self.workload.prepare(Variant(), self.device, seed=self.config.seed)
        try:
            output = self._output(prepared, before_first_call=True)
            for step in prepared.steps:
                step.fn()  # first call (seeds caches) before counting
            output = output if output is not None else self._output(prepared, before_first_call=False)
            self._reference_from(prepared, output)
        finally:
            prepared.close()
            del prepared
            self._free()

    def _output(self, prepared: Prepared, *, before_first_call: bool) -> Any:
        """The output on the fixed batch, for drift. A training step changes the weights, so training
        workloads evaluate before their first step; inference evaluates after it (keeping any compile
        time in the first call, where it belongs)."""
        if not self.config.accuracy or prepared.evaluate is None:
            return None
        if before_first_call != (self.workload.task == "train"):
            return None
        return prepared.evaluate().detach().float().cpu()

    def _reference_from(self, prepared: Prepared, output: Any) -> None:
        self.reference = output
        for step in prepared.steps:
            if self.workload.task != "input":
                self.flops[step.name] = count_flops(step.fn, calls=step.cycle) / step.items

    def _load(self, variant: Variant) -> list[Lane]:
        self.checkpoint()
        name = variant.name
        self.reporter.phase(name, "load")
        before = self._resident()
        t0 = time.perf_counter()
        prepared = self.workload.prepare(variant, self.device, seed=self.config.seed)
        load_s = time.perf_counter() - t0
        after = self._resident()
        self.prepared[name] = prepared
        lanes = [Lane(variant, step, load_s, None if before is None or after is None else max(0, after - before))
                 for step in prepared.steps]
        output = self._output(prepared, before_first_call=True)
        for lane in lanes:  # first call: cold start, includes compilation
            self.checkpoint()
            self.reporter.phase(lane.name, "first call")
            t0 = time.perf_counter()
            lane.step.fn()
            self._sync()
            lane.first_call_s = time.perf_counter() - t0
        if output is None:
            output = self._output(prepared, before_first_call=False)
        if variant.is_plain and variant.precision == "fp32" and not self.flops and self.workload.task != "input":
            self._reference_from(prepared, output)
        accuracy = drift(self.reference, output) if output is not None and self.reference is not None else None
        for lane in lanes:
            lane.accuracy = accuracy
        self.lanes.extend(lanes)
        return lanes

    def _warm(self, lane: Lane) -> None:
        self.checkpoint()
        self.reporter.phase(lane.name, "warm-up")
        lane.warmup_iterations, lane.warmup_s = warm_up(lane.step.fn, self.loop, device=self.device)
        lane.per_iteration_s = lane.warmup_s / max(lane.warmup_iterations, 1)

    def _measure(self, lanes: list[Lane]) -> None:
        """Steady state: rounds of blocks over ``lanes`` (one lane = plain blocks until the rule holds)."""
        counts = [block_iterations(self.loop, lane.per_iteration_s) for lane in lanes]

        def before(i: int) -> None:
            for tracker in (self.memory, self.energy):
                if tracker is not None:
                    tracker.start()

        for i, block in interleaved_blocks([lane.step.fn for lane in lanes], self.loop, device=self.device,
                                           iterations=counts, before=before):
            lane = lanes[i]
            lane.add_block(block)
            if self.memory is not None:
                peak = self.memory.stop()
                lane.step_peak_bytes = max(lane.step_peak_bytes or 0.0, peak)
                reserved = getattr(self.memory, "reserved", None)
                if reserved:
                    lane.reserved_peak_bytes = max(lane.reserved_peak_bytes or 0.0, float(reserved))
            if self.energy is not None:
                lane.energy_j = (lane.energy_j or 0.0) + self.energy.stop()
            self.reporter.progress(lane.name, len(lane.samples), sum(lane.block_walls), self.loop)
            self.checkpoint()

    # ---- results -------------------------------------------------------------------------------------------
    def store_finished(self) -> None:
        """Turn every finished, not yet stored variant into Measurements (and estimates) and store them."""
        by_variant: dict[str, list[Lane]] = {}
        for lane in self.lanes:
            by_variant.setdefault(lane.variant.name, []).append(lane)
        new: list[tuple[Lane, dict[str, Any]]] = []
        for name, lanes in by_variant.items():
            if name in self.stored or not all(lane.samples and lane.done(self.loop) for lane in lanes):
                continue
            self.stored.add(name)
            estimate, reason = self.predictions.get(name, (None, None))
            estimate_id = None
            if estimate is not None and self.saving:
                estimate_id = self.store.add(estimate, run_id=self.run_.run_id)
                self.run_.result_ids.append(estimate_id)
            for lane in lanes:
                entry = self._entry(lane, estimate, reason, estimate_id)
                self.run_.variants.append(entry)
                new.append((lane, entry))
        self._compare()
        for lane, entry in new:
            entry["result_id"] = None
            if self.saving:
                entry["result_id"] = self.store.add(self._measurement(lane, entry), run_id=self.run_.run_id)  # type: ignore[union-attr]
                self.run_.result_ids.append(entry["result_id"])
        for name in dict.fromkeys(lane.variant.name for lane, _ in new):
            self.reporter.stored(name, [e["result_id"] for lane, e in new if lane.variant.name == name and e["result_id"]])

    def _baseline(self, step: str) -> Lane | None:
        return next((lane for lane in self.lanes if lane.step.name == step), None)

    def _entry(self, lane: Lane, estimate: Estimate | None, reason: str | None, estimate_id: int | None) -> dict[str, Any]:
        stats = summarize(lane.samples)
        measured_s = sum(lane.block_walls)
        items = len(lane.samples) * lane.step.items
        throughput = items / measured_s if measured_s > 0 else None
        unit = f"{lane.step.unit}/s"
        flops = self.flops.get(lane.step.name)
        peak = self.peaks.get(lane.variant.matmul_dtype) if self.workload.task != "input" else Peak(
            None, "not applicable: an input pipeline does no model FLOPs")
        mfu = mfu_block(flops, throughput, peak, FLOPS_SOURCE if flops else "not counted")
        if lane.step.analytic_flops_per_item:
            mfu["analytic_flops_per_item"] = lane.step.analytic_flops_per_item
            mfu["analytic_formula"] = lane.step.analytic_formula
        energy = lane.energy_j / items if lane.energy_j is not None and items else None
        memory: dict[str, Any] = {
            "peak": None if lane.step_peak_bytes is None else int((lane.load_bytes or 0) + lane.step_peak_bytes),
            "load": lane.load_bytes,
            "step_peak_increase": None if lane.step_peak_bytes is None else int(lane.step_peak_bytes),
        }
        if lane.reserved_peak_bytes is not None:
            memory["reserved_peak"] = int(lane.reserved_peak_bytes)
        entry: dict[str, Any] = {
            "name": lane.variant.name,
            "step": lane.step.name,
            "precision": lane.variant.precision if not lane.variant.settings else None,
            "options": {**lane.variant.options, **lane.variant.settings},
            "phases": {
                "load_s": lane.load_s, "first_call_s": lane.first_call_s,
                "warmup_iterations": lane.warmup_iterations, "warmup_s": lane.warmup_s,
                "measured_iterations": len(lane.samples), "measured_s": measured_s, "blocks": len(lane.block_walls),
            },
            "latency_s": {k: getattr(stats, k) for k in ("median", "p50", "p90", "p95", "p99", "mean", "stdev", "cv",
                                                        "n", "min", "max", "iqr_over_median")},
            "latency_name": lane.step.latency_name,
            "unbacked_percentiles": list(stats.unbacked),
            "noise": stats.noise,
            "throughput": {"value": throughput, "unit": unit},
            "mfu": mfu,
            "memory_bytes": memory,
            "memory_scope": self.memory.scope if self.memory else self.memory_reason,
            "energy_j_per_item": energy,
            "energy": {"j_per_item": energy, "items_per_j": 1 / energy if energy else None,
                       "scope": self.energy.scope if self.energy else None,
                       "reason": None if self.energy else self.energy_reason},
            "accuracy": lane.accuracy or (
                None if self.workload.task == "input" else {"note": "no fp32 reference output (--no-accuracy)"}),
            "predicted": predicted_block(estimate, reason, lane, throughput, unit, estimate_id),
            "predicted_reason": reason,
            "comparison": None,
            "timer": timer_name(self.device),
        }
        bound = getattr(self.workload, "input_bound", None)
        if bound is not None:
            entry["input_bound"] = bound(stats.median)
        return entry

    def _measurement(self, lane: Lane, entry: dict[str, Any]) -> Measurement:
        spec = self.workload.spec()
        if spec is not None:
            recipe = lane.variant.recipe(training=self.workload.task == "train")
            if self.workload.task == "train":
                recipe = recipe.replace(micro_batch=spec.batch_size)
            spec = spec.replace(recipe=recipe)
        return Measurement(
            kind="bench", name=f"{self.run_.label} · {entry['name']} · {entry['step']}", workload=spec,
            hardware=self.run_.hardware, throughput=entry["throughput"]["value"],
            throughput_unit=entry["throughput"]["unit"], latency_s=summarize(lane.samples),
            memory_bytes={k: v for k, v in entry["memory_bytes"].items() if isinstance(v, int)},
            mfu=entry["mfu"]["value"], energy_j_per_item=entry["energy_j_per_item"],
            details={"workload": self.workload.name, "label": self.run_.label, "config": self.run_.config,
                     "device": self.device, **{k: v for k, v in entry.items() if k != "latency_s"}},
            environment=self.run_.environment,
            samples={"latency_s": lane.samples, "block_wall_s": lane.block_walls, "block_items_per_s": lane.block_rates},
        )

    def _compare(self) -> None:
        """Ratio of each entry's throughput to the first variant's, per step (stored entries are updated
        in the JSON only; the stored rows carry the raw block rates to recompute it)."""
        for entry in self.run_.variants:
            base = self._baseline(entry["step"])
            lane = next(x for x in self.lanes if x.variant.name == entry["name"] and x.step.name == entry["step"])
            if base is None or base is lane:
                entry["comparison"] = {"baseline": entry["name"], "ratio": 1.0, "verdict": "baseline"}
                continue
            cmp = compare(base.block_rates, lane.block_rates, interleaved=self.interleaved)
            base_entry = next((e for e in self.run_.variants if e["name"] == base.variant.name
                               and e["step"] == entry["step"]), None)
            if not self.interleaved and base_entry and base_entry["throughput"]["value"]:
                # one after another there are no pairs: the ratio of the two throughputs, spread from the blocks
                cmp["ratio"] = entry["throughput"]["value"] / base_entry["throughput"]["value"]
            entry["comparison"] = {"baseline": base.variant.name, **cmp}

    # ---- housekeeping --------------------------------------------------------------------------------------
    def _sync(self) -> None:
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.synchronize(self.device)

    def _resident(self) -> int | None:
        if self.device.startswith("cuda"):
            import torch

            self._sync()
            return int(torch.cuda.memory_allocated(self.device))
        try:
            import psutil

            return int(psutil.Process().memory_info().rss)
        except Exception:
            return None

    def _free(self) -> None:
        gc.collect()
        if self.device.startswith("cuda"):
            import torch

            torch.cuda.empty_cache()

    def _close(self, name: str) -> None:
        prepared = self.prepared.pop(name, None)
        if prepared is not None:
            prepared.close()
            for lane in self.lanes:  # drop the closures that hold the model, keep what was measured
                if lane.variant.name == name:
                    lane.step = dataclasses.replace(lane.step, fn=_closed)
        self._free()

    def close_all(self) -> None:
        for name in list(self.prepared):
            self._close(name)


def _closed() -> None:
    raise RuntimeError("this variant's model was freed")
