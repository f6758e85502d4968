"""Run an engine in a background thread: requests in from any thread, outputs streamed back.

The HTTP server uses this: ``EngineLoop(engine).start()``, then ``add_request(...)`` returns a
:class:`RequestStream` (iterate it for outputs, or pass ``callback=`` to be called from the loop thread —
with asyncio, ``callback=lambda out: loop.call_soon_threadsafe(queue.put_nowait, out)``). The thread sleeps
on a condition variable while there is nothing to do (no polling). If a step raises, the loop records the
error, fails every open stream with it and stops: ``is_alive`` turns False (``/health`` answers 503).
"""

from __future__ import annotations

import queue
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from accelkit.serve.engine import LLMEngine
from accelkit.serve.outputs import EngineStats, RequestOutput
from accelkit.serve.sampling import SamplingParams

OutputCallback = Callable[[RequestOutput | BaseException], None]


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
        self.on_step = on_step
        self.error: BaseException | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._sinks: dict[str, OutputCallback] = {}
        self._thread = threading.Thread(target=self._run, name="accelkit-engine", daemon=True)

    @property
    def is_alive(self) -> bool:
        return self._thread.is_alive() and self.error is None

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
        seq = self.engine.make_request(prompt, params, request_id=request_id or uuid.uuid4().hex, priority=priority)
        stream = RequestStream(seq.request_id, self)
        with self._cond:
            if seq.request_id in self._sinks:
                raise ValueError(f"request_id={seq.request_id!r} is already in use")
            self._sinks[seq.request_id] = callback or stream.put
        try:
            self.engine.add_sequence(seq)
        except BaseException:
            with self._cond:
                self._sinks.pop(seq.request_id, None)
            raise
        with self._cond:
            self._cond.notify()
        return stream

    def abort_request(self, request_id: str) -> None:
        self.engine.abort_request(request_id)
        with self._cond:
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
                    while not self._stop and not self.engine.has_unfinished_requests():
                        self._cond.wait()
                    if self._stop:
                        break
                for out in self.engine.step():
                    self._deliver(out)
                if self.on_step is not None:
                    self.on_step(self.engine.get_stats())
            # stopping: abort everything still open so that every stream ends
            with self._cond:
                pending = list(self._sinks)
            for request_id in pending:
                self.engine.abort_request(request_id)
            for out in self.engine.step():
                self._deliver(out)
        except BaseException as e:  # the loop dies; every open request learns why
            self.error = e
            with self._cond:
                sinks, self._sinks = list(self._sinks.values()), {}
            for sink in sinks:
                sink(e)

    def _deliver(self, out: RequestOutput) -> None:
        with self._cond:
            sink = self._sinks.pop(out.request_id, None) if out.finished else self._sinks.get(out.request_id)
        if sink is not None:
            sink(out)

    def __enter__(self) -> EngineLoop:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
