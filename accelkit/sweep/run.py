"""`accelkit sweep sweep.yaml`: a grid of ordinary bench / plan / loadtest runs, every result in the store
under the sweep's run id.

    load (YAML → SweepSpec; errors name the field) → expand (product of the axes) → run each point
    (local process pool, or Ray tasks with ``ray``) → collect (store; a failed point is a 'sweep-error'
    row with its error) → summary (one 'sweep' row listing every point)

A point runs in a worker process (pool or Ray) exactly as the command would: ``run_benchmark`` (or the
torchrun launcher when its layout has ``nproc_per_node``), ``plan`` or ``run_loadtest``, writing to that
machine's results store. When the point ran against another store (another Ray node), the driver copies
its rows into its own. A point never raises: its error comes back as data, and the sweep goes on.

A store that refuses a write (locked, read-only, full) ends no point either, as in ``accelkit bench``: a point
whose results it did not take hands them back whole (its line's ``unstored``), the driver writes nothing more to
that store and hands out the points still to run with saving off, and ``SweepRun.store_error`` says why.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from accelkit.bench.record import StoreWriter
from accelkit.core import Measurement, UserError
from accelkit.results import ResultStore
from accelkit.sweep.collect import collect
from accelkit.sweep.executors import local_pool, ray_tasks
from accelkit.sweep.grid import expand
from accelkit.sweep.spec import SweepSpec


@dataclass(slots=True)
class SweepRun:
    """What ``run_sweep`` returns; ``points`` are in grid order (the points finished, when interrupted)."""

    name: str
    kind: str
    run_id: str
    executor: str
    points: list[dict[str, Any]] = field(default_factory=list)
    summary_id: int | None = None
    interrupted: bool = False  # Ctrl-C or SIGTERM: ``unfinished`` lists the points that did not run
    unfinished: list[str] = field(default_factory=list)
    #: why a store refused a write: the points' ``unstored`` documents and (when it is the driver's) the summary
    #: were not stored, and nothing more was written to that store
    store_error: str | None = None

    @property
    def failed(self) -> list[dict[str, Any]]:
        return [p for p in self.points if p["status"] != "ok"]

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "kind": self.kind, "run_id": self.run_id, "executor": self.executor,
                "num_points": len(self.points), "num_failed": len(self.failed), "summary_id": self.summary_id,
                "interrupted": self.interrupted, "unfinished": self.unfinished, "points": self.points,
                **({"store_error": self.store_error} if self.store_error is not None else {})}


def run_sweep(spec: SweepSpec, *, ray: str | None = None, workers: int | None = None,
              store: ResultStore | None = None, run_id: str | None = None,
              on_point: Callable[[dict[str, Any]], None] | None = None,
              terminated: Callable[[], bool] = lambda: False) -> SweepRun:
    """Run every point of ``spec``; each lands in ``store`` (default: this machine's) under one run id. A store that
    refuses a write fails nothing: what it did not take is in the result (``store_error`` says why), and no later
    write to it is tried. Ctrl-C stops the sweep with the points finished so far (``interrupted``); ``terminated()``
    true at that interrupt says it was a signal to this process alone (SIGTERM turned into KeyboardInterrupt, as the
    CLI does), so the local pool passes it on to its workers and kills those that do not stop."""
    if ray is not None and not ray.strip():  # `--ray "$HEAD"` with HEAD unset ran in the local pool without a word
        raise UserError(f"--ray {ray!r} names no Ray cluster; give auto, HOST:PORT, ray://HOST:10001 or local, or "
                        "leave --ray out to run in the local process pool")
    refuse_replaced_rates(spec)
    points = expand(spec)
    run = SweepRun(spec.name, spec.kind, run_id or uuid.uuid4().hex[:12], f"ray ({ray})" if ray is not None else
                   f"local process pool ({workers or spec.workers} workers)")
    own = store is None
    writer = StoreWriter(store or ResultStore())
    lines: dict[int, dict[str, Any]] = {}
    try:
        outcomes = (ray_tasks(points, spec, run.run_id, ray, lambda: writer.can_write) if ray is not None else
                    local_pool(points, spec, run.run_id, workers or spec.workers, lambda: writer.can_write,
                               terminated))
        try:
            for point, outcome in outcomes:
                lines[point.index] = collect(point, outcome, writer, run.run_id, spec.name)
                if on_point is not None:
                    on_point(lines[point.index])
        except KeyboardInterrupt:  # as bench keeps its finished variants: the points collected are summed up
            run.interrupted = True
        finally:
            outcomes.close()  # an interrupt that landed here, not in the executor: it starts no more points
        run.points = [lines[i] for i in sorted(lines)]
        run.unfinished = [f"point {p.index} · {p.key}" for p in points if p.index not in lines]
        summary = Measurement(kind="sweep", name=f"sweep {spec.name}: {len(points)} points, {len(run.failed)} failed"
                              + (f", {len(run.unfinished)} not run (interrupted)" if run.interrupted else ""),
                              details={"sweep": spec.name, "executor": run.executor, "grid": spec.to_dict(),
                                       "interrupted": run.interrupted, "unfinished": run.unfinished,
                                       "points": run.points})
        run.summary_id = writer.add(summary, run_id=run.run_id)
        run.store_error = writer.error or next((p["store_error"] for p in run.points if p.get("store_error")), None)
    finally:
        if own and writer.store is not None:
            writer.store.close()
    return run


def refuse_replaced_rates(spec: SweepSpec) -> None:
    """A loadtest point runs at its rate from the ``rates`` axis; a ``sweep_rates`` in the ``loadtest`` section (or
    under a workload) replaced it, so every point of the axis ran the same rates and was stored as 'rate 1', 'rate 4'
    (found in the hunt). Refused before any point runs. (Without a rates axis, sweep_rates is each point's own curve.)"""
    if spec.kind != "loadtest" or spec.rates is None:
        return
    for section, fields in (("loadtest", spec.loadtest),
                            *((f"workloads[{name!r}]", config) for name, config in spec.workloads.items())):
        rates = fields.get("sweep_rates")
        if rates is not None:
            shown = ", ".join("inf" if r == float("inf") else f"{r:g}" if isinstance(r, float) else str(r)
                              for r in rates) if isinstance(rates, (list, tuple)) else str(rates)
            raise UserError(f"{section} sets sweep_rates, which replaces the rate each point takes from the sweep's "
                            f"rates axis (every point would run the same rates, labelled with its own); give the "
                            f"rates once, as rates: [{shown}], or drop rates to run sweep_rates at each point")
