"""What one client's connections may cost the others: a cap per client address, idle connections dropped first
when the server nears its connection limit, and a deadline for each request's headers.

uvicorn counts every open connection — idle kept-alive ones and ones that never sent a byte too — against
``limit_concurrency`` and answers each new request past it with 503. So 1,100 idle connections from one client
made every other client's request a 503 until they timed out. Here, on each new connection:

1. a client address holding ``max_per_client`` connections already: the new one's requests get a **429** and
   it closes after the first; until it sends one it is the first idle connection dropped (behind a reverse
   proxy every client has the proxy's address: see docs/serve.md);
2. when the open connections reach the limit less ``IDLE_RESERVE``, the connection idle longest (no request in
   progress — between requests, or not yet a whole request head — and silent for ``IDLE_GRACE_S``) is closed, so
   that a new client's request finds room; a connection with a request in progress is never dropped;
3. request headers must come within ``header_timeout_s`` of connecting or of the previous response, else the
   connection is closed (uvicorn times out only the idle wait after a response, not a connection that sends
   nothing, or half its headers).

Written on uvicorn's protocol class (``base``) rather than as a proxy of our own: only these three decisions are
ours; parsing, flow control and keep-alive stay uvicorn's.
"""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from dataclasses import dataclass, field
from typing import Any

from accelkit.serve.server.errors import error_body

log = logging.getLogger("accelkit.serve")
IDLE_RESERVE = 8  # connections kept free below the limit by closing idle ones: room for new clients' requests
IDLE_GRACE_S = 1.0  # a connection is idle once it has sent nothing for this long (and has no request in progress)
REFUSAL_LOG_S = 10.0  # at most one "refused connections" warning per this many seconds


@dataclass(slots=True)
class ConnectionGuard:
    """The limits, and the count of open connections per client address (one per server)."""

    limit: int  # uvicorn's limit_concurrency: open connections beyond which a new request gets 503
    max_per_client: int  # open connections one client address may hold
    header_timeout_s: float
    per_client: dict[str | None, int] = field(default_factory=dict)
    num_refused: int = 0
    num_idle_closed: int = 0
    _last_log: float = -math.inf

    def refusal_app(self, address: str | None) -> Any:
        """The ASGI app a connection past its address's cap gets in place of the server's: each request on it is a
        **429** that says why, then the connection closes. Answered as a request rather than by closing at once: a
        client that already wrote its request would read a reset, not a reason."""
        body = json.dumps(error_body(
            429, f"too many connections from {address}: at most {self.max_per_client} open at once per client "
            "address (--max-connections-per-client); reuse kept-alive connections, or close idle ones",
            code="too_many_connections")).encode()
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                   (b"retry-after", b"1"), (b"connection", b"close")]

        async def refuse(scope: Any, receive: Any, send: Any) -> None:
            await send({"type": "http.response.start", "status": 429, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        return refuse

    def note_refused(self, address: str | None) -> None:
        self.num_refused += 1
        now = time.monotonic()
        if now - self._last_log >= REFUSAL_LOG_S:
            log.warning("refusing connections from %s: %d open (--max-connections-per-client %d); %d refused so "
                        "far", address, self.per_client.get(address, 0), self.max_per_client, self.num_refused)
            self._last_log = now


_MALFORMED_BODY = json.dumps(error_body(
    400, "the request is not valid HTTP/1.1 (a malformed request line or header, or headers over the size limit; "
    "a TLS handshake? this server speaks plain HTTP)", code="invalid_http")).encode()
_MALFORMED = (b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: "
              + str(len(_MALFORMED_BODY)).encode() + b"\r\nconnection: close\r\n\r\n" + _MALFORMED_BODY)


def guarded_protocol(base: type[Any], guard: ConnectionGuard) -> type[Any]:
    """uvicorn's HTTP/1.1 protocol class ``base`` with the per-address cap, idle-first dropping and the header
    deadline of ``guard`` (see the module docstring)."""

    class GuardedProtocol(base):  # type: ignore[misc]
        _header_timer: asyncio.TimerHandle | None = None
        _cycle_seen: Any = None
        _address: str | None = None
        _counted = False  # in guard.per_client (not when over its address's cap)
        _over_cap = False
        _last_active = 0.0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._last_active = self.loop.time()
            self._address = self.client[0] if self.client else None
            held = guard.per_client.get(self._address, 0)
            if self._address is not None and held >= guard.max_per_client:
                # its requests get 429; until one comes it is the first idle connection to close
                guard.note_refused(self._address)
                self.app = guard.refusal_app(self._address)
                self._over_cap = True
            else:
                guard.per_client[self._address] = held + 1
                self._counted = True
            excess = len(self.connections) - (guard.limit - IDLE_RESERVE)
            if excess >= 0:
                self._close_idlest(excess + 1)
            self._arm()

        def data_received(self, data: bytes) -> None:
            self._last_active = self.loop.time()
            super().data_received(data)
            self._see_request()

        def on_response_complete(self) -> None:
            super().on_response_complete()
            self._last_active = self.loop.time()
            self._see_request()  # a pipelined request may have started already
            if self.cycle is self._cycle_seen and not self.transport.is_closing():
                self._arm()

        def connection_lost(self, exc: Exception | None) -> None:
            self._disarm()
            if self._counted:
                self._counted = False
                left = guard.per_client.get(self._address, 1) - 1
                if left > 0:
                    guard.per_client[self._address] = left
                else:
                    guard.per_client.pop(self._address, None)
            super().connection_lost(exc)

        @property
        def is_idle(self) -> bool:
            """No request in progress (between requests, or its request head not all here yet) and nothing
            received for ``IDLE_GRACE_S``: a connection whose head is on its way is not taken for an idle one."""
            return ((self.cycle is None or self.cycle.response_complete) and not self.transport.is_closing()
                    and (self._over_cap or self.loop.time() - self._last_active >= IDLE_GRACE_S))

        def _close_idlest(self, num: int) -> None:
            """Close up to ``num`` idle connections, those idle longest first (a scan of the open connections:
            it runs only near the limit, and a close is a few microseconds)."""
            idle = [c for c in self.connections if c is not self and getattr(c, "is_idle", False)]
            for conn in sorted(idle, key=lambda c: (not c._over_cap, c._last_active))[:num]:
                guard.num_idle_closed += 1
                conn.transport.close()

        def send_400_response(self, msg: str) -> None:
            """uvicorn's answer to bytes that are not HTTP/1.1 (a malformed request line or header, a header over
            its size limit, a TLS handshake on the plain-HTTP port) as an OpenAI error object, not its plain text
            (found by a hunt: every failure is an error object); the connection then closes, as uvicorn's does."""
            self.transport.write(_MALFORMED)
            self.transport.close()

        def _unsupported_upgrade_warning(self) -> None:
            """An ``Upgrade`` request (the server speaks no WebSocket: ``lifecycle.server_config``) is answered as a
            plain request; uvicorn's two warnings for each — one telling the operator to install a WebSocket library
            — were two log lines any client could write at will."""
            log.debug("ignoring a request's Upgrade header (this server has no WebSocket routes)")

        def _see_request(self) -> None:
            if self.cycle is not self._cycle_seen:
                self._cycle_seen = self.cycle
                self._disarm()

        def _arm(self) -> None:
            self._disarm()
            self._header_timer = self.loop.call_later(guard.header_timeout_s, self._headers_too_late)

        def _disarm(self) -> None:
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_late(self) -> None:
            self._header_timer = None
            if self.cycle is self._cycle_seen and not self.transport.is_closing():
                self.transport.close()

    GuardedProtocol.__name__ = f"Guarded{base.__name__}"
    return GuardedProtocol
