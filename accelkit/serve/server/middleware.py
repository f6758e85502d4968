"""The server's one middleware, plain ASGI: the Host check (``HostCheck``), API key, body-size limit, body-read
deadline, ``x-request-id`` echo, quiet shutdown, and one info-level log line per request (client, method, path,
status, milliseconds).

Plain ASGI rather than Starlette's ``BaseHTTPMiddleware`` on purpose: that class wraps ``receive`` so that a
route can never see ``http.disconnect`` — a non-streaming request would keep generating for a client that has
left. Here ``receive`` reaches the route as uvicorn gives it (wrapped only to count body bytes).
"""

from __future__ import annotations

import asyncio
import hmac
import ipaddress
import json
import logging
import time
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from starlette.exceptions import HTTPException

from accelkit.core.terminal import printable
from accelkit.serve.server.errors import error_body

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("accelkit.serve")
OPEN_PATHS = frozenset({"/health", "/ping", "/metrics"})  # probes and scrapers: never behind the key


def authorized(header: bytes | None, key: bytes) -> bool:
    """``Authorization: Bearer KEY`` — the scheme in any case (RFC 9110), the key compared in constant time."""
    if header is None:
        return False
    scheme, _, token = header.strip().partition(b" ")
    return scheme.lower() == b"bearer" and hmac.compare_digest(token.strip(), key)


def _is_loopback(name: str) -> bool:
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        return False


class HostCheck:
    """Which ``Host`` headers the server answers: any until :meth:`listening_on` says it listens on a loopback
    address without an API key; then only localhost, loopback addresses and ``--allowed-hosts`` (any port). A web
    page can rebind its own name to 127.0.0.1 (DNS rebinding): the browser then treats the server as the page's own
    origin, CORS or not, and the page could use it and read its answers — the Host header, the page's name, is what
    tells such a request apart (found in review). With an API key the page cannot use it anyway; a server listening
    beyond loopback is reached by names this one cannot know."""

    def __init__(self, allowed: tuple[str, ...], *, api_key: bool) -> None:
        self.allowed = frozenset({"localhost", *allowed})
        self.api_key = api_key
        self.active = False

    def listening_on(self, address: str) -> None:
        """The address the server's socket is bound to (``getsockname()[0]``)."""
        self.active = _is_loopback(address) and not self.api_key and "*" not in self.allowed

    def refused(self, headers: list[tuple[bytes, bytes]]) -> str | None:
        """The Host a request must not be answered for (None when it may be). A request without one passes: every
        browser sends it."""
        if not self.active:
            return None
        for key, value in headers:
            if key != b"host":
                continue
            host = value.decode("latin-1").strip()
            name = host.lower()
            name = name[1:name.find("]")] if name.startswith("[") else name.partition(":")[0]
            name = name.rstrip(".")
            if name not in self.allowed and not _is_loopback(name):
                return host
        return None


class ServerMiddleware:
    def __init__(self, app: ASGIApp, *, api_key: str | None, max_body_bytes: int,
                 is_shutting_down: Callable[[], bool], body_timeout_s: float, log_requests: bool = True,
                 host_check: HostCheck | None = None) -> None:
        """``body_timeout_s``: a body must arrive in full within this many seconds of the route's first read, else
        408 and the connection closes: a client that sends headers and part of a body would otherwise hold its
        socket and its handler forever (slowloris), and enough of them exhaust the process's file descriptors.
        ``host_check``: whose ``Host`` is answered (every one's when not given)."""
        self.app = app
        self.host_check = host_check
        self.body_timeout_s = body_timeout_s
        self.key = api_key.encode() if api_key else None
        self.max_body_bytes = max_body_bytes
        self.is_shutting_down = is_shutting_down
        self.log_requests = log_requests

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if not self.log_requests:
            await self._handle(scope, receive, send, [])
            return
        start = time.perf_counter()
        status: list[int] = []  # the response's status, once it starts
        try:
            await self._handle(scope, receive, send, status)
        except Exception:
            status.append(500)  # what the outer error handler answers
            raise
        finally:
            # one line per request once it ended (a stream: when its last event went), 4xx and 5xx too;
            # 499: the client left before any response. The path is the client's (%0A decodes to a newline): one
            # line whatever it holds, or a client could write log lines of its own (found in review)
            client = scope.get("client")
            log.info("%s %s %s %d %.1f ms", client[0] if client else "-", scope.get("method"),
                     printable(scope.get("path") or "", single_line=True), status[0] if status else 499,
                     (time.perf_counter() - start) * 1e3)

    async def _handle(self, scope: Scope, receive: Receive, send: Send, status: list[int]) -> None:
        headers = dict(scope.get("headers") or ())
        request_id = headers.get(b"x-request-id")

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
                if request_id is not None:
                    message["headers"] = [*message.get("headers", ()), (b"x-request-id", request_id)]
            await send(message)

        host = self.host_check.refused(scope.get("headers") or []) if self.host_check is not None else None
        if host is not None:  # before anything else, /health and /metrics too: a page must learn nothing
            await _reply(send_with_id, 400, f"Host {host[:200]!r} is not a name of this server: listening on a "
                         "loopback address without --api-key, it answers only localhost and loopback addresses "
                         "(a web page could reach it by DNS rebinding otherwise); add the name to --allowed-hosts, "
                         "or set --api-key", code="invalid_host")
            return
        if self.key is not None and scope["path"] not in OPEN_PATHS and not authorized(headers.get(b"authorization"),
                                                                                        self.key):
            await _reply(send_with_id, 401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                         code="invalid_api_key", extra_headers=[(b"www-authenticate", b"Bearer")])
            return
        encoding = headers.get(b"content-encoding", b"identity").strip().lower()
        if encoding not in (b"identity", b""):
            # a gzip body read as JSON was "not UTF-8 text (byte 1 is b'\\x8b')": say what is refused, and the fix
            await _reply(send_with_id, 415, f"Content-Encoding {encoding.decode('latin-1')[:50]!r} is not supported; "
                         "send the request body uncompressed (no Content-Encoding header)",
                         code="unsupported_content_encoding")
            return
        declared = headers.get(b"content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > self.max_body_bytes):
            # answered before a byte of the body is read or parsed; the connection closes after this response
            await _reply(send_with_id, 413, self._too_large(declared.decode(errors="replace")),
                         code="request_too_large")
            return
        received = 0
        body_done = False
        deadline: float | None = None  # set by the first read of the body

        async def counting_receive() -> Message:  # a chunked body has no length up front: count as it comes
            nonlocal received, body_done, deadline
            if body_done:  # what comes now is http.disconnect, awaited for as long as the response lasts
                return await receive()
            loop = asyncio.get_running_loop()
            deadline = deadline if deadline is not None else loop.time() + self.body_timeout_s
            try:
                message = await asyncio.wait_for(receive(), max(deadline - loop.time(), 0.0))
            except TimeoutError:
                raise HTTPException(408, f"the request body did not arrive within {self.body_timeout_s:g} s "
                                    f"({received} bytes came); send it in full, promptly",
                                    headers={"connection": "close"}) from None
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                body_done = not message.get("more_body", False)
                if received > self.max_body_bytes:
                    # the rest of a chunked body cannot be skipped on a kept-alive connection: close it, as the
                    # 413 from Content-Length does (it stayed open until --header-timeout: found by a hunt)
                    raise HTTPException(413, self._too_large(f"more than {received}"), headers={"connection": "close"})
            else:
                body_done = True
            return message

        try:
            await self.app(scope, counting_receive, send_with_id)
        except asyncio.CancelledError:
            if not self.is_shutting_down():
                raise
            # uvicorn cancels what outlived the shutdown grace period; the request was already aborted and its
            # client told so — end quietly instead of one traceback per request

    def _too_large(self, size: str) -> str:
        return (f"the request body is {size} bytes; this server accepts at most {self.max_body_bytes} "
                "(--max-body-size)")


async def _reply(send: Send, status: int, message: str, *, code: str,
                 extra_headers: list[tuple[bytes, bytes]] | None = None) -> None:
    body = json.dumps(error_body(status, message, code=code)).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
               *(extra_headers or [])]
    if status in (413, 415):
        headers.append((b"connection", b"close"))  # the unread body cannot be skipped on a kept-alive connection
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
