"""One point of a sweep, in a worker process (pool or Ray task), exactly as the command would run it:
``run_benchmark`` (or the torchrun launcher when its layout has ``nproc_per_node``), ``plan`` or ``run_loadtest``,
writing to that machine's results store. A point never raises: its error comes back as data, and the sweep goes
on. A store that refuses a write ends no point either: what it did not take comes back whole (``unstored``)."""

from __future__ import annotations

import math
import socket
import traceback
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from accelkit.bench.record import StoreWriter
from accelkit.bench.runner import BenchConfig, run_benchmark
from accelkit.bench.variants import Variant
from accelkit.bench.workloads import make_workload
from accelkit.core import AccelkitError, Cluster
from accelkit.distributed.launch import DistConfig
from accelkit.plan import plan, resolve_hardware
from accelkit.results import ResultStore
from accelkit.results.store import default_path
from accelkit.sweep.grid import Point, loadtest_config, plan_workload
from accelkit.sweep.spec import SweepSpec
from accelkit.timing import LoopConfig

if TYPE_CHECKING:
    from accelkit.core import Estimate, Measurement


def store_identity() -> dict[str, str]:
    """Which results store a point wrote to (host + path)."""
    return {"host": socket.gethostname(), "store": str(default_path().resolve())}


def run_point(point: dict[str, Any], spec: dict[str, Any], run_id: str, save: bool = True) -> dict[str, Any]:
    """Run one point against this machine's store. Never raises: the outcome says ok or error.

    ``save`` False (the driver's store has already refused a write): the point is measured and stores nothing. What
    the store does not take comes back whole in ``unstored`` (a bench point: its run document), with
    ``store_error`` saying why; after a refused write the point tries no other."""
    try:
        sweep = SweepSpec.from_dict(_narrowed(spec, point))
        p = Point(**{k: v for k, v in point.items() if k != "key"} | {"rate": None if point["rate"] is None
                                                                       else float(point["rate"])})
        store, store_error = _open_store(save)
        try:
            m = _measure(p, sweep, store, run_id, store_error)
            results = [store.get(i).to_dict() for i in m.result_ids] if store is not None else []
        finally:
            if store is not None:
                store.close()
        outcome = {"status": "ok", "result_ids": m.result_ids, "results": results, "unstored": m.unstored,
                   "store_error": m.store_error, "failed": m.failed, **store_identity()}
        if m.failed and not m.measured:
            # every variant raised (BatchNorm at batch 1, CUDA OOM): the point failed, as `accelkit bench` exits 1;
            # what it stored before (a prediction, a probe) stays listed with its error row
            outcome |= {"status": "error", "error": "; ".join(map(failure_text, m.failed)), "traceback": None}
        return outcome
    except Exception as exc:  # a point's failure is data, not the end of the sweep
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(limit=8), **store_identity()}


def _narrowed(spec: dict[str, Any], point: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with each axis narrowed to ``point``'s value: the point's own SweepSpec is checked (as the file was)
    but only for its one cell. Checking the whole grid in every point made a sweep quadratic in its size: a
    10,000-point plan grid spent ~1.2 s per point re-checking the other 9,999 (found in review)."""
    narrowed = {**spec, "workloads": {point["workload"]: point["config"]}}
    for axis, value in (("precisions", point["precision"]), ("batch_sizes", point["batch_size"]),
                        ("layouts", point["layout"]), ("rates", point["rate"])):
        if spec.get(axis) is not None:
            narrowed[axis] = [value]
    return narrowed


def _open_store(save: bool) -> tuple[ResultStore | None, str | None]:
    """This machine's store, and why it cannot be written: writable with ``save``; otherwise — or when it cannot be
    opened for writing (the point's store error) — read-only, for the stored probes a bench reads (None when even
    that fails: the point is measured all the same)."""
    error = None
    if save:
        try:
            return ResultStore(), None
        except AccelkitError as exc:
            error = str(exc)
    try:
        return ResultStore(readonly=True), error
    except AccelkitError:
        return None, error


def failure_text(failure: dict[str, Any]) -> str:
    """'fp32 (first call): ValueError: …' — a failed variant as `accelkit bench` prints it."""
    return f"{failure['name']} ({failure['phase']}): {failure['error']}"


@dataclass(frozen=True, slots=True)
class _Measured:
    """What one point's run left: its stored ids, the documents the store did not take (and why), the bench
    variants that raised (the run document's ``failed``: variant, phase, error) and whether anything was measured."""

    result_ids: list[int]
    unstored: list[dict[str, Any]]
    store_error: str | None
    failed: list[dict[str, Any]] = field(default_factory=list)
    measured: bool = True


def _measure(p: Point, sweep: SweepSpec, store: ResultStore | None, run_id: str, store_error: str | None) -> _Measured:
    """Run the point and store what it measured."""
    writer = StoreWriter(store if store is not None and not store.readonly else None)
    if p.kind == "bench":
        doc = _bench_point(p, sweep, store, run_id, save=writer.can_write)
        unstored = [doc] if any(v.get("result_id") is None for v in doc["variants"]) else []
        return _Measured(list(doc["result_ids"]), unstored, store_error or doc.get("store_error"),
                         failed=list(doc["failed"]), measured=bool(doc["variants"]))
    result = _plan_point(p, sweep) if p.kind == "plan" else _loadtest_point(p, sweep)
    result_id = writer.add(result, run_id=run_id)
    if result_id is None:
        return _Measured([], [result.to_dict()], store_error or writer.error)
    return _Measured([result_id], [], None)


def _bench_point(p: Point, sweep: SweepSpec, store: ResultStore | None, run_id: str, *, save: bool) -> dict[str, Any]:
    """The run's document (what ``accelkit bench --json`` prints); ``store`` is written only with ``save``."""
    config = {**p.config, **({"batch_size": p.batch_size} if p.batch_size is not None else {})}
    workload = make_workload(p.workload, config)
    bench = BenchConfig.from_dict({**sweep.bench, "loop": LoopConfig.from_dict(sweep.loop).to_dict()})
    bench = bench if save else bench.replace(save=False)
    variants = [Variant(precision=p.precision)]  # type: ignore[arg-type]
    if p.layout:
        # lazy: the torchrun launcher's modules (accelkit.distributed) load only for a multi-process run
        from accelkit.distributed.bench_launch import run_distributed_bench

        return run_distributed_bench(workload, variants, bench, DistConfig.from_dict(p.layout), store=store,
                                     run_id=run_id).to_json()
    doc = run_benchmark(workload, variants, bench, store=store, run_id=run_id).to_json()
    if doc["interrupted"] and not doc["variants"]:  # Ctrl-C before its one variant finished: the point did not run
        raise KeyboardInterrupt                    # (as a distributed point's launcher raises it)
    return doc


def _plan_point(p: Point, sweep: SweepSpec) -> Estimate:
    workload = plan_workload(p)
    return plan(workload, Cluster(device=resolve_hardware(str(sweep.hardware)), num_devices=workload.recipe.num_devices))


def _loadtest_point(p: Point, sweep: SweepSpec) -> Measurement:
    # lazy: the runner imports httpx; only loadtest points need it
    from accelkit.loadtest.runner import run_loadtest

    return run_loadtest(loadtest_config(p.workload, p.config, sweep.loadtest, p.rate if p.rate is not None else math.inf))
