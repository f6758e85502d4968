"""Start and stop: bind the socket before anything slow happens, and shut down in bounded time, quietly.

Shutdown (SIGTERM or Ctrl-C): new connections are refused and new requests get 503 at once; requests in
flight get ``shutdown_timeout_s`` to finish; then every one still running is aborted through the engine, so
that each handler ends by itself (a 503, or an error event in a stream) and its KV blocks are freed.
uvicorn's own graceful timeout sits ``_BACKSTOP_S`` later, for a client that does not even read its error;
what uvicorn has to cancel then ends without a traceback (``ServerMiddleware``). Then the engine loop stops.

Connections are bounded: request headers must come within ``header_timeout_s`` of connecting (or of the previous
response), a body within ``body_timeout_s`` (``ServerConfig``); beyond ``concurrency_limit`` connections uvicorn answers
503; running out of file descriptors is one warning a few seconds apart, not a traceback per refused accept.
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

from accelkit.serve.server.state import ServingState

log = logging.getLogger("accelkit.serve")
_BACKSTOP_S = 5.0
CONNECTION_MARGIN = 64  # connections beyond 2 × (max_num_seqs + max_queue): probes, scrapers, clients told 429
ACCEPT_ERROR_LOG_S = 10.0  # at most one "cannot accept" warning per this many seconds


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


def _with_header_timeout(base: type[Any], timeout_s: float) -> type[Any]:
    """uvicorn's HTTP/1.1 protocol ``base``, closing a connection whose request headers have not all come within
    ``timeout_s`` of connecting or of the last response (a new request is known by the new request-response
    cycle uvicorn makes once the headers are in). uvicorn times out only the idle wait after a response: a
    connection that sent nothing, or half its headers, stayed open forever, and ~20k of them exhausted the file
    descriptors (every client then timed out)."""

    class HeaderTimeoutProtocol(base):  # type: ignore[misc]
        _header_timer: asyncio.TimerHandle | None = None
        _cycle_seen: Any = None

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._arm()

        def data_received(self, data: bytes) -> None:
            super().data_received(data)
            self._see_request()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._see_request()  # a pipelined request may have started already
            if self.cycle is self._cycle_seen and not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            super().connection_lost(exc)

        def _see_request(self) -> None:
            if self.cycle is not self._cycle_seen:
                self._cycle_seen = self.cycle
                self._disarm()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(timeout_s, self._headers_too_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_late(self) -> None:
            self._header_timer = None
            if self.cycle is self._cycle_seen and not self.transport.is_closing():
                self.transport.close()

    HeaderTimeoutProtocol.__name__ = f"HeaderTimeout{base.__name__}"
    return HeaderTimeoutProtocol


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
    ``CONNECTION_MARGIN``, so that clients up to capacity are never refused by it and the rest get 429 first."""
    return 2 * state.admission.capacity + CONNECTION_MARGIN


def server_config(app: Any, state: ServingState, **kwargs: Any) -> uvicorn.Config:
    """uvicorn's config with the backstop after accelkit's own shutdown deadline (whole seconds, as it wants), the
    header timeout and the connection limit."""
    backstop = math.ceil(state.config.shutdown_timeout_s + _BACKSTOP_S)
    return uvicorn.Config(app, timeout_graceful_shutdown=backstop, limit_concurrency=concurrency_limit(state),
                          http=_with_header_timeout(AutoHTTPProtocol, state.config.header_timeout_s), **kwargs)
