"""Rank 0's side of a distributed bench: the per-rank results gathered → one typed :class:`BenchResult` per
variant (the type ``accelkit bench`` builds, with ``world_size``, ``ranks`` and the memory check filled) → the
planner's estimate for the same layout (dp = world size, the ZeRO stage) and ONE Measurement in the store (a
refused write is kept in the document, never lost: ``store_error``).

Timing: every rank runs the same iterations (the agreed loop), a step is bulk-synchronous, so the step
latency of iteration i is the slowest rank's; throughput = world items per step × iterations ÷ the
slowest rank's measured time.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from accelkit.bench.metrics import FLOPS_SOURCE_ON_DEVICE, Peak, mfu_result
from accelkit.bench.predict import predict_variant, prediction, variant_spec
from accelkit.bench.record import StoreWriter
from accelkit.bench.runner import identify
from accelkit.core import AccelkitError, Estimate, Measurement, summarize
from accelkit.core.bench_result import (
    Accuracy,
    BenchResult,
    BenchRunResult,
    Energy,
    MemoryUse,
    Phases,
    Refusal,
    Throughput,
)
from accelkit.timing import timer_name

if TYPE_CHECKING:
    from accelkit.distributed.worker import RankContext

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


def plan_layout(workload: Any, variant: Any, *, world_size: int, local_world_size: int, zero: int,
                device: str, catalog: str | None) -> tuple[Estimate | None, str | None]:
    """The planner's estimate for this layout (``accelkit.bench.predict``, as a single-process bench), or
    (None, why not)."""
    per_node = None
    if device.startswith("cuda") and catalog is not None:
        from accelkit.plan import resolve_hardware

        per_node = local_world_size if local_world_size <= resolve_hardware(catalog).scaleup_domain else None
    return predict_variant(workload, variant, device, catalog if device.startswith("cuda") else None,
                           dp=world_size, zero=zero, devices_per_node=per_node,
                           cpu_share=local_world_size if device == "cpu" else 1)


def rank_share(peak: Peak, ranks: int) -> Peak:
    """The part of a CPU's peak one of ``ranks`` ranks on it has (cores ÷ ranks threads each)."""
    return Peak(None if peak.flops is None else peak.flops / ranks, f"{peak.source} ÷ {ranks} ranks sharing it")


def memory_check(ranks: list[dict[str, Any]], estimate: Estimate | None, zero: int) -> dict[str, Any]:
    """Measured model states per rank beside the planner's ZeRO-stage figure for the same layout."""
    measured = [r["memory_bytes"]["model_states"] for r in ranks]
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


def grad_comm_check(ranks: list[dict[str, Any]], estimate: Estimate | None, compression: str) -> dict[str, Any] | None:
    """Counted gradient bytes per step per rank beside the planner's ``grad_reduction`` for the same layout."""
    counted = [r.get("grad_comm") for r in ranks]
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
                  job: dict[str, Any]) -> dict[str, Any] | None:
    """The loss gate of a compressed variant against its uncompressed twin (or the reference's own curve)."""
    mine = (quality or {}).get(variant.name)
    if mine is None:
        return None
    from accelkit.recipes.grad_compression import gate_document, loss_gate

    if variant.compression == "none":
        return {"role": "reference", "steps": len(mine["losses"]), **mine}
    reference = variant.without_compression().name
    ref = (quality or {}).get(reference)
    if ref is None:
        return {"role": "candidate", **mine, "note": f"no reference run {reference} to compare with"}
    gate = loss_gate(ref["losses"], mine["losses"], reference_eval=ref["eval_loss"], candidate_eval=mine["eval_loss"],
                     max_loss_increase=job["max_loss_increase"], reference_name=reference, name=variant.name)
    return {"role": "candidate", **gate_document(gate, mine["losses"]), "eval_loss": mine["eval_loss"],
            "reference_losses": ref["losses"], "reference_eval_loss": ref["eval_loss"]}


def rank_detail(r: dict[str, Any]) -> dict[str, Any]:
    samples = r["samples_s"]
    measured = sum(r["block_walls_s"])
    return {
        "rank": r["rank"], "local_rank": r["local_rank"], "host": r["host"], "device": r["device"],
        "iterations": len(samples), "measured_s": measured,
        "latency_median_s": summarize(samples).median if samples else None,
        "throughput": len(samples) * r["items"] / measured if measured else None,
        "load_s": r["load_s"], "first_call_s": r["first_call_s"], "flops_per_step": r["flops_per_call"],
        "memory_bytes": r["memory_bytes"], "peak_scope": r["peak_scope"],
        **({"grad_comm": r["grad_comm"]} if r.get("grad_comm") else {}),
    }


def slowest_rank_latency(ranks: list[dict[str, Any]]) -> list[float]:
    """Each measured step's latency: the slowest rank's time for it (the step ends when every rank is done)."""
    return [max(xs) for xs in zip(*(r["samples_s"] for r in ranks), strict=True)]


def variant_entry(ctx: RankContext, workload: Any, variant: Any, ranks: list[dict[str, Any]], job: dict[str, Any],
                  estimate: Estimate | None, reason: str | None, estimate_id: int | None,
                  losses: dict[str, dict[str, Any] | None] | None = None) -> BenchResult:
    """The typed result of one variant, from every rank's measurements (the same type a single-process bench
    builds in ``accelkit.bench.record``)."""
    latency = slowest_rank_latency(ranks)
    stats = summarize(latency)
    measured_s = sum(ranks[0]["agreed_walls_s"])
    items_per_step = sum(r["items"] for r in ranks)
    throughput = len(latency) * items_per_step / measured_s if measured_s > 0 else None
    unit = f"{ranks[0]['unit']}/s"
    flops_per_item = ranks[0]["flops_per_call"] / ranks[0]["items"] if ranks[0]["flops_per_call"] else None
    per_device = throughput / ctx.world_size if throughput else None
    peak = Peak(job["peak"]["flops"], job["peak"]["source"])
    datasheet = Peak(**job["datasheet"]) if job.get("datasheet") else None
    probe = Peak(**job["probe"]) if job.get("probe") else None
    source = (FLOPS_SOURCE_ON_DEVICE + " on rank 0; MFU per device = world throughput ÷ world_size ÷ peak"
              if flops_per_item else "not counted")
    if ctx.device == "cpu" and ctx.local_world_size > 1:  # the ranks of a node share its CPU: each has its share
        peak = rank_share(peak, ctx.local_world_size)
        datasheet = None if datasheet is None else rank_share(datasheet, ctx.local_world_size)
        probe = None if probe is None else rank_share(probe, ctx.local_world_size)
        source += f"; on a CPU each rank's peak is the CPU's ÷ {ctx.local_world_size} (the ranks on it)"
    mfu = mfu_result(flops_per_item, per_device, peak, source, datasheet=datasheet, probe=probe,
                     analytic_flops_per_item=ranks[0]["analytic_flops_per_item"],
                     analytic_formula=ranks[0]["analytic_formula"])
    spec = variant_spec(workload, variant, dp=ctx.world_size, zero=job["zero"])
    return BenchResult(
        name=variant.name, step="train step", precision=variant.effective_precision if not variant.settings else None,
        options={**variant.options, **variant.settings}, recipe=spec.recipe if spec is not None else None,
        recipe_notes=list(ranks[0].get("recipe_notes", [])),
        world_size=ctx.world_size, num_nodes=ctx.num_nodes, layout=layout_name(ctx.world_size, job["zero"]),
        backend=ctx.backend,
        phases=Phases(load_s=max(r["load_s"] for r in ranks), first_call_s=max(r["first_call_s"] for r in ranks),
                      warmup_iterations=ranks[0]["warmup_iterations"], warmup_s=ranks[0]["warmup_s"],
                      measured_iterations=len(latency), measured_s=measured_s, blocks=len(ranks[0]["agreed_walls_s"])),
        latency_s=stats, latency_name="step latency (slowest rank)", unbacked_percentiles=list(stats.unbacked),
        noise=stats.noise, throughput=Throughput(value=throughput, unit=unit, per_device=per_device), mfu=mfu,
        memory_bytes=MemoryUse(peak=max(r["memory_bytes"]["peak"] for r in ranks),
                               model_states=max(r["memory_bytes"]["model_states"] for r in ranks)),
        memory_scope=ranks[0]["peak_scope"] + "; model states: " + MEMORY_SCOPE,
        memory_check=memory_check(ranks, estimate, job["zero"]),
        energy=Energy(reason="not measured on distributed runs yet (one counter per node would be needed)"),
        accuracy=Accuracy(note="no fp32 drift on distributed runs (each rank trains on its own batch)"),
        predicted=prediction(estimate, "train step", items_per_step, unit, throughput, estimate_id),
        predicted_reason=reason, timer=timer_name(ctx.device) + ", per rank; the step is the slowest rank's",
        ranks=[rank_detail(r) for r in ranks],
        grad_comm=grad_comm_check(ranks, estimate, variant.compression),
        quality=quality_check(variant, losses, job),
    )


def measurement(label: str, workload: Any, variant: Any, entry: BenchResult, hardware: str,
                details: dict[str, Any], ranks: list[dict[str, Any]], environment: dict[str, Any], zero: int,
                world_size: int) -> Measurement:
    mem = {k: max(int(r["memory_bytes"][k]) for r in ranks) for k in ("parameters", "gradients", "optimizer")}
    latency = slowest_rank_latency(ranks)
    samples = {"latency_s": latency, "block_wall_s": ranks[0]["agreed_walls_s"],
               **{f"rank{r['rank']}_latency_s": r["samples_s"] for r in ranks}}
    return entry.to_measurement(
        label=label, workload=workload.name, config=details["config"], device=details["device"], hardware=hardware,
        environment=environment, spec=variant_spec(workload, variant, dp=world_size, zero=zero), samples=samples,
        num_devices=world_size, memory={**mem, "total": int(entry.memory_bytes.peak or 0)},
    )


@contextmanager
def open_writer(job: dict[str, Any]) -> Iterator[StoreWriter]:
    """Rank 0's store writer for ``job`` (``accelkit.bench.record``; the bench's and the collective probe's), its
    store closed on leaving; a store that cannot even be opened is its first failed write: nothing is tried, the
    measurements are kept."""
    from accelkit.results import ResultStore

    writer = StoreWriter(None)
    if job["save"]:
        try:
            writer = StoreWriter(ResultStore(job["store_path"]) if job.get("store_path") else ResultStore())
        except AccelkitError as exc:
            writer.error = str(exc)
    try:
        yield writer
    finally:
        if writer.store is not None:
            writer.store.close()


class BenchDocument:
    """Rank 0's document of one launch, built variant by variant: each variant's Measurement (+ Estimate) is stored
    the moment it is added, as a single-process bench stores each finished variant, so that a launch stopped later
    (Ctrl-C) has lost none of it. As in a single-process bench, a write the store refuses stops the writing, not
    the run: every variant is in the document, those not stored without a ``result_id``, and ``store_error`` says
    why (the CLI prints the document and exits 1)."""

    def __init__(self, ctx: RankContext, workload: Any, job: dict[str, Any], writer: StoreWriter):
        from accelkit.hardware.detect import environment

        self.ctx, self.workload, self.job, self.writer = ctx, workload, job, writer
        self.hardware, self.catalog = identify(ctx.device)
        self.environment = {
            **environment(with_torch=True), "timer": timer_name(ctx.device), "bench": job["bench_config"],
            "distributed": {"backend": ctx.backend, "world_size": ctx.world_size, "num_nodes": ctx.num_nodes,
                            "nproc_per_node": ctx.local_world_size, "launcher": "torchrun",
                            "rendezvous": job.get("rendezvous")}}
        self.entries: list[BenchResult] = []
        self.result_ids: list[int] = []

    def add(self, variant: Any, ranks: list[dict[str, Any]],
            losses: dict[str, dict[str, Any] | None] | None = None) -> BenchResult:
        """Build ``variant``'s result from every rank's measurements and store it; the entry, with its ``result_id``
        (None: not stored)."""
        ctx, workload, job, writer = self.ctx, self.workload, self.job, self.writer
        run_id = job["run_id"]
        estimate: Estimate | None = None
        reason: str | None = "prediction turned off (--no-predict)"
        if job["predict"]:
            estimate, reason = plan_layout(workload, variant, world_size=ctx.world_size,
                                           local_world_size=ctx.local_world_size, zero=job["zero"],
                                           device=ctx.device, catalog=self.catalog)
        estimate_id = writer.add(estimate, run_id=run_id) if estimate is not None else None
        if estimate_id is not None:
            self.result_ids.append(estimate_id)
        entry = variant_entry(ctx, workload, variant, ranks, job, estimate, reason, estimate_id, losses)
        details = {"config": workload.config.to_dict(), "device": ctx.device}
        m = measurement(workload.label, workload, variant, entry, self.hardware, details, ranks, self.environment,
                        job["zero"], ctx.world_size)
        result_id = writer.add(m, run_id=run_id)
        if result_id is not None:
            self.result_ids.append(result_id)
        entry = entry.replace(result_id=result_id)
        self.entries.append(entry)
        return entry

    def to_json(self) -> dict[str, Any]:
        """The document `accelkit bench --json` prints (a :class:`BenchRunResult` with the distributed fields), of
        the variants added so far."""
        ctx, workload, job = self.ctx, self.workload, self.job
        return BenchRunResult(
            workload=workload.name, label=workload.label, config=workload.config.to_dict(), device=ctx.device,
            hardware=self.hardware, run_id=job["run_id"], refused=[Refusal.from_dict(r) for r in job.get("refused", [])],
            notes=[*job.get("notes", []), *(f"{e.name}: " + "; ".join(e.recipe_notes)  # as a single-process run's
                                             for e in self.entries if e.recipe_notes)], variants=self.entries, environment=self.environment,
            result_ids=self.result_ids, world_size=ctx.world_size, num_nodes=ctx.num_nodes,
            layout=layout_name(ctx.world_size, job["zero"]), zero=job["zero"],
            ranks=self.entries[0].ranks if self.entries else [], store_error=self.writer.error,
        ).to_json()

