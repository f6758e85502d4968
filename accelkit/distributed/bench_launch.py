"""`accelkit bench WORKLOAD --nproc-per-node N [--zero 0|2|3] [--nnodes …]`: the launching side.

    refuse → peak for MFU (catalog, or the stored probe; a quick probe when allowed) → torchrun → rank 0's
    document (already stored by rank 0, under this run id)

Ctrl-C during the launches ends as it does in a single-process bench: the ranks are stopped, the variants rank 0
had stored come back (its progress document) with ``interrupted`` and the ``unfinished`` ones named, and the CLI
prints them and exits 130. Before any variant finished there is nothing to keep: the interrupt goes on.

Everything that can be said to the user before any rank starts is checked here, so that a mistake is one
sentence, not a traceback from every rank.
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from accelkit.bench.record import RunRecord, StoreWriter
from accelkit.bench.runner import BenchConfig, Peaks, Reporter, identify, plan_variants
from accelkit.bench.workloads.base import check_workload
from accelkit.core import UserError
from accelkit.core.bench_result import BenchRunResult, Failure, Refusal
from accelkit.distributed.launch import (
    DistConfig,
    LaunchFailed,
    LaunchInterrupted,
    check_endpoint_host,
    check_processes,
    check_rdzv_id,
    launch,
)
from accelkit.distributed.parallel import refusal
from accelkit.distributed.quality import QualityConfig
from accelkit.hardware.device import resolve_device

if TYPE_CHECKING:
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads.base import BenchWorkload
    from accelkit.results import ResultStore


def run_distributed_bench(
    workload: BenchWorkload,
    requested: list[Variant],
    config: BenchConfig,
    dist: DistConfig,
    *,
    store: ResultStore | None = None,
    reporter: Reporter | None = None,
    run_id: str | None = None,
    quality: QualityConfig | None = None,
) -> BenchRunResult:
    """Run ``workload``'s training step on ``dist.nproc_per_node`` ranks per node (× nodes); rank 0's typed result
    (with ``world_size``, ``num_nodes``, ``layout``, ``zero`` and ``ranks`` filled; each variant entry carries its
    ``ranks`` and ``memory_check``, and with gradient compression ``grad_comm`` and ``quality``). Ctrl-C returns the
    variants finished so far, ``interrupted`` and the ``unfinished`` named, as :func:`~accelkit.bench.runner.
    run_benchmark` does; before any variant finished it is re-raised (nothing to keep)."""
    reporter = reporter or Reporter()
    quality = quality or QualityConfig()
    device = resolve_device(config.device)  # this node's device type; each rank takes cuda:LOCAL_RANK
    if dist.backend == "nccl" and not device.startswith("cuda"):
        raise UserError(f"--backend nccl needs CUDA GPUs, but this run is on the CPU (--device {config.device}); use "
                        "--backend gloo (or auto: NCCL on GPUs, gloo on CPUs)")
    check_rdzv_id(dist)
    check_endpoint_host(dist)  # before the quick probe: seconds to a refusal, not after it
    world_size = dist.nproc_per_node * dist.nnodes_range[0]
    runnable, refused = plan_variants(workload, requested, device, reporter,
                                      extra_refusal=lambda v: refusal(workload, v), world_size=world_size,
                                      zero=dist.zero)
    check_workload(workload, device)
    check_processes(dist.nproc_per_node, device)
    hardware, catalog = identify(device)
    writer = StoreWriter(store if config.save else None)  # the quick probe's row (the ranks store their own)
    peaks = Peaks(device, hardware, catalog, store, config.auto_probe, reporter, writer=writer,
                  run_min_time_s=config.loop.min_time_s)
    peaks.prefetch(list(dict.fromkeys(v.matmul_dtype for v in runnable)))
    run_id = run_id or uuid.uuid4().hex[:12]
    compressed = any(v.compression != "none" for v in runnable)
    notes = _notes(runnable, dist, quality, compressed=compressed)
    # one launch per dtype (each gets the peak of its own dtype); a compressed variant runs in the same launch as
    # its uncompressed twin, so that rank 0 can gate its loss before it stores the result
    launches: dict[str, list[Variant]] = {}
    for v in runnable:
        launches.setdefault(v.matmul_dtype, []).append(v)
    docs = _Documents(writer, reporter)
    interrupted = False
    try:
        for dtype, group in launches.items():
            # after a launch whose rank 0 could not store, no later launch tries (its variants are kept unstored)
            save = config.save and store is not None and docs.store_error() is None
            job = _job(workload, group, config, dist, quality, run_id=run_id, device=device, store=store, save=save,
                       compressed=compressed, peaks=_peaks_job(peaks, dtype), refused=refused, notes=notes)
            reporter.phase(", ".join(v.name for v in group), f"torchrun: {dist.nproc_per_node} per node × "
                           f"{dist.nnodes} node(s), {dist.rendezvous} rendezvous, zero {dist.zero}")
            try:
                result = launch(job, dist, on_line=reporter.note)
            except LaunchFailed as failed:
                docs.failed(failed, group)  # the next launch runs, as a single-process bench's next variant does
                continue
            if result.document is not None:
                if result.teardown_error is not None:
                    result.document["notes"] = [*result.document.get("notes", []),
                                                f"warning: {result.teardown_error}"]
                docs.keep(result.document)
    except KeyboardInterrupt as stop:
        # as a single-process bench: the variants rank 0 stored before Ctrl-C are kept (a stopped launch hands back
        # its last progress document, LaunchInterrupted), the others are named; no later launch starts
        if isinstance(stop, LaunchInterrupted) and stop.document is not None:
            docs.keep(stop.document)
        if not docs.measured():
            raise  # nothing finished, nothing to keep: a plain interrupt (a sweep counts its point as not run)
        interrupted = True
    if docs.first_failure is not None and not docs.measured():
        raise docs.first_failure  # nothing measured: the ranks' error is the whole answer, as before
    return _run_result(docs, workload, runnable, interrupted=interrupted, device=device, hardware=hardware,
                       run_id=run_id, refused=refused, notes=notes)


class _Documents:
    """The launches' rank-0 documents as they come back, each variant it stored reported."""

    def __init__(self, writer: StoreWriter, reporter: Reporter):
        self.writer, self.reporter = writer, reporter
        self.docs: list[dict[str, Any]] = []
        #: the variants of launches whose ranks failed, and the first such failure
        self.failures: list[Failure] = []
        self.first_failure: LaunchFailed | None = None

    def measured(self) -> bool:
        return any(d["variants"] for d in self.docs)

    def failed(self, failed: LaunchFailed, group: list[Variant]) -> None:
        """A launch's ranks failed: as a single-process bench's variant that raises, the variants measured before it
        — an earlier launch's, or this one's that rank 0 had stored (its progress document) — are kept and the rest
        of ``group`` is failed (a later precision's failure threw away the measurements printed and stored before
        it, under --no-save lost for good; found in a hunt)."""
        self.first_failure = self.first_failure or failed
        if failed.document is not None:
            self.keep(failed.document)
        done = {e["name"] for e in (failed.document or {}).get("variants", [])}
        for v in group:
            if v.name not in done:
                self.failures.append(Failure(name=v.name, phase="launch", error=str(failed)))
                self.reporter.failed(v.name, "launch", str(failed))

    def store_error(self) -> str | None:
        """The first refused write: the probe's row, or a launch's rank 0 (the CLI prints what was not stored)."""
        return self.writer.error or next((d["store_error"] for d in self.docs if d.get("store_error")), None)

    def keep(self, document: dict[str, Any]) -> None:
        self.docs.append(document)
        if document["variants"]:
            self.reporter.stored(", ".join(e["name"] for e in document["variants"]),
                                 [e["result_id"] for e in document["variants"] if e.get("result_id")])


def _job(workload: BenchWorkload, group: list[Variant], config: BenchConfig, dist: DistConfig, quality: QualityConfig,
         *, run_id: str, device: str, store: ResultStore | None, save: bool, compressed: bool, peaks: dict[str, Any],
         refused: list[dict[str, Any]], notes: list[str]) -> dict[str, Any]:
    """One launch's job (JSON, what ``accelkit.distributed.worker`` runs on every rank): the variants of one dtype."""
    return {
        "task": "bench", "device": "cpu" if device == "cpu" else "auto", "backend": dist.backend,
        "run_id": run_id, "save": save, "store_path": str(store.path) if store is not None else None,
        "predict": config.predict, "workload": workload.name, "config": workload.config.to_dict(),
        "variants": [v.to_dict() for v in group], "grad_comm": compressed,
        "quality_steps": quality.quality_steps if compressed else 0,
        "max_loss_increase": quality.max_loss_increase,
        "loop": config.loop.to_dict(), "seed": config.seed, "zero": dist.zero,
        "layout": f"{dist.nproc_per_node}×{dist.nnodes} nodes, zero {dist.zero}",
        **peaks, "bench_config": config.to_dict(),
        "rendezvous": dist.rendezvous, "refused": refused, "notes": notes,
    }


def _notes(runnable: list[Variant], dist: DistConfig, quality: QualityConfig, *, compressed: bool) -> list[str]:
    """What the reader should know about how the variants ran (in every launch's document)."""
    notes = []
    if len(runnable) > 1:
        notes.append("distributed variants run one after another (one torchrun launch per precision, not interleaved)")
    if compressed:
        notes.append("with --grad-compression every variant's gradient bytes are counted: " + (
            "the none variant runs torch's allreduce_hook (the built-in reducer's all-reduce, in Python) instead of "
            "DDP's C++ reducer" if dist.zero == 0 else "FSDP2's reduce-scatter runs through a counting "
            "FSDPModule.set_custom_reduce_scatter (torch's DefaultReduceScatter underneath)"))
        if quality.quality_steps:
            notes.append(f"quality check: each variant trains {quality.quality_steps} more steps on a learnable "
                         "synthetic task from the same weights; a compressed variant's final loss must be within "
                         f"{quality.max_loss_increase:.0%} of its uncompressed twin's" + (
                             "; with PowerSGD every variant first trains the largest --powersgd-start-iter steps "
                             "(plain all-reduce there), so the compared steps are compressed"
                             if any(v.compression == "powersgd" for v in runnable) else ""))
    return notes


def _peaks_job(peaks: Peaks, dtype: str) -> dict[str, Any]:
    """The peaks a launch's MFU is taken against, as its job carries them (the probe's always, the datasheet's when
    there is one)."""
    peak, datasheet, probe = peaks.get(dtype), peaks.datasheet(dtype), peaks.probe(dtype)
    return {"peak": {"flops": peak.flops, "source": peak.source},
            "datasheet": None if datasheet is None else {"flops": datasheet.flops, "source": datasheet.source},
            "probe": {"flops": probe.flops, "source": probe.source}}


def _run_result(docs: _Documents, workload: BenchWorkload, runnable: list[Variant], *, interrupted: bool,
                device: str, hardware: str, run_id: str, refused: list[dict[str, Any]],
                notes: list[str]) -> BenchRunResult:
    """The run's result: the launches' documents merged (interrupted: the variants not finished named), or — when
    global rank 0 ran on another node — a result that says so."""
    if not docs.docs:  # this node did not host global rank 0
        return RunRecord(
            workload=workload.name, label=workload.label, config=workload.config.to_dict(), device=device,
            hardware=hardware, run_id=run_id, environment={}, refused=[Refusal.from_dict(r) for r in refused],
            ranks=[], notes=[*notes, "global rank 0 ran on another node: the result is stored there"]).result()
    record = _merge(docs.docs)
    record.store_error = docs.store_error() or record.store_error
    record.failed = [*record.failed, *docs.failures]
    if docs.writer.unstored:  # (the quick probe's row)
        record.unstored_results = [*docs.writer.unstored, *(record.unstored_results or [])]
    if interrupted:
        finished = {e.name for e in record.entries}
        record.interrupted, record.unfinished = True, [v.name for v in runnable if v.name not in finished]
    return record.result()


def _merge(docs: list[dict[str, Any]]) -> RunRecord:
    """The launches' rank-0 documents as one run: the first's, with each later launch's variants, result ids and
    own notes (its variants' recipe notes, a rank that failed shutting down) added."""
    record = RunRecord.resume(BenchRunResult.from_dict(docs[0]))
    for doc in docs[1:]:
        later = BenchRunResult.from_dict(doc)
        record.entries += later.variants
        record.result_ids += later.result_ids
        if later.unstored_results:
            record.unstored_results = [*(record.unstored_results or []), *later.unstored_results]
        # the run's notes are in every launch's document; a later launch's own were dropped here
        seen = set(record.notes)  # each launch's warning stays, even when it reads as another's
        record.notes += [n for n in later.notes if n.startswith("warning: ") or n not in seen]
    return record
