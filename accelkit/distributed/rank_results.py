"""Rank 0's side of a distributed bench: the per-rank records gathered (``RankMeasurement``) → one typed
:class:`BenchResult` per variant, built by ``accelkit.bench.record`` (the one place a bench result is assembled, with
``world_size``, ``ranks`` and the memory check filled) → the planner's estimate for the same layout (dp = world
size, the ZeRO stage) and ONE Measurement in the store (a refused write is kept in the document, never lost:
``store_error``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from accelkit.bench.metrics import Peak
from accelkit.bench.predict import predict_variant
from accelkit.bench.record import (
    RankMeasurement,
    RankSetup,
    RunRecord,
    StoreWriter,
    distributed_entry,
    distributed_measurement,
    layout_name,
)
from accelkit.bench.runner import identify
from accelkit.core import AccelkitError, Estimate
from accelkit.core.bench_result import BenchResult, Refusal
from accelkit.hardware.detect import environment
from accelkit.plan import resolve_hardware
from accelkit.results import ResultStore
from accelkit.timing import timer_name

if TYPE_CHECKING:
    from accelkit.distributed.rank import RankContext


def plan_layout(workload: Any, variant: Any, *, world_size: int, local_world_size: int, zero: int,
                device: str, catalog: str | None) -> tuple[Estimate | None, str | None]:
    """The planner's estimate for this layout (``accelkit.bench.predict``, as a single-process bench), or
    (None, why not)."""
    per_node = None
    if device.startswith("cuda") and catalog is not None:
        per_node = local_world_size if local_world_size <= resolve_hardware(catalog).scaleup_domain else None
    return predict_variant(workload, variant, device, catalog if device.startswith("cuda") else None,
                           dp=world_size, zero=zero, devices_per_node=per_node,
                           cpu_share=local_world_size if device == "cpu" else 1)


@contextmanager
def open_writer(job: dict[str, Any]) -> Iterator[StoreWriter]:
    """Rank 0's store writer for ``job`` (``accelkit.bench.record``; the bench's and the collective probe's), its
    store closed on leaving; a store that cannot even be opened is its first failed write: nothing is tried, the
    measurements are kept."""
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
        self.ctx, self.workload, self.job, self.writer = ctx, workload, job, writer
        hardware, self.catalog = identify(ctx.device)
        self.setup = RankSetup(
            world_size=ctx.world_size, num_nodes=ctx.num_nodes, local_world_size=ctx.local_world_size,
            device=ctx.device, backend=ctx.backend, zero=job["zero"], peak=Peak(job["peak"]["flops"], job["peak"]["source"]),
            datasheet=Peak(**job["datasheet"]) if job.get("datasheet") else None,
            probe=Peak(**job["probe"]) if job.get("probe") else None)
        self.record = RunRecord(
            workload=workload.name, label=workload.label, config=workload.config.to_dict(), device=ctx.device,
            hardware=hardware, run_id=job["run_id"], refused=[Refusal.from_dict(r) for r in job.get("refused", [])],
            environment={
                **environment(with_torch=True), "timer": timer_name(ctx.device), "bench": job["bench_config"],
                "distributed": {"backend": ctx.backend, "world_size": ctx.world_size, "num_nodes": ctx.num_nodes,
                                "nproc_per_node": ctx.local_world_size, "launcher": "torchrun",
                                "rendezvous": job.get("rendezvous")}},
            world_size=ctx.world_size, num_nodes=ctx.num_nodes, layout=layout_name(ctx.world_size, job["zero"]),
            zero=job["zero"])

    @property
    def entries(self) -> list[BenchResult]:
        return self.record.entries

    def add(self, variant: Any, ranks: list[RankMeasurement],
            losses: dict[str, dict[str, Any] | None] | None = None) -> BenchResult:
        """Build ``variant``'s result from every rank's measurements and store it; the entry, with its ``result_id``
        (None: not stored)."""
        ctx, workload, job, writer, record = self.ctx, self.workload, self.job, self.writer, self.record
        estimate: Estimate | None = None
        reason: str | None = "prediction turned off (--no-predict)"
        if job["predict"]:
            estimate, reason = plan_layout(workload, variant, world_size=ctx.world_size,
                                           local_world_size=ctx.local_world_size, zero=job["zero"],
                                           device=ctx.device, catalog=self.catalog)
        estimate_id = writer.add(estimate, run_id=record.run_id) if estimate is not None else None
        if estimate_id is not None:
            record.result_ids.append(estimate_id)
        entry = distributed_entry(self.setup, workload, variant, ranks, estimate, reason, estimate_id, losses=losses,
                                  max_loss_increase=job.get("max_loss_increase", 0.0))
        result_id = writer.add(distributed_measurement(record, self.setup, workload, variant, entry, ranks),
                               run_id=record.run_id)
        if result_id is not None:
            record.result_ids.append(result_id)
        entry = entry.replace(result_id=result_id)
        record.entries.append(entry)
        return entry

    def to_json(self) -> dict[str, Any]:
        """The document `accelkit bench --json` prints (a :class:`BenchRunResult` with the distributed fields), of
        the variants added so far."""
        record = self.record
        # the run's notes, then each variant's recipe notes, as a single-process run's
        record.notes = [*self.job.get("notes", []), *(f"{e.name}: " + "; ".join(e.recipe_notes)
                                                      for e in record.entries if e.recipe_notes)]
        record.ranks = record.entries[0].ranks if record.entries else []
        record.store_error = self.writer.error
        record.unstored_results = list(self.writer.unstored) or None
        return record.result().to_json()
