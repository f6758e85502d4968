"""Start and stop: bind the socket before anything slow happens, and shut down in bounded time, quietly.

Shutdown (SIGTERM or Ctrl-C): new connections are refused and new requests get 503 at once; requests in
flight get ``shutdown_timeout_s`` to finish; then every one still running is aborted through the engine, so
that each handler ends by itself (a 503, or an error event in a stream) and its KV blocks are freed.
uvicorn's own graceful timeout sits ``_BACKSTOP_S`` later, for a client that does not even read its error;
what uvicorn has to cancel then ends without a traceback (``ServerMiddleware``). Then the engine loop stops.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
from typing import Any

import uvicorn

from accelkit.serve.server.state import ServingState

log = logging.getLogger("accelkit.serve")
_BACKSTOP_S = 5.0


def bind_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (not yet listening); ValueError naming the flag and the fix."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except (socket.gaierror, UnicodeError) as exc:
        reason = exc.strerror if isinstance(exc, socket.gaierror) else str(exc)
        raise ValueError(f"--host {host!r} is not an address this machine has ({reason}); use 127.0.0.1, "
                         "0.0.0.0 or one of its interface addresses") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as uvicorn does; a listening port stays busy
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        fix = "pick another --port" if exc.errno in (98, 13, 48) else "use an address of this machine as --host"
        raise ValueError(f"cannot listen on {host}:{port} ({exc.strerror}); {fix}") from None
    return sock


class ServeServer(uvicorn.Server):
    """uvicorn's server with accelkit's shutdown: a deadline that aborts through the engine."""

    def __init__(self, config: uvicorn.Config, state: ServingState) -> None:
        super().__init__(config)
        self.state = state

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.state.accepting = False
        deadline = asyncio.ensure_future(self._abort_at_deadline())
        try:
            await super().shutdown(sockets)
        finally:
            deadline.cancel()

    async def _abort_at_deadline(self) -> None:
        timeout = self.state.config.shutdown_timeout_s
        await asyncio.sleep(timeout)
        num_aborted = self.state.abort_in_flight()
        if num_aborted:
            log.warning("shutdown: aborted %d request(s) still running after %g s (--shutdown-timeout)",
                        num_aborted, timeout)


def server_config(app: Any, state: ServingState, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's config with the backstop after accelkit's own shutdown deadline (whole seconds, as it wants)."""
    backstop = math.ceil(state.config.shutdown_timeout_s + _BACKSTOP_S)
    return uvicorn.Config(app, timeout_graceful_shutdown=backstop, **kwargs)
