"""Start and stop: serve on the socket bound before anything slow happened (``accelkit.serve.listen``), and shut
down in bounded time, quietly.

Shutdown (SIGTERM or Ctrl-C): new connections are refused and new requests get 503 at once; requests in
flight get ``shutdown_timeout_s`` to finish; then every one still running is aborted through the engine, so
that each handler ends by itself (a 503, or an error event in a stream) and its KV blocks are freed.
uvicorn's own graceful timeout sits ``_BACKSTOP_S`` later, for a client that does not even read its error;
what uvicorn has to cancel then ends without a traceback (``ServerMiddleware``). Then the engine loop stops.

Connections are bounded (``connections``): at most ``max_connections_per_client`` per client address, idle ones
closed first as the open ones near ``concurrency_limit`` (past it uvicorn answers 503), request headers within
``header_timeout_s`` of connecting (or of the previous response), a body within ``body_timeout_s``
(``ServerConfig``); running out of file descriptors is one warning a few seconds apart, not a traceback per
refused accept.
"""

from __future__ import annotations

import asyncio
import logging
import math
import socket
import time
from typing import Any

import uvicorn
from uvicorn.protocols.http.auto import AutoHTTPProtocol

from accelkit.serve.server.connections import ConnectionGuard, guarded_protocol
from accelkit.serve.server.state import ServingState

log = logging.getLogger("accelkit.serve")
_BACKSTOP_S = 5.0
CONNECTION_MARGIN = 64  # connections beyond 2 × (max_num_seqs + max_queue): probes, scrapers, clients told 429
PER_CLIENT_MARGIN = 32  # one address's connections beyond max_num_seqs + max_queue (a pool's idle ones, probes)
ACCEPT_ERROR_LOG_S = 10.0  # at most one "cannot accept" warning per this many seconds


class _AcceptErrorLog:
    """The event loop's exception handler with "cannot accept" (EMFILE and the like) said once per
    ``ACCEPT_ERROR_LOG_S`` with a count: asyncio logs a traceback for each of up to 2048 refused accepts per
    second, tens of megabytes of log a minute once the descriptors run out."""

    def __init__(self) -> None:
        self.num_since, self.last = 0, -math.inf

    def __call__(self, loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        if context.get("message") != "socket.accept() out of system resource":
            loop.default_exception_handler(context)
            return
        self.num_since += 1
        now = time.monotonic()
        if now - self.last >= ACCEPT_ERROR_LOG_S:
            log.warning("cannot accept connections: %s (%d time(s) since the last warning); raise the open-file "
                        "limit (ulimit -n) or put a reverse proxy in front to bound the clients",
                        context.get("exception"), self.num_since)
            self.num_since, self.last = 0, now


class ServeServer(uvicorn.Server):
    """uvicorn's server with accelkit's shutdown: a deadline that aborts through the engine."""

    def __init__(self, config: uvicorn.Config, state: ServingState) -> None:
        super().__init__(config)
        self.state = state

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        asyncio.get_running_loop().set_exception_handler(_AcceptErrorLog())
        await super().startup(sockets)

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


def concurrency_limit(state: ServingState) -> int:
    """Connections (open ones, idle keep-alive ones too: uvicorn counts both) beyond which a new request gets
    uvicorn's 503: twice what the server admits (max_num_seqs + max_queue; one connection each at most) plus
    ``CONNECTION_MARGIN``, so that clients up to capacity are never refused by it and the rest get 429 first.
    Idle connections are closed before it is reached (``connections``)."""
    return 2 * state.admission.capacity + CONNECTION_MARGIN


def max_connections_per_client(state: ServingState) -> int:
    """Open connections one client address may hold: ``--max-connections-per-client``, else what the server admits
    plus ``PER_CLIENT_MARGIN`` — a load generator on one machine never needs more (requests past capacity get
    429), and one address cannot take all of :func:`concurrency_limit`."""
    return state.config.max_connections_per_client or state.admission.capacity + PER_CLIENT_MARGIN


def connection_guard(state: ServingState) -> ConnectionGuard:
    return ConnectionGuard(limit=concurrency_limit(state), max_per_client=max_connections_per_client(state),
                           header_timeout_s=state.config.header_timeout_s)


def server_config(app: Any, state: ServingState, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's config with the backstop after accelkit's own shutdown deadline (whole seconds, as it wants), the
    connection limits and the header timeout."""
    backstop = math.ceil(state.config.shutdown_timeout_s + _BACKSTOP_S)
    # ws="none": the API has no WebSocket routes, and an upgraded connection leaves uvicorn's protocol object
    # without its connection_lost, so its address's count in the connection guard would never drop (with
    # websockets or wsproto installed: 40 upgrades and that address, a reverse proxy's, was refused for good)
    return uvicorn.Config(app, timeout_graceful_shutdown=backstop, limit_concurrency=concurrency_limit(state),
                          http=guarded_protocol(AutoHTTPProtocol, connection_guard(state)), ws="none", **kwargs)
