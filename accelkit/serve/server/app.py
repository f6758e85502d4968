"""The OpenAI-compatible HTTP API over an engine loop.

Routes: GET /v1/models · POST /v1/completions · POST /v1/chat/completions (streaming by SSE, with
``stream_options.include_usage``) · GET /health · GET /metrics · GET /version. The engine runs on its own
thread; each request gets an asyncio queue that the engine thread feeds with
``call_soon_threadsafe``. A client that disconnects aborts its request, which frees its KV blocks.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, generate_latest

import accelkit
from accelkit.serve.outputs import RequestOutput
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.server.errors import APIError, error_response
from accelkit.serve.server.protocol import ChatCompletionRequest, CompletionRequest
from accelkit.serve.server.state import ServingState

_DONE = object()


def _usage(outs: list[RequestOutput]) -> dict[str, int]:
    prompt = sum(len(o.prompt_token_ids) for o in outs)
    completion = sum(len(o.token_ids) for o in outs)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _sse(data: Any) -> str:
    return f"data: {json.dumps(data, separators=(',', ':'))}\n\n"


def create_app(state: ServingState, *, registry: CollectorRegistry) -> FastAPI:
    """The FastAPI application for one engine loop."""
    app = FastAPI(title="accelkit serve", version=accelkit.__version__)
    app.state.serving = state
    name = state.config.served_model_name

    # ---- errors: every failure is an OpenAI error object ---------------------------------------------
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, param=exc.param, code=exc.code)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {}
        loc = [str(x) for x in err.get("loc", ()) if x != "body"]
        if err.get("type") == "json_invalid":
            return error_response(400, f"the request body is not valid JSON: {err.get('msg')}", code="invalid_json")
        # loc is (field, union-member tag, index …): the field is the param, the full path goes in the message
        path = ".".join(loc) or "body"
        return error_response(400, f"{path}: {err.get('msg', 'invalid value')}", param=loc[0] if loc else None,
                              code="invalid_value")

    @app.exception_handler(Exception)
    async def _internal(_: Request, exc: Exception) -> JSONResponse:  # never a bare 500 page
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error")

    @app.middleware("http")
    async def _request_id_and_auth(request: Request, call_next: Any) -> Response:
        key = state.config.api_key
        protected = bool(key) and request.url.path.startswith("/v1/")
        if protected and request.headers.get("authorization", "") != f"Bearer {key}":
            response: Response = error_response(401, "missing or wrong API key: send 'Authorization: Bearer <key>'",
                                                 code="invalid_api_key")
            _echo_id(request, response)
            return response
        response = await call_next(request)
        _echo_id(request, response)
        return response

    # ---- plain routes -------------------------------------------------------------------------------
    @app.get("/health")
    async def health() -> Response:
        if state.loop.is_alive:
            return Response(status_code=200)
        return error_response(503, f"engine loop is not running: {state.loop.error!r}", code="engine_dead")

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": accelkit.__version__}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        return PlainTextResponse(generate_latest(registry).decode(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{
            "id": name, "object": "model", "created": state.created, "owned_by": "accelkit",
            "root": state.engine.config.model, "max_model_len": state.engine.max_model_len,
        }]}

    # ---- generation ---------------------------------------------------------------------------------
    def check_model(body: Any) -> None:
        if body.model != name:
            raise APIError(400, f"model {body.model!r} is not served here; this server serves {name!r} (GET /v1/models)",
                           param="model", code="model_not_found")

    @app.post("/v1/completions")
    async def completions(body: CompletionRequest, request: Request) -> Response:
        check_model(body)
        prompts = body.prompts()
        if not prompts or any(p == "" or p == [] for p in prompts):
            raise APIError(400, "prompt is empty; give at least one token", param="prompt")
        limit = body.max_tokens if body.max_tokens is not None else 16  # OpenAI's default for completions
        return await _generate(request, body, prompts, limit, chat=False)

    @app.post("/v1/chat/completions")
    async def chat(body: ChatCompletionRequest, request: Request) -> Response:
        check_model(body)
        messages = [{"role": m.role, "content": m.text()} for m in body.messages]
        try:
            prompt = state.engine.tokenizer.apply_chat_template(
                messages, add_generation_prompt=True, tokenize=False, chat_template=state.config.chat_template,
            )
        except Exception as exc:  # no template, or the template rejects these messages
            raise APIError(400, f"cannot apply the chat template: {exc}", param="messages") from exc
        return await _generate(request, body, [prompt], body.token_limit, chat=True)

    async def _generate(request: Request, body: Any, prompts: list[Any], limit: int | None, *, chat: bool) -> Response:
        unsupported = body.unsupported()
        if unsupported:
            raise APIError(400, unsupported[1], param=unsupported[0], code="unsupported")
        if not state.accepting:
            raise APIError(503, "the server is shutting down", code="shutting_down")
        seqs = []
        for p in prompts:  # validate every prompt before queueing any
            try:
                ids = state.engine.make_request(p, SamplingParams(max_tokens=1)).token_ids
            except ValueError as exc:
                raise APIError(400, str(exc), param="messages" if chat else "prompt") from exc
            room = state.engine.max_model_len - len(ids)
            max_tokens = limit if limit is not None else room
            if max_tokens < 1:
                raise APIError(400, f"max_tokens={max_tokens} must be at least 1", param="max_tokens")
            if max_tokens > room:
                raise APIError(400, f"max_tokens={max_tokens} plus the prompt's {len(ids)} tokens exceed the context "
                               f"(max_model_len={state.engine.max_model_len}); ask for at most {room}",
                               param="max_tokens")
            try:
                params = SamplingParams(
                    temperature=float(body.temperature), top_p=float(body.top_p), top_k=body.top_k,
                    max_tokens=max_tokens, stop=body.stop_list(), seed=body.seed, ignore_eos=body.ignore_eos,
                )
            except ValueError as exc:
                field = str(exc).split("=")[0].split()[0]
                raise APIError(400, str(exc), param=field) from exc
            seqs.append((ids, params))
        if not state.admission.try_enter(len(seqs)):
            raise APIError(429, f"the waiting queue is full ({state.config.max_queue} waiting beyond "
                           f"{state.engine.config.max_num_seqs} running); retry later", code="queue_full")
        base_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        aloop = asyncio.get_running_loop()
        queue: asyncio.Queue[Any] = asyncio.Queue()
        request_ids = [f"{base_id}-{i}" for i in range(len(seqs))]
        finished: set[str] = set()

        def sink(index: int):  # type: ignore[no-untyped-def]
            def deliver(item: RequestOutput | BaseException) -> None:
                if isinstance(item, RequestOutput):
                    state.bridge.on_output(item)
                aloop.call_soon_threadsafe(queue.put_nowait, (index, item))
            return deliver

        try:
            for i, (ids, params) in enumerate(seqs):
                state.loop.add_request(ids, params, request_id=request_ids[i], callback=sink(i))
        except (ValueError, RuntimeError) as exc:
            for rid in request_ids:
                state.loop.abort_request(rid)
            state.admission.leave(len(seqs))
            raise APIError(503 if isinstance(exc, RuntimeError) else 400, str(exc)) from exc

        async def outputs() -> AsyncIterator[tuple[int, RequestOutput]]:
            while len(finished) < len(seqs):
                index, item = await queue.get()
                if isinstance(item, BaseException):
                    raise APIError(500, f"engine failed: {item}", code="engine_error")
                if item.finished:
                    finished.add(item.request_id)
                yield index, item

        def cleanup() -> None:
            for rid in request_ids:
                if rid not in finished:
                    state.loop.abort_request(rid)  # disconnected or failed: free the KV blocks now
            state.admission.leave(len(seqs))

        created = int(time.time())
        if body.stream:
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            return StreamingResponse(
                _stream(outputs(), cleanup, base_id, created, chat=chat, include_usage=include_usage),
                media_type="text/event-stream",
            )
        try:
            last: dict[int, RequestOutput] = {}
            waiter = asyncio.ensure_future(_collect(outputs(), last))
            while not waiter.done():
                done, _ = await asyncio.wait({waiter}, timeout=0.25)
                if not done and await request.is_disconnected():
                    waiter.cancel()
                    return Response(status_code=499)
            waiter.result()
        finally:
            cleanup()
        outs = [last[i] for i in range(len(seqs))]
        if chat:
            choices = [{"index": i, "message": {"role": "assistant", "content": o.text}, "logprobs": None,
                        "finish_reason": o.finish_reason} for i, o in enumerate(outs)]
            return JSONResponse({"id": base_id, "object": "chat.completion", "created": created, "model": name,
                                 "choices": choices, "usage": _usage(outs)})
        choices = [{"index": i, "text": o.text, "logprobs": None, "finish_reason": o.finish_reason}
                   for i, o in enumerate(outs)]
        return JSONResponse({"id": base_id, "object": "text_completion", "created": created, "model": name,
                             "choices": choices, "usage": _usage(outs)})

    async def _stream(outputs: AsyncIterator[tuple[int, RequestOutput]], cleanup: Any, base_id: str, created: int, *,
                      chat: bool, include_usage: bool) -> AsyncIterator[str]:
        obj = "chat.completion.chunk" if chat else "text_completion"
        last: dict[int, RequestOutput] = {}

        def chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> str:
            data: dict[str, Any] = {"id": base_id, "object": obj, "created": created, "model": name, "choices": choices}
            if include_usage:
                data["usage"] = usage
            return _sse(data)

        try:
            if chat:
                yield chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                              "finish_reason": None}])
            async for index, out in outputs:
                last[index] = out
                if not out.new_text and not out.finished:
                    continue
                if chat:
                    choice = {"index": index, "delta": {"content": out.new_text} if out.new_text else {},
                              "logprobs": None, "finish_reason": out.finish_reason if out.finished else None}
                else:
                    choice = {"index": index, "text": out.new_text, "logprobs": None,
                              "finish_reason": out.finish_reason if out.finished else None}
                yield chunk([choice])
            if include_usage:
                yield chunk([], _usage([last[i] for i in sorted(last)]))
            yield "data: [DONE]\n\n"
        except APIError as exc:
            yield _sse({"error": {"message": exc.message, "type": "internal_error", "param": None, "code": exc.code}})
        finally:
            cleanup()

    return app


async def _collect(outputs: AsyncIterator[tuple[int, RequestOutput]], last: dict[int, RequestOutput]) -> None:
    async for index, out in outputs:
        last[index] = out


def _echo_id(request: Request, response: Response) -> None:
    rid = request.headers.get("x-request-id")
    if rid is not None:
        response.headers["x-request-id"] = rid

