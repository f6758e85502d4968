"""Run an engine in a background thread: requests in from any thread, outputs streamed back.

The HTTP server uses this: ``EngineLoop(engine).start()``, then ``add_request(...)`` returns a
:class:`RequestStream` (iterate it for outputs, or pass ``callback=`` to be called from the loop thread —
with asyncio, ``callback=lambda out: loop.call_soon_threadsafe(queue.put_nowait, out)``). The thread sleeps
on a condition variable while there is nothing to do (no polling).

A request that fails inside a step ends alone (its output has ``finish_reason="error"`` and ``error``); the
loop goes on. A callback that raises costs only its own request (which is aborted), and a failing ``on_step``
is logged and skipped. Only when ``engine.step()`` itself raises — the engine says it cannot compute any more
(``EngineDeadError``) — does the loop record the error, log it, fail every open stream with it and stop:
``is_alive`` turns False and ``/health`` answers 503 with the reason.
"""

from __future__ import annotations

import logging
import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from accelkit.core import AccelkitError
from accelkit.serve.engine import LLMEngine
from accelkit.serve.isolation import describe
from accelkit.serve.outputs import EngineStats, RequestOutput
from accelkit.serve.sampling import SamplingParams

OutputCallback = Callable[[RequestOutput | BaseException], None]
log = logging.getLogger("accelkit.serve")


class RequestStream:
    """Outputs of one request, in order; iteration ends after the finished one."""

    def __init__(self, request_id: str, loop: EngineLoop) -> None:
        self.request_id = request_id
        self._loop = loop
        self._queue: queue.Queue[RequestOutput | BaseException] = queue.Queue()
        self.finished = False

    def put(self, item: RequestOutput | BaseException) -> None:
        self._queue.put(item)

    def __iter__(self) -> Iterator[RequestOutput]:
        while not self.finished:
            item = self._queue.get()
            if isinstance(item, BaseException):
                self.finished = True
                raise RuntimeError(f"engine loop failed: {item}") from item
            self.finished = item.finished
            yield item

    def result(self) -> RequestOutput:
        """Block until the request finishes; its last output."""
        outputs = list(self)
        return outputs[-1]

    def abort(self) -> None:
        self._loop.abort_request(self.request_id)


class EngineLoop:
    def __init__(self, engine: LLMEngine, *, on_step: Callable[[EngineStats], None] | None = None) -> None:
        self.engine = engine
        self._setup(on_step, self._run)

    @classmethod
    def build(cls, make_engine: Callable[[], LLMEngine], *,
              on_step: Callable[[EngineStats], None] | None = None) -> EngineLoop:
        """Build the engine on the loop's own thread and run the loop there (started; what ``make_engine`` raises is
        raised here). Every torch call of the engine, from loading the weights on, then runs on one thread, as it
        does offline. An engine built on one thread and stepped on another ran a CPU decode step 3x slower: each
        thread that runs torch work keeps its own team of OpenMP threads, and with more of them alive than there
        are cores, GNU OpenMP stops spinning between parallel regions and puts every worker to sleep — a futex
        wake-up per region (a decode step at batch 1 on 2 cores: 1.9 ms offline, 7.3 ms so;
        ``benchmarks/engine_step_breakdown.py``)."""
        loop = cls.__new__(cls)
        built = threading.Event()
        failure: list[BaseException] = []

        def build_then_run() -> None:
            try:
                loop.engine = make_engine()
            except BaseException as exc:
                failure.append(exc)
                return
            finally:
                built.set()
            loop._run()

        loop._setup(on_step, build_then_run)
        loop._thread.start()
        built.wait()
        if failure:
            raise failure[0]
        return loop

    def _setup(self, on_step: Callable[[EngineStats], None] | None, target: Callable[[], None]) -> None:
        self.on_step = on_step
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._failure: BaseException | None = None  # set by fail(): raised on the loop thread
        self._sinks: dict[str, OutputCallback] = {}
        self._flush_hooks: list[Callable[[], None]] = []
        self._thread = threading.Thread(target=target, name="accelkit-engine", daemon=True)

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

    @property
    def dead_reason(self) -> str | None:
        """Why the loop is not running (None while it is)."""
        if self.error is not None:
            return describe(self.error)
        if self._stop:
            return "the engine loop was stopped"
        return None if self._thread.is_alive() else "the engine loop has not started"

    @property
    def thread_id(self) -> int | None:
        """The loop thread's id in the operating system (None before it starts)."""
        return self._thread.native_id

    def start(self) -> EngineLoop:
        self._thread.start()
        return self

    def add_request(
        self,
        prompt: str | list[int],
        params: SamplingParams | None = None,
        *,
        request_id: str | None = None,
        priority: int = 0,
        callback: OutputCallback | None = None,
    ) -> RequestStream:
        """Validate (ValueError here, in the caller's thread) and queue a request."""
        if self.error is not None:
            raise RuntimeError(f"engine loop is dead: {self.error}")
        if self._stop:
            raise RuntimeError("engine loop is stopped; it accepts no new requests")
        if not self._thread.is_alive():  # nothing would ever step it: its result would never come
            raise RuntimeError("engine loop is not started; use `with EngineLoop(engine) as loop:` or call "
                               "loop.start() before adding requests")
        seq = self.engine.make_request(prompt, params, request_id=request_id or uuid.uuid4().hex, priority=priority)
        stream = RequestStream(seq.request_id, self)
        with self._cond:
            # again, under the lock the loop fails or stops under: the loop may have died or stopped while the
            # request was tokenized, and a request queued after that would never hear back
            if self.error is not None:
                raise RuntimeError(f"engine loop is dead: {self.error}")
            if self._stop:
                raise RuntimeError("engine loop is stopped; it accepts no new requests")
            if seq.request_id in self._sinks:
                raise ValueError(f"request_id={seq.request_id!r} is already in use")
            self.engine.add_sequence(seq)  # (its outputs are delivered under this lock: none before the sink is in)
            self._sinks[seq.request_id] = callback or stream.put
            self._cond.notify()
        return stream

    def abort_request(self, request_id: str) -> None:
        self.engine.abort_request(request_id)
        with self._cond:
            self._cond.notify()

    def abort_all(self) -> int:
        """Abort every request in flight (each stream ends with ``finish_reason="abort"``); how many."""
        with self._cond:
            pending = list(self._sinks)
        for request_id in pending:
            self.engine.abort_request(request_id)
        with self._cond:
            self._cond.notify()
        return len(pending)

    def fail(self, exc: BaseException) -> None:
        """Stop the loop with ``exc`` as if a step had raised it (every open request fails with it): what a
        tensor-parallel worker's death does while the loop sleeps. A step running now raises on its own."""
        with self._cond:
            self._failure = exc
            self._cond.notify()

    def stop(self, timeout: float | None = None) -> None:
        """Abort what is in flight and join the thread."""
        with self._cond:
            self._stop = True
            self._cond.notify()
        if self._thread.is_alive():
            self._thread.join(timeout)

    def _run(self) -> None:
        try:
            while True:
                with self._cond:
                    while not self._stop and self._failure is None and not self.engine.has_unfinished_requests():
                        self._cond.wait()
                    if self._failure is not None:
                        raise self._failure
                    if self._stop:
                        break
                # (with overlapped postprocessing, outputs are delivered while the next step runs on the device)
                self._deliver_all(self.engine.step(deliver=self._deliver_all))
                if self.on_step is not None:
                    try:
                        self.on_step(self.engine.get_stats())
                    except Exception as exc:  # metrics are not worth a request, let alone the engine
                        log.warning("on_step callback failed: %s", describe(exc))
            self.abort_all()  # stopping: abort everything still open so that every stream ends
            self._deliver_all(self.engine.step())
        except BaseException as e:  # the engine cannot go on; every open request learns why
            # (an AccelkitError says all there is to say: no traceback)
            log.error("engine loop stopped; every request in flight fails: %s", describe(e),
                      exc_info=None if isinstance(e, AccelkitError) else e)
            with self._cond:  # with the sinks, so that add_request sees the error or its sink is failed here
                self.error = e
                sinks, self._sinks = list(self._sinks.values()), {}
            for sink in sinks:
                try:
                    sink(e)
                except Exception as exc:
                    log.warning("telling a request that the engine stopped failed: %s", describe(exc))
            self._flush()

    def add_flush_hook(self, hook: Callable[[], None]) -> None:
        """Call ``hook`` on the loop thread after each step's outputs have all been handed to their callbacks:
        where a callback that only buffers (the HTTP server's ``Mailbox``) passes its buffer on, once a step."""
        with self._cond:
            self._flush_hooks.append(hook)

    def remove_flush_hook(self, hook: Callable[[], None]) -> None:
        with self._cond:
            if hook in self._flush_hooks:
                self._flush_hooks.remove(hook)

    def _flush(self) -> None:
        with self._cond:
            hooks = list(self._flush_hooks)
        for hook in hooks:
            try:
                hook()
            except Exception as exc:  # e.g. its event loop closed: its requests cannot be told any more
                log.warning("flushing outputs failed: %s", describe(exc))

    def _deliver_all(self, outputs: list[RequestOutput]) -> None:
        """Hand a step's outputs to their sinks: one lock for all the look-ups, then the calls, unlocked;
        then the flush hooks."""
        if not outputs:
            return
        with self._cond:
            sinks = self._sinks
            targets = [(sinks.pop(out.request_id, None) if out.finished else sinks.get(out.request_id), out)
                       for out in outputs]
        for sink, out in targets:
            if sink is None:
                continue
            try:
                sink(out)
            except Exception as exc:  # e.g. the receiving event loop is closed: only this request is lost
                log.warning("delivering output of request %s failed (%s); aborting it", out.request_id, describe(exc))
                if not out.finished:
                    with self._cond:
                        self._sinks.pop(out.request_id, None)
                    self.engine.abort_request(out.request_id)
        if self._flush_hooks:
            self._flush()

    def __enter__(self) -> EngineLoop:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
