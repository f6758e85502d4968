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

import os
import uuid
from typing import TYPE_CHECKING, Any

from accelkit.bench.record import StoreWriter
from accelkit.bench.runner import BenchConfig, Peaks, Reporter, identify, plan_variants
from accelkit.bench.workloads.base import check_workload
from accelkit.core import UserError
from accelkit.core.bench_result import BenchRunResult, Refusal
from accelkit.distributed.launch import DistConfig, LaunchInterrupted, launch
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
    world_size = dist.nproc_per_node * dist.nnodes_range[0]
    runnable, refused = plan_variants(workload, requested, device, reporter,
                                      extra_refusal=lambda v: refusal(workload, v), world_size=world_size,
                                      zero=dist.zero)
    check_workload(workload, device)
    if device.startswith("cuda"):
        import torch

        if dist.nproc_per_node > torch.cuda.device_count():
            raise UserError(f"--nproc-per-node {dist.nproc_per_node} exceeds the {torch.cuda.device_count()} GPUs "
                            "this node has; use one process per GPU")
    elif dist.nproc_per_node > (cores := len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity")
                                else (os.cpu_count() or 1)):
        raise UserError(f"--nproc-per-node {dist.nproc_per_node} exceeds the {cores} CPU cores this process may use; "
                        "a CPU rank needs a core of its own — give at most that many")
    hardware, catalog = identify(device)
    writer = StoreWriter(store if config.save else None)  # the quick probe's row (the ranks store their own)
    peaks = Peaks(device, hardware, catalog, store, config.auto_probe, reporter, writer=writer)
    dtypes = list(dict.fromkeys(v.matmul_dtype for v in runnable))
    peaks.prefetch(dtypes)
    run_id = run_id or uuid.uuid4().hex[:12]
    notes = []
    compressed = any(v.compression != "none" for v in runnable)
    # one launch per dtype (each gets the peak of its own dtype); a compressed variant runs in the same launch as
    # its uncompressed twin, so that rank 0 can gate its loss before it stores the result
    launches: dict[str, list[Variant]] = {}
    for v in runnable:
        launches.setdefault(v.matmul_dtype, []).append(v)
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
    docs: list[dict[str, Any]] = []

    def store_error() -> str | None:
        """The first refused write: the probe's row, or a launch's rank 0 (the CLI prints what was not stored)."""
        return writer.error or next((d["store_error"] for d in docs if d.get("store_error")), None)

    def keep(document: dict[str, Any]) -> None:
        docs.append(document)
        if document["variants"]:
            reporter.stored(", ".join(e["name"] for e in document["variants"]),
                            [e["result_id"] for e in document["variants"] if e.get("result_id")])

    interrupted = False
    try:
        for dtype, group in launches.items():
            peak, datasheet, probe = peaks.get(dtype), peaks.datasheet(dtype), peaks.probe(dtype)
            job = {
                "task": "bench", "device": "cpu" if device == "cpu" else "auto", "backend": dist.backend,
                # after a launch whose rank 0 could not store, no later launch tries (its variants are kept unstored)
                "run_id": run_id, "save": config.save and store is not None and store_error() is None,
                "store_path": str(store.path) if store is not None else None, "predict": config.predict,
                "workload": workload.name, "config": workload.config.to_dict(),
                "variants": [v.to_dict() for v in group], "grad_comm": compressed,
                "quality_steps": quality.quality_steps if compressed else 0,
                "max_loss_increase": quality.max_loss_increase,
                "loop": config.loop.to_dict(), "seed": config.seed, "zero": dist.zero,
                "layout": f"{dist.nproc_per_node}×{dist.nnodes} nodes, zero {dist.zero}",
                "peak": {"flops": peak.flops, "source": peak.source}, "bench_config": config.to_dict(),
                "datasheet": None if datasheet is None else {"flops": datasheet.flops, "source": datasheet.source},
                "probe": {"flops": probe.flops, "source": probe.source},
                "rendezvous": dist.rendezvous, "refused": refused, "notes": notes,
            }
            reporter.phase(", ".join(v.name for v in group), f"torchrun: {dist.nproc_per_node} per node × "
                           f"{dist.nnodes} node(s), {dist.rendezvous} rendezvous, zero {dist.zero}")
            result = launch(job, dist, on_line=reporter.note)
            if result.document is not None:
                if result.teardown_error is not None:
                    result.document["notes"] = [*result.document.get("notes", []),
                                                f"warning: {result.teardown_error}"]
                keep(result.document)
    except KeyboardInterrupt as stop:
        # as a single-process bench: the variants rank 0 stored before Ctrl-C are kept (a stopped launch hands back
        # its last progress document, LaunchInterrupted), the others are named; no later launch starts
        if isinstance(stop, LaunchInterrupted) and stop.document is not None:
            keep(stop.document)
        if not any(d["variants"] for d in docs):
            raise  # nothing finished, nothing to keep: a plain interrupt (a sweep counts its point as not run)
        interrupted = True
    if not docs:  # this node did not host global rank 0
        return BenchRunResult(
            workload=workload.name, label=workload.label, config=workload.config.to_dict(), device=device,
            hardware=hardware, run_id=run_id, refused=[Refusal.from_dict(r) for r in refused], ranks=[],
            notes=[*notes, "global rank 0 ran on another node: the result is stored there"])
    first = docs[0]
    for doc in docs[1:]:
        first["variants"] += doc["variants"]
        first["result_ids"] += doc["result_ids"]
        # the run's notes are in every launch's document; a later launch's own (its variants' recipe notes, a rank
        # that failed shutting down) were dropped here
        seen = set(first.get("notes", []))  # each launch's warning stays, even when it reads as another's
        first["notes"] = [*first.get("notes", []),
                          *(n for n in doc.get("notes", []) if n.startswith("warning: ") or n not in seen)]
    if (error := store_error()) is not None:
        first["store_error"] = error
    if interrupted:
        finished = {e["name"] for e in first["variants"]}
        first["interrupted"], first["unfinished"] = True, [v.name for v in runnable if v.name not in finished]
    return BenchRunResult.from_dict(first)
