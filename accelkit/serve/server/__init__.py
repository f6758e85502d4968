"""`accelkit serve`: the OpenAI-compatible HTTP API over the engine (FastAPI + uvicorn)."""

from __future__ import annotations

import contextlib
import logging
import signal
import socket
import sys
from collections.abc import AsyncIterator, Callable
from typing import Any

from prometheus_client import CollectorRegistry

from accelkit.core.terminal import printable
from accelkit.monitor.registry import REGISTRY
from accelkit.monitor.serving import ServingMetrics
from accelkit.serve.config import EngineConfig, ServerConfig
from accelkit.serve.engine import LLMEngine
from accelkit.serve.listen import bind_socket
from accelkit.serve.loop import EngineLoop
from accelkit.serve.server.app import create_app
from accelkit.serve.server.lifecycle import ServeServer, server_config
from accelkit.serve.server.state import ServingState
from accelkit.serve.tensor_parallel import WorkerDiedError

_LOOP_JOIN_S = 10.0  # a step is milliseconds; this is for one stuck in a device call


def build_server(engine_config: EngineConfig, server_config: ServerConfig, *,
                 registry: CollectorRegistry | None = None,
                 on_step: Callable[[str], None] | None = None) -> tuple[Any, ServingState]:
    """Load the engine, start its loop thread, and return (FastAPI app, state). ``on_step`` is told each slow step
    once the model directory has passed its checks (:class:`LLMEngine`'s)."""
    registry = registry if registry is not None else REGISTRY
    metrics = ServingMetrics.get(registry)  # before the engine: a registry problem should not cost a model load

    def make_engine() -> LLMEngine:
        engine = LLMEngine(engine_config, on_step=on_step)
        if on_step is not None:
            on_step("starting the engine loop")
        return engine

    # built on the loop's thread: all of the engine's torch work on one thread (see EngineLoop.build)
    loop = EngineLoop.build(make_engine)
    engine = loop.engine
    state = ServingState(loop, server_config, metrics)
    loop.on_step = state.bridge.on_step
    if engine.tensor_parallel is not None:  # a worker's death ends the loop now, even while it sleeps
        engine.tensor_parallel.on_death(lambda message: loop.fail(WorkerDiedError(message)))
    app = create_app(state, registry=registry)

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        yield
        state.accepting = False
        loop.stop(timeout=_LOOP_JOIN_S)  # every handler has ended by now; aborts whatever is left
        engine.shutdown()

    app.router.lifespan_context = lifespan
    return app, state


class _PrintableFormatter(logging.Formatter):
    """Log lines with control characters escaped: a request path or a field name is the client's text, and an
    escape sequence in it must not reach the operator's terminal."""

    def format(self, record: logging.LogRecord) -> str:
        return printable(super().format(record))


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a line is logged (as logging's last-resort handler does)."""

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, _: Any) -> None:
        pass


def log_to_stderr() -> None:
    """accelkit's server log (a line per request, warnings) on stderr at info level, as ``LEVEL: message``; once."""
    logger = logging.getLogger("accelkit.serve")
    if not any(getattr(h, "_accelkit", False) for h in logger.handlers):
        handler = _StderrHandler()
        handler.setFormatter(_PrintableFormatter("%(levelname)s: %(message)s"))
        handler._accelkit = True  # type: ignore[attr-defined]
        logger.addHandler(handler)
        logger.propagate = False
    logger.setLevel(logging.INFO)


def run_server(app: Any, state: ServingState, sock: socket.socket, *, log_level: str = "warning") -> None:
    """Serve on ``sock`` (from :func:`bind_socket`) until SIGINT/SIGTERM, then shut down as ``lifecycle`` says.
    ``log_level`` is uvicorn's own; accelkit's log (a line per request) goes to stderr at info level."""
    log_to_stderr()
    app.state.host_check.listening_on(sock.getsockname()[0])  # on loopback without a key: only its own Host names
    server = ServeServer(server_config(app, state, log_level=log_level), state)
    # uvicorn re-raises the captured signal once it has shut down gracefully; with these no-op handlers
    # in place that re-raise is harmless and the process exits 0 after a clean shutdown
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    tp = getattr(state.loop.engine, "tensor_parallel", None)
    if tp is not None:  # a worker's death takes the server down (shut down as on SIGTERM; no request can run)
        tp.on_death(lambda message: setattr(server, "should_exit", True))
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if tp is not None and tp.dead is not None:
        raise WorkerDiedError(tp.dead)


__all__ = ["EngineConfig", "ServerConfig", "ServingState", "bind_socket", "build_server", "run_server"]
