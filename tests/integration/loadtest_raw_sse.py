"""A raw asyncio SSE server on 127.0.0.1 whose streams a test scripts chunk by chunk, malformed ones
included (the FastAPI fake server in accelkit.loadtest.testing only ever sends well-formed chunks).

``script(n, body, chat)`` gets the 1-based arrival number of the request, its JSON body and whether it
came to the chat endpoint, and returns the ``data:`` payloads to send in order: a dict is sent as JSON,
a str as it is, a float is a pause of that many seconds, and :data:`END` ends the body cleanly there (no
``[DONE]``); otherwise ``[DONE]`` follows them. :func:`tokens` builds a well-formed stream to start from.
"""

import asyncio
import json
import threading
from collections.abc import Callable
from typing import Any

Script = Callable[[int, dict[str, Any], bool], list[Any]]

#: in a script: end the response body here, cleanly, without ``[DONE]``
END = object()


def tokens(body: dict[str, Any], chat: bool) -> list[Any]:
    """``max_tokens`` output chunks (``delta.content`` for chat, ``text`` otherwise), then the usage chunk."""
    n = int(body.get("max_tokens", 4))
    chunks: list[Any] = [{"choices": [{"index": 0, **({"delta": {"content": f" t{i}"}} if chat else {"text": f" t{i}"})}]}
                         for i in range(n)]
    return [*chunks, {"choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": n}}]


class RawSSEServer:
    """The server in a thread with its own event loop; a context manager. ``base_url`` once entered."""

    def __init__(self, script: Script):
        self.script = script
        self.base_url = ""
        self.received = 0
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="raw-sse")
        self._server: asyncio.Server | None = None

    def __enter__(self) -> "RawSSEServer":
        self._thread.start()
        self._server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self._handle, "127.0.0.1", 0), self._loop).result(timeout=30)
        self.base_url = f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    def __exit__(self, *exc: object) -> None:
        async def close() -> None:
            assert self._server is not None
            self._server.close()
            await self._server.wait_closed()

        asyncio.run_coroutine_threadsafe(close(), self._loop).result(timeout=30)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=30)
        self._loop.close()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = (await reader.readuntil(b"\r\n\r\n")).decode()
            length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n")
                           if line.lower().startswith("content-length:")), 0)
            body = json.loads(await reader.readexactly(length)) if length else {}
            self.received += 1
            payloads = self.script(self.received, body, "/chat/" in head.split("\r\n", 1)[0])
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n")
            for payload in [*payloads, "[DONE]"]:
                if payload is END:
                    break
                if isinstance(payload, float):
                    await asyncio.sleep(payload)
                    continue
                data = payload if isinstance(payload, str) else json.dumps(payload)
                writer.write(f"data: {data}\n\n".encode())
                await writer.drain()
        finally:
            writer.close()
