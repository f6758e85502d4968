"""`accelkit serve`: the OpenAI-compatible HTTP API over the engine (FastAPI + uvicorn)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from prometheus_client import CollectorRegistry

from accelkit.monitor.registry import REGISTRY
from accelkit.monitor.serving import ServingMetrics
from accelkit.serve.config import EngineConfig, ServerConfig
from accelkit.serve.server.state import ServingState


def build_server(engine_config: EngineConfig, server_config: ServerConfig, *,
                 registry: CollectorRegistry | None = None) -> tuple[Any, ServingState]:
    """Load the engine, start its loop thread, and return (FastAPI app, state)."""
    from accelkit.serve.engine import LLMEngine
    from accelkit.serve.loop import EngineLoop
    from accelkit.serve.server.app import create_app

    registry = registry if registry is not None else REGISTRY
    engine = LLMEngine(engine_config)
    loop = EngineLoop(engine)
    state = ServingState(loop, server_config, ServingMetrics(registry))
    loop.on_step = state.bridge.on_step
    loop.start()
    app = create_app(state, registry=registry)

    @contextlib.asynccontextmanager
    async def lifespan(_: Any) -> AsyncIterator[None]:
        yield
        state.accepting = False
        loop.stop(timeout=server_config.shutdown_timeout_s)  # aborts what is still in flight

    app.router.lifespan_context = lifespan
    return app, state


def run_server(app: Any, state: ServingState, *, host: str = "127.0.0.1", port: int = 8000, log_level: str = "warning") -> None:
    """Serve until SIGINT/SIGTERM: stop accepting, let in-flight requests finish within
    ``shutdown_timeout_s``, abort the rest, stop the engine loop, return."""
    import signal

    import uvicorn

    config = uvicorn.Config(app, host=host, port=port, log_level=log_level,
                            timeout_graceful_shutdown=int(state.config.shutdown_timeout_s) or None)
    # uvicorn re-raises the captured signal once it has shut down gracefully; with these no-op handlers
    # in place that re-raise is harmless and the process exits 0 after a clean shutdown
    previous = {sig: signal.signal(sig, lambda *_: None) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        uvicorn.Server(config).run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


__all__ = ["EngineConfig", "ServerConfig", "ServingState", "build_server", "run_server"]
