"""The benchmark runner: one workload × its variants through the phases of docs/methodology.md.

    refuse → predict (``predict``) → fp32 reference: FLOPs on the meta device, drift output on a slice, freed
    (``reference``) → for each variant: load → first call → warm-up → steady state (interleaved blocks
    A B A B …, or one variant after another) (``session``: measuring) → typed results, stored (``record``)

A variant that raises is recorded as failed with its error (its measured siblings are kept); ``run_benchmark``
returns a :class:`~accelkit.core.bench_result.BenchRunResult` whose ``failed`` lists them. Ctrl-C stops the run,
stores the finished variants and re-raises nothing: the result says ``interrupted`` and which variants were not
finished.
"""

from __future__ import annotations

import signal
import sys
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelkit.bench.peaks import Peaks
from accelkit.bench.predict import predict_variant
from accelkit.bench.record import Recorder, RunRecord, StoreWriter
from accelkit.bench.reference import build_reference, freezing_heap
from accelkit.bench.session import Measurer
from accelkit.bench.trackers import run_peak_bytes
from accelkit.bench.variants import Variant, device_refusal
from accelkit.bench.workloads.base import BenchWorkload, check_workload
from accelkit.core import UserError
from accelkit.core.bench_result import BenchRunResult, Refusal
from accelkit.core.spec import Spec, spec_field
from accelkit.hardware import match_device_name
from accelkit.hardware.detect import environment, this_cpu
from accelkit.hardware.device import free_memory_bytes, resolve_device
from accelkit.timing import LoopConfig, timer_name

if TYPE_CHECKING:
    from accelkit.results import ResultStore

#: the largest seed ``torch.manual_seed`` / ``torch.Generator.manual_seed`` accept (an unsigned 64-bit integer)
SEED_MAX = 2**64 - 1

__all__ = ["SEED_MAX", "BenchConfig", "Peaks", "Reporter", "identify", "plan_variants", "predict_variant",
           "run_benchmark"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BenchConfig(Spec):
    """How a benchmark runs (the workload's own shapes live in its config)."""

    device: str = spec_field("auto", doc="'auto' (first GPU, else CPU), 'cpu' or 'cuda[:N]'.")
    loop: LoopConfig = spec_field(default_factory=LoopConfig, doc="Warm-up and stopping rule per variant.")
    interleave: bool = spec_field(True, doc="Run the variants' measured blocks in rounds (A B A B …).")
    seed: int = spec_field(0, min=0, max=SEED_MAX, doc="Seed of the random weights and inputs (0 to 2**64 - 1).")
    accuracy: bool = spec_field(True, doc="Compare each variant's output with fp32 on a fixed slice of the batch.")
    predict: bool = spec_field(True, doc="Store the planner's estimate beside each measurement.")
    auto_probe: bool = spec_field(True, doc="Without a stored `hw probe` of this device, run a quick one for MFU.")
    save: bool = spec_field(True, doc="Store each finished variant (Measurement + the planner's Estimate).")


class Reporter:
    """Progress callbacks; the CLI draws a progress bar from them. The default does nothing."""

    def refused(self, variant: str, reason: str) -> None: ...

    def failed(self, variant: str, phase: str, error: str) -> None: ...

    def status(self, text: str) -> None: ...

    def phase(self, lane: str, text: str) -> None: ...

    def progress(self, lane: str, iterations: int, measured_s: float, config: LoopConfig) -> None: ...

    def note(self, text: str) -> None: ...

    def stored(self, variant: str, result_ids: list[int]) -> None: ...


# ---- device ------------------------------------------------------------------------------------------
def identify(device: str) -> tuple[str, str | None]:
    """(hardware name as the store spells it, catalog name or None) — the same names `hw probe` uses."""
    if device == "cpu":
        return this_cpu(), None
    import torch

    name = torch.cuda.get_device_properties(device).name
    match = match_device_name(name)
    return (match.name if match else name), (match.name if match else None)


# ---- the run ---------------------------------------------------------------------------------------------
def plan_variants(
    workload: BenchWorkload,
    requested: list[Variant],
    device: str,
    reporter: Reporter,
    *,
    extra_refusal: Callable[[Variant], str | None] | None = None,
    world_size: int = 1,
    zero: int = 0,
) -> tuple[list[Variant], list[dict[str, str]]]:
    """Split the variants into runnable and refused (one line each, told to ``reporter``); ``extra_refusal``
    adds a caller's own reasons (e.g. what a distributed run cannot do); ``world_size`` and ``zero`` are the
    layout (gradient compression needs more than one process). Nothing runnable is a UserError."""
    candidates = workload.variants(requested)
    if not candidates:
        raise UserError(f"nothing to run: no variants were given for {workload.name}; pass at least one, "
                        "e.g. matrix(['fp32', 'bf16'])")
    runnable: list[Variant] = []
    refused: list[dict[str, str]] = []
    for v in candidates:
        reason = workload.refusal(v, device)
        if reason is None and workload.task != "input":
            reason = device_refusal(v, device, training=workload.task == "train", world_size=world_size, zero=zero)
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
) -> BenchRunResult:
    """Benchmark ``workload`` over ``requested`` variants; store each finished variant in ``store`` (with
    ``config.save``). A write the store refuses does not stop the run: the result keeps every measured variant
    and its ``store_error`` says why they were not stored (no later write is tried). The run seeds torch's
    global generators with ``config.seed`` (the same inputs and weights every run); the caller's generator state
    (CPU, and the GPU the run uses) is put back afterwards."""
    import torch

    config = config or BenchConfig()
    device = resolve_device(config.device)
    gpus = [torch.device(device).index or 0] if device.startswith("cuda") else []
    # freezing_heap: what survives a collection with no variant loaded is frozen for the run, handed back after it
    with torch.random.fork_rng(devices=gpus, device_type="cuda"), freezing_heap():
        return _run_benchmark(workload, requested, config, device, store=store, reporter=reporter or Reporter(),
                              run_id=run_id)


def _run_benchmark(workload: BenchWorkload, requested: list[Variant], config: BenchConfig, device: str, *,
                   store: ResultStore | None, reporter: Reporter, run_id: str | None) -> BenchRunResult:
    import torch

    runnable, refused = plan_variants(workload, requested, device, reporter)
    check_workload(workload, device)
    hardware, catalog = identify(device)
    record = RunRecord(workload=workload.name, label=workload.label, config=workload.config.to_dict(), device=device,
                       hardware=hardware, run_id=run_id or uuid.uuid4().hex[:12],
                       refused=[Refusal.from_dict(r) for r in refused],
                       environment={**environment(with_torch=True), "timer": timer_name(device),
                                    "bench": config.to_dict()})
    # one writer for the run: after a failed write nothing more is tried, and the result says why (not raised:
    # what was measured is kept); ``store`` itself is only read (stored probes), so it may be read-only with --no-save
    writer = StoreWriter(store if config.save else None)
    peaks = Peaks(device, hardware, catalog, store, config.auto_probe, reporter, writer=writer,
                  run_min_time_s=config.loop.min_time_s)
    if workload.task != "input":
        reporter.status("MFU peaks (catalog, `hw probe`)")
        peaks.prefetch([v.matmul_dtype for v in runnable])
    predictions: dict[str, Any] = {}
    for v in runnable:
        reporter.status(f"{v.name}: the planner's estimate")
        predictions[v.name] = (predict_variant(workload, v, device, catalog) if config.predict
                               else (None, "prediction turned off (--no-predict)"))
    interleave = _interleave(workload, config, runnable, predictions, device, record.notes)
    torch.manual_seed(config.seed)
    if device.startswith("cuda"):  # the run's own peak (the probe above is not part of the workload)
        torch.cuda.reset_peak_memory_stats(device)
    if workload.task != "input":
        reporter.status("fp32 reference: FLOPs on the meta device" + (
            ", drift output on a slice of the batch" if config.accuracy else ""))
    reference = build_reference(workload, runnable, device, seed=config.seed, accuracy=config.accuracy)
    record.notes.extend(reference.notes)
    flops_note_at = len(record.notes)  # where the fp32 variant's FLOPs note goes once it has run
    measurer = Measurer(workload, config, device, reporter, reference)
    recorder = Recorder(workload, config, device, record, writer, reporter, peaks, reference,
                        memory_scope=measurer.memory.scope if measurer.memory else measurer.memory_reason,
                        energy_scope=measurer.energy.scope if measurer.energy else None,
                        energy_reason=measurer.energy_reason)
    recorder.predictions = predictions
    recorder.interleaved = interleave
    restore = _catch_sigint(measurer)
    try:
        _run(measurer, recorder, runnable, interleave=interleave)
    except KeyboardInterrupt:
        record.interrupted, record.stopped_by = True, measurer.interrupt_signal
        recorder.store_finished(measurer.lanes)
        finished = {e.name for e in record.entries} | {f.name for f in measurer.failures}
        record.unfinished = [v.name for v in runnable if v.name not in finished]
    finally:
        restore()
        measurer.close_all()
        record.failed = list(measurer.failures)
        record.refused.extend(measurer.refusals)  # refused by a recipe as it was applied (after those known before)
        if (note := reference.flops_note(device, measurer.reference_variant_failure)) is not None:
            record.notes.insert(flops_note_at, note)
        record.peak_memory_bytes, record.peak_memory_scope = run_peak_bytes(device, measurer.memory)
        record.store_error = writer.error
        if writer.unstored:  # (after a resumed record's own: a distributed run's launches add theirs)
            record.unstored_results = [*(record.unstored_results or []), *writer.unstored]
    if measurer.refusals and len(measurer.refusals) == len(runnable):
        # every variant refused by its recipe as it was applied (`bench custom --precision int8` on a model without a
        # Linear): nothing ran, as when the device refuses them all before loading — a usage error, exit 2, not 0
        raise UserError("nothing to run: every variant was refused (" + "; ".join(
            f"{r.name}: {r.reason}" for r in record.refused) + ")")
    return record.result()


def _interleave(workload: BenchWorkload, config: BenchConfig, runnable: list[Variant], predictions: dict[str, Any],
                device: str, notes: list[str]) -> bool:
    """Whether the variants run interleaved: asked for, more than one, fair for the workload and, by the planner's
    estimates, resident together; a note says why not when one of the last two stops it."""
    if not (config.interleave and len(runnable) > 1):
        return False
    if not workload.can_interleave:
        notes.append(f"{workload.name} variants ran one after another (interleaving would be unfair here)")
        return False
    if why := _too_big_together(predictions, device):
        notes.append(f"variants ran one after another, not interleaved: {why}")
        return False
    return True


def _too_big_together(predictions: dict[str, Any], device: str) -> str | None:
    """Why the variants cannot all be resident at once (interleaving keeps every one loaded), from the planner's
    memory estimates; None when they fit or there is no estimate to go by."""
    totals = [e.memory_bytes.get("total") for e, _ in predictions.values() if e is not None]
    if len(totals) != len(predictions) or not all(totals):
        return None
    free = free_memory_bytes(device)
    need = sum(totals)
    if need <= 0.9 * free:
        return None
    return (f"together they need about {need / 1e9:.1f} GB by the planner's estimate and {device} has "
            f"{free / 1e9:.1f} GB free, so each is measured and freed before the next")


def _run(measurer: Measurer, recorder: Recorder, variants: list[Variant], *, interleave: bool) -> None:
    for v in variants:
        lanes = measurer.setup(v)
        if not interleave and lanes:
            measurer.measure(lanes)
            recorder.store_finished(measurer.lanes)
            measurer.close(v.name)
    if interleave:
        measurer.measure(measurer.lanes)
        recorder.store_finished(measurer.lanes)


def _catch_sigint(session: Measurer) -> Callable[[], None]:
    """Ctrl-C raises KeyboardInterrupt at once *and* sets a flag that the run checks between blocks and
    phases: an interrupt that lands inside a finalizer (``__del__``) is swallowed by Python, the flag is
    not. While the run lasts, such a swallowed interrupt is also kept off stderr (Python would print it
    as an "ignored exception" traceback); other unraisable errors still print. Returns the function that
    puts the previous handler and hook back (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    previous, previous_hook = signal.getsignal(signal.SIGINT), sys.unraisablehook
    previous_term = signal.getsignal(signal.SIGTERM)

    def handler(signum: int, frame: Any) -> None:
        session.interrupt_requested = True
        session.interrupt_signal = signal.Signals(signum).name
        raise KeyboardInterrupt

    def unraisable(info: Any) -> None:
        if not issubclass(info.exc_type, KeyboardInterrupt):
            previous_hook(info)

    def restore() -> None:
        signal.signal(signal.SIGINT, previous)
        signal.signal(signal.SIGTERM, previous_term)
        sys.unraisablehook = previous_hook

    signal.signal(signal.SIGINT, handler)
    # SIGTERM (a job scheduler, `timeout`, `kill`) keeps the finished variants as Ctrl-C does: it ended the run
    # silently and stored nothing
    signal.signal(signal.SIGTERM, handler)
    sys.unraisablehook = unraisable
    return restore
