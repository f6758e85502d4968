"""`accelkit bench WORKLOAD --nproc-per-node N [--zero 0|2|3] [--nnodes …]`: the launching side.

    refuse → peak for MFU (catalog, or the stored probe; a quick probe when allowed) → torchrun → rank 0's
    document (already stored by rank 0, under this run id)

Everything that can be said to the user before any rank starts is checked here, so that a mistake is one
sentence, not a traceback from every rank.
"""

from __future__ import annotations

import os
import uuid
from typing import TYPE_CHECKING

from accelkit.bench.runner import BenchConfig, Peaks, Reporter, identify, plan_variants, resolve_device
from accelkit.core import UserError
from accelkit.core.bench_result import BenchRunResult, Refusal
from accelkit.distributed.launch import DistConfig, launch
from accelkit.distributed.parallel import refusal

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
) -> BenchRunResult:
    """Run ``workload``'s training step on ``dist.nproc_per_node`` ranks per node (× nodes); rank 0's typed result
    (with ``world_size``, ``num_nodes``, ``layout``, ``zero`` and ``ranks`` filled; each variant entry carries its
    ``ranks`` and ``memory_check``)."""
    reporter = reporter or Reporter()
    device = resolve_device(config.device)  # this node's device type; each rank takes cuda:LOCAL_RANK
    runnable, refused = plan_variants(workload, requested, device, reporter,
                                      extra_refusal=lambda v: refusal(workload, v))
    workload.check(device)
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
    peaks = Peaks(device, hardware, catalog, store, config.auto_probe, reporter)
    dtypes = list(dict.fromkeys(v.matmul_dtype for v in runnable))
    peaks.prefetch(dtypes)
    run_id = run_id or uuid.uuid4().hex[:12]
    notes = []
    if len(runnable) > 1:
        notes.append("distributed variants run one after another (one torchrun launch each, not interleaved)")
    docs = []
    for v in runnable:  # one launch per variant: each gets the peak of its own dtype
        peak, datasheet, probe = peaks.get(v.matmul_dtype), peaks.datasheet(v.matmul_dtype), peaks.probe(v.matmul_dtype)
        job = {
            "task": "bench", "device": "cpu" if device == "cpu" else "auto", "backend": dist.backend,
            "run_id": run_id, "save": config.save and store is not None,
            "store_path": str(store.path) if store is not None else None, "predict": config.predict,
            "workload": workload.name, "config": workload.config.to_dict(), "variants": [v.to_dict()],
            "loop": config.loop.to_dict(), "seed": config.seed, "zero": dist.zero,
            "layout": f"{dist.nproc_per_node}×{dist.nnodes} nodes, zero {dist.zero}",
            "peak": {"flops": peak.flops, "source": peak.source}, "bench_config": config.to_dict(),
            "datasheet": None if datasheet is None else {"flops": datasheet.flops, "source": datasheet.source},
            "probe": {"flops": probe.flops, "source": probe.source},
            "rendezvous": dist.rendezvous, "refused": refused, "notes": notes,
        }
        reporter.phase(v.name, f"torchrun: {dist.nproc_per_node} per node × {dist.nnodes} node(s), "
                               f"{dist.rendezvous} rendezvous, zero {dist.zero}")
        result = launch(job, dist, on_line=reporter.note)
        if result.document is not None:
            docs.append(result.document)
            reporter.stored(v.name, [e["result_id"] for e in result.document["variants"] if e.get("result_id")])
    if not docs:  # this node did not host global rank 0
        return BenchRunResult(
            workload=workload.name, label=workload.label, config=workload.config.to_dict(), device=device,
            hardware=hardware, run_id=run_id, refused=[Refusal.from_dict(r) for r in refused], ranks=[],
            notes=[*notes, "global rank 0 ran on another node: the result is stored there"])
    first = docs[0]
    for doc in docs[1:]:
        first["variants"] += doc["variants"]
        first["result_ids"] += doc["result_ids"]
    return BenchRunResult.from_dict(first)
