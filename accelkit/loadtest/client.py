"""A streaming client for the public OpenAI API (`/v1/completions`, `/v1/chat/completions`) that times
every output-bearing chunk.

Each request streams (``stream: true``) with ``stream_options: {"include_usage": true}`` so that the
server's own token counts arrive in the last chunk. A chunk is *output-bearing* when its first choice
carries text (``text`` for completions; ``delta.content``, ``delta.reasoning`` — vLLM's reasoning field —
or the older ``delta.reasoning_content`` for chat); a role-only first chat delta or a usage-only chunk is
not, so it does not stop the TTFT clock. The first chunk whose first choice has a ``finish_reason`` ends
the request (a request ended by EOS sends that step as a text-less finish chunk). A request succeeds when
an output-bearing or finish chunk arrived and the stream reached a finish_reason or ``[DONE]``.
Timestamps are ``time.perf_counter()`` taken as each SSE line is read.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from accelkit.loadtest.config import LoadTestConfig
from accelkit.loadtest.datasets import SampleRequest
from accelkit.loadtest.metrics import RequestRecord
from accelkit.loadtest.structured import request_fields

__all__ = ["MalformedChunk", "OpenAIStreamClient", "chunk_finish_reason", "chunk_text"]

_MAX_ERROR_CHARS = 300


class MalformedChunk(ValueError):
    """A streamed chunk whose fields have the wrong JSON types; the request it came in fails with this text."""


def chunk_text(data: dict[str, Any], endpoint: str) -> str | None:
    """The output text a streamed chunk carries, or None when it carries none (no choices, a role-only
    delta, a null or empty text). A field of the wrong JSON type raises :class:`MalformedChunk`: guessing
    would time a chunk the server did not mean as output, or drop one it did."""
    choice = _first_choice(data)
    if choice is None:
        return None
    if endpoint == "completions":
        return _text_field(choice, "text") or None
    delta = choice.get("delta")
    if delta is None:
        return None
    if not isinstance(delta, dict):
        raise MalformedChunk(f"'delta' is {_json_type(delta)}, not an object")
    # all are type-checked before any is returned: a bad reasoning field fails even beside content
    texts = [_text_field(delta, key) for key in ("content", "reasoning", "reasoning_content")]
    return next((text for text in texts if text), None)


def chunk_finish_reason(data: dict[str, Any]) -> str | None:
    """The first choice's ``finish_reason`` ('stop', 'length', …), or None while the request goes on."""
    choice = _first_choice(data)
    return None if choice is None else _text_field(choice, "finish_reason")


def _first_choice(data: dict[str, Any]) -> dict[str, Any] | None:
    choices = data.get("choices")
    if choices is None or choices == []:
        return None
    if not isinstance(choices, list):
        raise MalformedChunk(f"'choices' is {_json_type(choices)}, not an array")
    if not isinstance(choices[0], dict):
        raise MalformedChunk(f"'choices[0]' is {_json_type(choices[0])}, not an object")
    return choices[0]


def _text_field(container: dict[str, Any], key: str) -> str | None:
    """``container[key]`` when it is a string or absent/null; any other JSON type raises :class:`MalformedChunk`."""
    text = container.get(key)
    if text is None or isinstance(text, str):
        return text
    raise MalformedChunk(f"{key!r} is {_json_type(text)}, not a string")


def _json_type(value: object) -> str:
    names = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return names.get(type(value), "null" if value is None else type(value).__name__)


def _error_text(body: bytes | str, status: int) -> str:
    """'HTTP 429: <the OpenAI error message>' from an error response."""
    raw = body.decode("utf-8", "replace") if isinstance(body, bytes) else body
    message = raw.strip()
    try:
        obj = json.loads(raw)
        if isinstance(obj, dict):
            err = obj.get("error", obj)
            message = str(err.get("message") or err.get("detail") or err) if isinstance(err, dict) else str(err)
    except ValueError:
        pass
    return f"HTTP {status}: {message[:_MAX_ERROR_CHARS] or httpx.codes.get_reason_phrase(status)}"


class OpenAIStreamClient:
    """One ``httpx.AsyncClient`` for a whole load test (connections are reused across requests)."""

    def __init__(self, config: LoadTestConfig):
        self.config = config
        self.url = config.url
        headers = {"Content-Type": "application/json", "User-Agent": "accelkit-loadtest"}
        if config.api_key:
            headers["Authorization"] = f"Bearer {config.api_key}"
        # one connection per request in flight, no other cap than --max-concurrency: vLLM's client does the same
        # (aiohttp.TCPConnector(limit=max_concurrency or 0), 0 = no limit). httpx's default pool (100) would silently
        # cap concurrency, and a request waiting for a pooled connection would count that wait in its TTFT (its send
        # time is taken before); a server that refuses the excess answers 429, which the runner reports
        limits = httpx.Limits(max_connections=config.max_concurrency, max_keepalive_connections=config.max_concurrency)
        self._client = httpx.AsyncClient(headers=headers, limits=limits, timeout=httpx.Timeout(config.timeout_s))

    async def aclose(self) -> None:
        await self._client.aclose()

    async def __aenter__(self) -> OpenAIStreamClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def payload(self, request: SampleRequest) -> dict[str, Any]:
        """The request body: greedy, streamed, usage included; ``ignore_eos`` only when asked for
        (it is a vLLM/SGLang extension that a strict server may reject); the structured-output constraint's
        fields when there is one (:func:`accelkit.loadtest.structured.request_fields`)."""
        body: dict[str, Any] = {"model": self.config.model, "max_tokens": request.output_len, "temperature": 0.0,
                                "stream": True, "stream_options": {"include_usage": True}}
        if self.config.endpoint == "completions":
            body["prompt"] = request.prompt
        else:
            body["messages"] = [{"role": "user", "content": request.prompt}]
        if self.config.ignore_eos:
            body["ignore_eos"] = True
        if self.config.structured_outputs is not None:
            body.update(request_fields(self.config.structured_outputs, self.config.endpoint,
                                       guided_fields=self.config.guided_fields))
        return body

    async def served_models(self) -> list[str] | None:
        """The model names ``GET /v1/models`` lists, or None when the server does not say (no such route, an
        error, a body of another shape, no answer within min(--timeout, 10 s)): not every OpenAI-compatible
        server has the route, and the warm-up reports a server that cannot be reached."""
        try:
            response = await self._client.get(self.config.models_url, timeout=min(self.config.timeout_s, 10.0))
            body = response.json() if response.status_code == 200 else None
        except (httpx.HTTPError, ValueError):
            return None
        data = body.get("data") if isinstance(body, dict) else None
        if not isinstance(data, list) or not data:
            return None
        ids = [m.get("id") if isinstance(m, dict) else None for m in data]
        names = [i for i in ids if isinstance(i, str)]
        return names if len(names) == len(ids) else None

    async def send(self, request: SampleRequest, record: RequestRecord, t0: float, *, request_id: str | None = None) -> RequestRecord:
        """Send one request and fill ``record``; never raises for anything the server or the network does
        (the error text goes into ``record.error``), so one request cannot sink a pass. ``t0`` is the
        pass's start on the perf_counter clock."""
        headers = {"x-request-id": request_id} if request_id else None
        body = self.payload(request)
        is_done = False
        st = time.perf_counter()
        record.send_s = st - t0
        try:
            async with asyncio.timeout(self.config.timeout_s):  # the whole request, not each read
                async with self._client.stream("POST", self.url, json=body, headers=headers) as response:
                    record.status_code = response.status_code
                    if response.status_code != 200:
                        record.error = _error_text(await response.aread(), response.status_code)
                        return record
                    content_type = response.headers.get("content-type", "")
                    if "json" in content_type.lower():  # a server without streaming answers one JSON body
                        await response.aread()
                        record.error = _json_not_stream(content_type)
                        return record
                    is_done = await self._read_stream(response, record, st)
        except (TimeoutError, httpx.TimeoutException):
            record.error = f"timed out after {self.config.timeout_s:g} s (--timeout)"
        except httpx.ConnectError as exc:
            record.error = f"cannot connect to {self.url}: {exc}"[:_MAX_ERROR_CHARS]
        except httpx.HTTPError as exc:
            record.error = _http_error_text(exc)
        except Exception as exc:  # last resort: whatever a server sends fails this request, never the pass
            record.error = (f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__)[:_MAX_ERROR_CHARS]
        finally:
            record.done_s = time.perf_counter() - t0
        if record.error is None and not is_done and record.finish_s is None:
            # a clean end of the body is no proof the request finished: a proxy or a dying server cut it short
            record.error = f"stream ended before [DONE]/finish_reason after {len(record.chunk_times_s)} output chunks"
        elif record.error is None and not record.chunk_times_s and record.finish_s is None:
            record.error = "the stream ended without an output-bearing chunk (nothing to time)"
        return record

    async def _read_stream(self, response: httpx.Response, record: RequestRecord, st: float) -> bool:
        """Fill ``record`` from the event stream; True when it reached ``[DONE]``. With structured outputs the
        output text is kept too (``record.output_text``), to be checked after the pass."""
        parts: list[str] | None = [] if self.config.structured_outputs is not None else None
        try:
            return await self._read_events(response, record, st, parts)
        finally:
            if parts is not None:
                record.output_text = "".join(parts)

    async def _read_events(self, response: httpx.Response, record: RequestRecord, st: float,
                           parts: list[str] | None) -> bool:
        endpoint = self.config.endpoint
        seen_data = False
        async for line in response.aiter_lines():
            now = time.perf_counter()  # stamp before parsing: JSON decoding is not the server's time
            if not line.startswith("data:"):
                if not seen_data and line.lstrip().startswith("{"):  # JSON under another Content-Type
                    record.error = _json_not_stream(response.headers.get("content-type", "none"))
                    return False
                continue  # blank separators, ': keep-alive' comments, 'event:' lines
            seen_data = True
            data_str = line[5:].strip()
            if data_str == "[DONE]":
                return True
            try:
                data = json.loads(data_str)
            except (ValueError, RecursionError):  # RecursionError: JSON nested too deep for the parser
                record.error = f"malformed SSE data: {data_str[:100]!r}"
                return False
            if not isinstance(data, dict):
                continue
            if data.get("error") is not None:  # vLLM/SGLang report mid-stream failures this way; some servers send null
                err = data["error"]
                message = err.get("message", err) if isinstance(err, dict) else err
                record.error = f"error in stream: {str(message)[:_MAX_ERROR_CHARS]}"
                return False
            try:
                text = chunk_text(data, endpoint)
                finish_reason = chunk_finish_reason(data)
            except MalformedChunk as exc:
                record.error = f"malformed chunk ({exc}): {data_str[:100]!r}"
                return False
            if text is not None:
                record.chunk_times_s.append(now - st)
                if parts is not None and (content := _content(data, endpoint)):
                    parts.append(content)
            if finish_reason is not None and record.finish_s is None:
                record.finish_s, record.finish_reason = now - st, finish_reason
            usage = data.get("usage")
            if isinstance(usage, dict):
                if isinstance(usage.get("prompt_tokens"), int):
                    record.prompt_tokens = usage["prompt_tokens"]
                if isinstance(usage.get("completion_tokens"), int):
                    record.completion_tokens = usage["completion_tokens"]
        return False  # the body ended without [DONE]


def _content(data: dict[str, Any], endpoint: str) -> str | None:
    """The answer's own text in a chunk (``text``; chat: ``delta.content``, not reasoning). Call after
    :func:`chunk_text`, which has checked the fields' types."""
    choice = data["choices"][0]
    text = choice.get("text") if endpoint == "completions" else choice["delta"].get("content")
    return text if isinstance(text, str) else None


#: what an httpx error that carries no message of its own means (a reset connection raises ReadError(''))
_SILENT_ERRORS: dict[type[httpx.HTTPError], str] = {
    httpx.ReadError: "the connection broke while reading the response (the server reset or closed it)",
    httpx.WriteError: "the connection broke while sending the request (the server reset or closed it)",
    httpx.RemoteProtocolError: "the server broke the HTTP protocol (it closed the connection mid-response?)",
    httpx.NetworkError: "the connection failed",
}


def _http_error_text(exc: httpx.HTTPError) -> str:
    """'ReadError: <message>'; an error without a message ('ReadError: ' said nothing) gets what it means."""
    message = str(exc) or next((text for kind, text in _SILENT_ERRORS.items() if isinstance(exc, kind)), "no message")
    return f"{type(exc).__name__}: {message}"[:_MAX_ERROR_CHARS]


def _json_not_stream(content_type: str) -> str:
    # no body in the text: each body differs (ids, timestamps), and the failures table groups equal texts
    return (f"the server answered JSON, not an event stream (HTTP 200, Content-Type {content_type}): it ignored "
            "stream: true, and an answer that is not streamed has no token times to measure")
