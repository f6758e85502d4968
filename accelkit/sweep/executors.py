"""Where a sweep's points run: a local process pool, or Ray tasks. Each executor yields (point, outcome) as points
finish, so that the driver collects (and stores) one before the next is handed out."""

from __future__ import annotations

import itertools
import socket
from collections.abc import Callable, Generator
from typing import Any

from accelkit.core import UserError
from accelkit.sweep.grid import Point
from accelkit.sweep.point import run_point
from accelkit.sweep.spec import SweepSpec


def local_pool(points: list[Point], spec: SweepSpec, run_id: str, workers: int,
           save: Callable[[], bool]) -> Generator[tuple[Point, dict[str, Any]], None, None]:
    """A spawn-context process pool (no fork of a process that may hold torch threads). A point is handed out when
    a worker is free, with ``save()`` as it stands then: once the store has refused a write, no point started
    later writes to it. On Ctrl-C no point is started; those running finish and are collected (a bench point
    keeps the variants it finished), then the interrupt goes on."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, as_completed, wait

    todo = iter(points)
    running: dict[Future[dict[str, Any]], Point] = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        def start() -> None:
            for p in itertools.islice(todo, workers - len(running)):
                running[pool.submit(run_point, p.to_dict(), spec.to_dict(), run_id, save())] = p

        try:
            start()
            while running:
                done, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in done:
                    point = running.pop(future)
                    yield point, _outcome(future)  # collected (and stored) before the next point starts
                start()
        except KeyboardInterrupt:
            for future in as_completed(running):
                if not isinstance(future.exception(), KeyboardInterrupt):  # a point Ctrl-C stopped is unfinished
                    yield running[future], _outcome(future)
            raise


def _outcome(future: Any) -> dict[str, Any]:
    try:
        return dict(future.result())
    except Exception as exc:  # the worker process died (BrokenProcessPool): that point failed
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": None,
                "host": socket.gethostname(), "store": None}


def ray_tasks(points: list[Point], spec: SweepSpec, run_id: str, address: str,
         save: Callable[[], bool]) -> Generator[tuple[Point, dict[str, Any]], None, None]:
    """One Ray task per point (``spec.resources`` each), all handed to Ray at once: each writes to its node's store,
    and a point started before the driver's store refused a write still tries its own once. Connects to ``address``
    (auto, ray://…, HOST:PORT), or starts a local runtime for ``local``; a runtime already initialised in this
    process is used as is. Ctrl-C cancels the points not yet done."""
    try:
        import ray
    except ImportError:
        raise UserError("--ray needs Ray: pip install 'accelkit[ray]' (or pip install 'ray[default]')") from None
    started = not ray.is_initialized()
    if started:
        ray.init(address=None if address == "local" else address, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
    try:
        task = ray.remote(run_point).options(**spec.resources)
        refs = {task.remote(p.to_dict(), spec.to_dict(), run_id, save()): p for p in points}
        pending = list(refs)
        try:
            while pending:
                done, pending = ray.wait(pending, num_returns=1)
                try:
                    outcome = ray.get(done[0])
                except Exception as exc:  # the task's worker died or Ray could not run it
                    outcome = {"status": "error", "error": f"{type(exc).__name__}: {exc}", "traceback": None,
                               "host": None, "store": None}
                yield refs[done[0]], outcome
        except KeyboardInterrupt:
            for ref in pending:
                ray.cancel(ref)
            raise
    finally:
        if started:
            ray.shutdown()
