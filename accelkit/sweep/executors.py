"""Where a sweep's points run: a local process pool, or Ray tasks. Each executor yields (point, outcome) as points
finish, so that the driver collects (and stores) one before the next is handed out."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import socket
from collections.abc import Callable, Generator
from typing import Any

from accelkit.core import UserError
from accelkit.sweep.grid import Point
from accelkit.sweep.point import run_point
from accelkit.sweep.spec import SweepSpec


def local_pool(points: list[Point], spec: SweepSpec, run_id: str, workers: int,
               save: Callable[[], bool],
               terminated: Callable[[], bool] = lambda: False) -> Generator[tuple[Point, dict[str, Any]], None, None]:
    """A spawn-context process pool (no fork of a process that may hold torch threads). A point is handed out when
    a worker is free, with ``save()`` as it stands then: once the store has refused a write, no point started
    later writes to it. On Ctrl-C no point is started; those running finish and are collected (a bench point
    keeps the variants it finished), then the interrupt goes on. ``terminated()`` true at the interrupt (a SIGTERM,
    which reached only this process, where a terminal's Ctrl-C reaches the workers too): the workers running a point
    get the Ctrl-C, and those still running after ``STOP_GRACE_S`` are killed with their points unfinished. The same
    holds when the driver stops the generator (an interrupt that landed while it stored a point): the running
    points are stopped as gently, never killed at once. However it ends, no worker outlives the pool (found in
    review: after a SIGTERM the worker ran on, re-parented to init, holding the driver's stdout). An idle worker
    ignores SIGINT — only a point is interrupted (``_interruptible``): an idle one died with a traceback and broke
    the pool (found in review)."""
    import multiprocessing
    from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, as_completed, wait
    from concurrent.futures import TimeoutError as FuturesTimeout
    from concurrent.futures.process import BrokenProcessPool

    todo = iter(points)
    running: dict[Future[dict[str, Any]], Point] = {}
    pool = ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn"),
                               initializer=_ignore_sigint)
    signalled = [False]

    def start() -> None:
        for p in itertools.islice(todo, workers - len(running)):
            running[pool.submit(_interruptible, p.to_dict(), spec.to_dict(), run_id, save())] = p

    def stop_running() -> float | None:
        """Pass a SIGTERM's interrupt on to the workers once; the seconds to wait for them (None: until done)."""
        if not terminated():
            return None
        if not signalled[0]:
            signalled[0] = True
            _signal_workers(pool, signal.SIGINT)
        return STOP_GRACE_S

    try:
        start()
        while running:
            done, _ = wait(running, return_when=FIRST_COMPLETED)
            for future in done:
                point = running.pop(future)
                yield point, _outcome(future)  # collected (and stored) before the next point starts
            start()
    except KeyboardInterrupt:
        grace = stop_running()
        try:
            for future in as_completed(running, timeout=grace):
                # a point Ctrl-C stopped is unfinished; so is one whose worker the passed-on Ctrl-C ended outright
                if not isinstance(future.exception(), (KeyboardInterrupt, *((BrokenProcessPool,) if grace else ()))):
                    yield running[future], _outcome(future)
        except FuturesTimeout:  # a worker that did not stop: its point is unfinished, the worker killed below
            pass
        raise
    finally:
        pending = [future for future in running if not future.done()]
        if pending:  # the generator was closed mid-run (GeneratorExit), or the grace ran out
            wait(pending, timeout=stop_running())
        if any(not future.done() for future in running):  # a point that did not stop: shutdown would wait on it
            _signal_workers(pool, signal.SIGKILL)
        pool.shutdown(wait=True, cancel_futures=True)


#: seconds the workers get, after a SIGTERM to the sweep, to stop their points as on Ctrl-C before they are killed:
#: more than a distributed point's own launcher takes to stop torchrun and its ranks (``launch.STOP_GRACE_S``), so a
#: worker is not killed in the middle of that (a scheduler's SIGKILL follows its SIGTERM after a grace of its own,
#: commonly 30 s)
STOP_GRACE_S = 20.0


def _ignore_sigint() -> None:
    """A pool worker's start: SIGINT ignored while it waits for a point (``_interruptible`` takes it for a point)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _interruptible(*args: Any) -> dict[str, Any]:
    """``run_point(*args)`` with Ctrl-C raising KeyboardInterrupt in it, as in any process; ignored again after."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return run_point(*args)
    finally:
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def _signal_workers(pool: Any, signum: int) -> None:
    """Send ``signum`` to each of the pool's live worker processes (``_processes``: the executor has no public
    handle on them)."""
    for process in list((getattr(pool, "_processes", None) or {}).values()):
        if process.is_alive():
            with contextlib.suppress(OSError):
                os.kill(process.pid, signum)


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
        if address != "local":  # an address with nothing behind it: ray.init retried for minutes (found in a hunt)
            env = os.environ.get("RAY_ADDRESS") if address == "auto" else None  # auto: ray.init reads it first
            if address != "auto" or env:
                check_reachable(env or address, f"--ray {address}" + (f" (RAY_ADDRESS={env})" if env else ""))
        try:  # "local", not None: None connects to $RAY_ADDRESS instead of starting a runtime here
            ray.init(address=address, include_dashboard=False, log_to_driver=False, configure_logging=False)
        except ConnectionError as exc:  # auto with no cluster found: was an 'internal error', exit 1
            raise UserError(f"--ray {address}: {exc} — start one (`ray start --head`), give its address "
                            "(--ray HOST:PORT), or run on a Ray runtime started here with --ray local") from None
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


#: seconds a --ray address gets to accept a TCP connection before the sweep is refused
CONNECT_TIMEOUT_S = 5.0


def check_reachable(address: str, flag: str, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """Raise UserError when ``address`` (HOST:PORT, [IPv6]:PORT or ray://HOST:PORT) takes no TCP connection within
    ``timeout_s``: ray.init retries an unreachable head for minutes without a word. ``flag`` names it in the error."""
    hint = ("give HOST:PORT (the head's GCS port, 6379 unless `ray start --head --port` set another), "
            "ray://HOST:10001 (Ray Client), auto or local")
    target = address.split("://", 1)[1] if "://" in address else address
    host, sep, port_text = target.rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port_text.isdigit() or not 0 < int(port_text) < 65536:
        raise UserError(f"{flag}: {address!r} is not a Ray address; {hint}")
    try:
        socket.create_connection((host, int(port_text)), timeout=timeout_s).close()
    except OSError as exc:
        why = f"no answer in {timeout_s:g} s" if isinstance(exc, TimeoutError) else exc.strerror or str(exc)
        raise UserError(f"{flag}: cannot connect to {host}:{port_text} ({why}); is a Ray head running there? Start "
                        "one (`ray start --head`) or give the address `ray status` prints on a running cluster's "
                        "head") from None
