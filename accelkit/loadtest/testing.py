"""A fake OpenAI-compatible streaming server with known timing, to check the load tester against.

It answers ``/v1/completions`` and ``/v1/chat/completions`` by emitting ``max_tokens`` tokens: the first
``ttft_s`` after the request arrives, then one every ``itl_s`` (on an absolute schedule, so sleep overshoot
does not accumulate), then a usage chunk (when ``stream_options.include_usage``) and ``data: [DONE]``.
Chat streams start with a role-only delta at once, as vLLM's do — a client that counted it as the first
token would measure a TTFT near 0. ``prompt_tokens`` is the number of whitespace-separated words.
``fail_every=k`` makes every k-th request fail (HTTP ``fail_status`` with an OpenAI error object, or, with
``fail_mode="stream"``, an error event after the first token); ``ignore_stream=True`` answers one JSON body
even to ``stream: true``, as a server without streaming does. ``GET /fake/stats`` reports how many requests
arrived, the most that were in flight at once, and each request's ``x-request-id`` and prompt digest.

In a test: ``with FakeOpenAIServer(FakeServerConfig(ttft_s=0.2, itl_s=0.05)) as server: server.base_url``
(a thread in this process), or ``mode="process"`` for a subprocess (no GIL shared with the client).
From a shell: ``python -m accelkit.loadtest.testing --ttft-ms 200 --itl-ms 50`` prints the base URL.
"""

# no `from __future__ import annotations`: FastAPI must see the real `Request` class of the handlers
import argparse
import asyncio
import hashlib
import json
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["FakeOpenAIServer", "FakeServerConfig", "build_app"]


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeServerConfig:
    """Timing and failure behaviour of the fake server."""

    model: str = "fake-model"  #: the one model name it serves
    ttft_s: float = 0.2  #: request arrival → first token
    itl_s: float = 0.05  #: gap between tokens
    default_max_tokens: int = 16  #: when the request gives no max_tokens
    fail_every: int | None = None  #: every k-th request (1-based count) fails; None: none fail
    fail_mode: Literal["http", "stream"] = "http"  #: HTTP error status, or an error event mid-stream
    fail_status: int = 500
    fail_message: str = "injected failure"
    api_key: str | None = None  #: when set, a missing or wrong bearer token answers 401
    ignore_stream: bool = False  #: answer one JSON body even to stream: true

    def to_args(self) -> list[str]:
        args = ["--model", self.model, "--ttft-ms", str(self.ttft_s * 1e3), "--itl-ms", str(self.itl_s * 1e3),
                "--default-max-tokens", str(self.default_max_tokens), "--fail-mode", self.fail_mode,
                "--fail-status", str(self.fail_status), "--fail-message", self.fail_message]
        if self.fail_every is not None:
            args += ["--fail-every", str(self.fail_every)]
        if self.api_key is not None:
            args += ["--api-key", self.api_key]
        if self.ignore_stream:
            args.append("--ignore-stream")
        return args


def _error(status: int, message: str, kind: str = "invalid_request_error") -> Any:
    from fastapi.responses import JSONResponse

    return JSONResponse(status_code=status, content={"error": {"message": message, "type": kind, "param": None, "code": status}})


def build_app(config: FakeServerConfig) -> Any:
    """The FastAPI app (importing fastapi only here, so the load tester never needs it)."""
    from fastapi import FastAPI, Request
    from fastapi.responses import StreamingResponse

    app = FastAPI(title="accelkit fake OpenAI server")
    state: dict[str, Any] = {"received": 0, "in_flight": 0, "max_in_flight": 0, "failed": 0, "payloads": [],
                             "requests": []}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": config.model, "object": "model", "owned_by": "accelkit"}]}

    @app.get("/fake/stats")
    async def stats() -> dict[str, Any]:
        return {k: v for k, v in state.items() if k != "payloads"} | {"last_payload": (state["payloads"] or [None])[-1]}

    async def handle(request: Request, chat: bool) -> Any:
        if config.api_key is not None and request.headers.get("authorization") != f"Bearer {config.api_key}":
            return _error(401, "invalid or missing API key", "authentication_error")
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "malformed JSON body")
        if body.get("model") != config.model:
            return _error(404, f"the model {body.get('model')!r} does not exist", "not_found_error")
        state["received"] += 1
        number = state["received"]
        state["payloads"] = (state["payloads"] + [body])[-5:]
        if config.fail_every and number % config.fail_every == 0 and config.fail_mode == "http":
            state["failed"] += 1
            return _error(config.fail_status, config.fail_message, "server_error")
        text = " ".join(m.get("content", "") for m in body.get("messages", [])) if chat else str(body.get("prompt", ""))
        # a digest, and the last 10,000 only: a long run from the shell must not grow without bound
        seen = {"request_id": request.headers.get("x-request-id"), "prompt_sha256": hashlib.sha256(text.encode()).hexdigest()}
        state["requests"].append(seen)
        del state["requests"][:-10_000]
        prompt_tokens = len(text.split())
        max_tokens = int(body.get("max_tokens") or body.get("max_completion_tokens") or config.default_max_tokens)
        fail_mid_stream = bool(config.fail_every and number % config.fail_every == 0)
        arrived = time.perf_counter()
        if not body.get("stream") or config.ignore_stream:
            await asyncio.sleep(config.ttft_s + config.itl_s * (max_tokens - 1))
            tokens = " ".join(f"t{i}" for i in range(max_tokens))
            choice = {"index": 0, "finish_reason": "length",
                      **({"message": {"role": "assistant", "content": tokens}} if chat else {"text": tokens})}
            return {"id": f"cmpl-{uuid.uuid4().hex}", "object": "chat.completion" if chat else "text_completion",
                    "created": int(time.time()), "model": config.model, "choices": [choice],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                              "total_tokens": prompt_tokens + max_tokens}}
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

        async def stream() -> AsyncIterator[str]:
            state["in_flight"] += 1
            state["max_in_flight"] = max(state["max_in_flight"], state["in_flight"])
            rid = f"cmpl-{uuid.uuid4().hex}"
            base = {"id": rid, "object": "chat.completion.chunk" if chat else "text_completion",
                    "created": int(time.time()), "model": config.model}
            try:
                if chat:  # role-only first delta, sent at once (carries no output)
                    yield _sse({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]})
                for i in range(max_tokens):
                    delay = arrived + config.ttft_s + i * config.itl_s - time.perf_counter()
                    if delay > 0:
                        await asyncio.sleep(delay)
                    if fail_mid_stream and i == 1:
                        state["failed"] += 1
                        yield _sse({"error": {"message": config.fail_message, "type": "server_error", "code": 500}})
                        return
                    finish = "length" if i == max_tokens - 1 else None
                    token = f" t{i}"
                    choice = {"index": 0, "finish_reason": finish,
                              **({"delta": {"content": token}} if chat else {"text": token, "logprobs": None})}
                    yield _sse({**base, "choices": [choice]})
                if include_usage:
                    yield _sse({**base, "choices": [], "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": max_tokens,
                                                                  "total_tokens": prompt_tokens + max_tokens}})
                yield "data: [DONE]\n\n"
            finally:
                state["in_flight"] -= 1

        return StreamingResponse(stream(), media_type="text/event-stream")

    @app.post("/v1/completions")
    async def completions(request: Request) -> Any:
        return await handle(request, chat=False)

    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Any:
        return await handle(request, chat=True)

    return app


def _sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj)}\n\n"


class FakeOpenAIServer:
    """Runs the fake server on 127.0.0.1 at a free port, in a thread or a subprocess; a context manager."""

    def __init__(self, config: FakeServerConfig | None = None, *, mode: Literal["thread", "process"] = "thread",
                 startup_timeout_s: float = 30.0):
        self.config = config or FakeServerConfig()
        self.mode = mode
        self.startup_timeout_s = startup_timeout_s
        self.base_url = ""
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._proc: subprocess.Popen[str] | None = None

    def __enter__(self) -> "FakeOpenAIServer":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> str:
        """Start and return the base URL (http://127.0.0.1:PORT)."""
        if self.mode == "process":
            self._proc = subprocess.Popen([sys.executable, "-m", "accelkit.loadtest.testing", *self.config.to_args()],
                                          stdout=subprocess.PIPE, text=True)
            assert self._proc.stdout is not None
            line = self._proc.stdout.readline().strip()  # the child prints its URL once it is listening
            if not line.startswith("http://"):
                self.stop()
                raise RuntimeError(f"the fake server did not start (printed {line!r})")
            self.base_url = line
            return self.base_url
        import uvicorn

        sock = _bound_socket()
        server = uvicorn.Server(uvicorn.Config(build_app(self.config), log_level="warning", lifespan="off"))
        self._server = server
        self._thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True, name="fake-openai")
        self._thread.start()
        deadline = time.monotonic() + self.startup_timeout_s
        while not server.started:  # uvicorn offers no start event; this wait is bounded
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the fake server did not start")
            time.sleep(0.01)
        self.base_url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        return self.base_url

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._server = None
        if self._proc is not None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait()
            if self._proc.stdout is not None:
                self._proc.stdout.close()
            self._proc = None

    def stats(self) -> dict[str, Any]:
        """Server-side counts: received, failed, max_in_flight, last_payload, and ``requests`` (each one's
        x-request-id and the SHA-256 of its prompt text, in arrival order)."""
        import httpx

        stats: dict[str, Any] = httpx.get(f"{self.base_url}/fake/stats", timeout=10).json()
        return stats


def _bound_socket() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))  # port 0: the OS picks a free one
    return sock


def main(argv: list[str] | None = None) -> None:
    """Serve until interrupted; prints the base URL on the first line of stdout."""
    p = argparse.ArgumentParser(prog="python -m accelkit.loadtest.testing", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="fake-model")
    p.add_argument("--ttft-ms", type=float, default=200.0)
    p.add_argument("--itl-ms", type=float, default=50.0)
    p.add_argument("--default-max-tokens", type=int, default=16)
    p.add_argument("--fail-every", type=int, default=None)
    p.add_argument("--fail-mode", choices=("http", "stream"), default="http")
    p.add_argument("--fail-status", type=int, default=500)
    p.add_argument("--fail-message", default="injected failure")
    p.add_argument("--api-key", default=None)
    p.add_argument("--ignore-stream", action="store_true", help="answer one JSON body even to stream: true")
    p.add_argument("--port", type=int, default=0, help="0: a free port")
    a = p.parse_args(argv)
    import uvicorn

    config = FakeServerConfig(model=a.model, ttft_s=a.ttft_ms / 1e3, itl_s=a.itl_ms / 1e3,
                              default_max_tokens=a.default_max_tokens, fail_every=a.fail_every, fail_mode=a.fail_mode,
                              fail_status=a.fail_status, fail_message=a.fail_message, api_key=a.api_key,
                              ignore_stream=a.ignore_stream)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", a.port))
    server = uvicorn.Server(uvicorn.Config(build_app(config), log_level="warning", lifespan="off"))

    async def serve() -> None:
        task = asyncio.create_task(server.serve(sockets=[sock]))
        while not server.started and not task.done():
            await asyncio.sleep(0.01)
        print(f"http://127.0.0.1:{sock.getsockname()[1]}", flush=True)
        await task

    asyncio.run(serve())


if __name__ == "__main__":
    main()
