"""The OpenAI-compatible HTTP API over an engine loop: routes and error handlers, each delegating to a serving
class (``serving_*.py``) that answers without HTTP.

Routes: GET /v1/models (and /v1/models/{id}) · POST /v1/completions · POST /v1/chat/completions (streaming by
SSE, with ``stream_options.include_usage``) · POST /tokenize · POST /detokenize (vLLM's) · GET /health · GET /ping ·
GET /metrics · GET /version. The engine runs on its own thread; each request gets an asyncio queue that the engine
thread feeds through the event loop's ``Mailbox`` (one ``call_soon_threadsafe`` per engine step, not per output;
a response that is not streamed gets only its finished output). Parsing, tokenization and chat templating run in
worker threads when their input is large, on the event loop when it is small (``serving_engine``). A client that
disconnects — streaming or not — aborts its request, which frees its KV blocks. A request that fails inside the
engine gets a 500 naming the error; the engine and every other request go on.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from fastapi.routing import APIRoute
from prometheus_client import CollectorRegistry, generate_latest
from starlette.datastructures import Headers
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

import accelkit
from accelkit.core.terminal import printable
from accelkit.serve.server.errors import APIError, error_response, http_error_response, request_validation_response
from accelkit.serve.server.middleware import HostCheck, ServerMiddleware
from accelkit.serve.server.protocol import (
    B,
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
)
from accelkit.serve.server.serving_chat import ServingChat
from accelkit.serve.server.serving_completion import ServingCompletion
from accelkit.serve.server.serving_engine import Disconnected
from accelkit.serve.server.serving_models import ServingModels
from accelkit.serve.server.serving_tokenization import ServingTokenization
from accelkit.serve.server.state import ServingState

log = logging.getLogger("accelkit.serve")

_BODIES = (CompletionRequest, ChatCompletionRequest, TokenizeRequest, DetokenizeRequest)


def _request_body(cls: type[Any]) -> dict[str, Any]:
    """The OpenAPI request body FastAPI writes for a typed body parameter. The routes take the raw request instead
    (its body parsed and validated by parse_body), so they declare it; ``_with_body_schemas`` adds the models."""
    return {"requestBody": {"required": True, "content": {
        "application/json": {"schema": {"$ref": f"#/components/schemas/{cls.__name__}"}}}}}


def _with_body_schemas(app: FastAPI) -> None:
    """/openapi.json with the request models (and the models inside them) under components.schemas."""
    generate = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            schemas = generate().setdefault("components", {}).setdefault("schemas", {})
            for cls in _BODIES:
                schema = cls.model_json_schema(ref_template="#/components/schemas/{model}")
                schemas.update(schema.pop("$defs", {}))
                schemas[cls.__name__] = schema
        return app.openapi_schema  # type: ignore[return-value]  # (set by generate())

    app.openapi = openapi  # type: ignore[method-assign]  # FastAPI's documented way to extend the schema


def _respond(result: dict[str, Any] | AsyncIterator[str] | None) -> Response:
    """A generation's answer over HTTP: its JSON, its SSE stream, or 499 when the client left before it was done."""
    if result is None:
        return Response(status_code=499)  # nobody is listening; the request was aborted
    if isinstance(result, dict):
        return JSONResponse(result)
    return StreamingResponse(result, media_type="text/event-stream")


def _disconnected(request: Request) -> Disconnected:
    """Returns when the client has gone. The body has been read, so the next ASGI message can only be
    ``http.disconnect`` — waiting for it costs nothing while the engine generates (no polling)."""
    async def wait() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass
    return wait


class _CORS(CORSMiddleware):
    """Starlette's CORS with a refused preflight answered as an OpenAI error object naming what was refused, not
    its plain-text "Disallowed CORS origin" (found by a hunt: every failure is an error object)."""

    def preflight_response(self, request_headers: Headers) -> Response:
        response = super().preflight_response(request_headers)
        if response.status_code != 400:
            return response
        failures = bytes(response.body).decode().removeprefix("Disallowed CORS ").split(", ")
        said = {"origin": f"origin {request_headers.get('origin', '')[:200]!r} is not one of --allowed-origins",
                "method": f"method {request_headers.get('access-control-request-method', '')[:50]!r} is not allowed",
                "headers": "a requested header is not allowed",
                "private-network": "private network access (Access-Control-Request-Private-Network) is not allowed"}
        headers = {k: v for k, v in response.headers.items() if k not in ("content-type", "content-length")}
        return error_response(400, "CORS preflight refused: " + "; ".join(said.get(f, f) for f in failures),
                              code="cors_refused", headers=headers)


def create_app(state: ServingState, *, registry: CollectorRegistry) -> FastAPI:
    """The FastAPI application for one engine loop: routes that parse a request and hand it to a serving class."""
    app = FastAPI(title="accelkit serve", version=accelkit.__version__)
    app.state.serving = state
    # checked once the listening address is known (run_server: HostCheck.listening_on)
    app.state.host_check = HostCheck(state.config.host_names, api_key=state.config.api_key is not None)
    app.add_middleware(ServerMiddleware, api_key=state.config.api_key, max_body_bytes=state.config.max_body_bytes,
                       is_shutting_down=lambda: not state.accepting, body_timeout_s=state.config.body_timeout_s,
                       log_requests=state.config.log_requests, host_check=app.state.host_check)
    if state.config.allowed_origins:  # added last = outermost: a preflight is answered before the API key check
        app.add_middleware(_CORS, allow_origins=list(state.config.allowed_origins), allow_methods=["*"],
                           allow_headers=["*"])
    serving_models = ServingModels(state.config.model_names, created=state.created,
                                   max_model_len=state.engine.max_model_len)
    serving_completion = ServingCompletion(state, serving_models)
    serving_chat = ServingChat(state, serving_models)
    serving_tokenization = ServingTokenization(state, serving_models)

    # ---- errors: every failure is an OpenAI error object ---------------------------------------------
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, param=exc.param, code=exc.code, error_type=exc.error_type,
                              headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return http_error_response(exc.status_code, request.method, request.url.path, exc.detail,
                                   headers=dict(exc.headers) if exc.headers else None)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        return request_validation_response(list(exc.errors()))

    @app.exception_handler(ClientDisconnect)
    async def _client_left(_: Request, __: ClientDisconnect) -> Response:  # left mid-body: nobody to answer, no bug
        return Response(status_code=499)

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:  # never a bare 500 page
        log.error("%s %s failed: %s: %s", request.method, printable(request.url.path, single_line=True),
                  type(exc).__name__, exc, exc_info=exc)
        return error_response(500, f"internal error: {type(exc).__name__}: {exc}", code="internal_error")

    # ---- plain routes -------------------------------------------------------------------------------
    @app.get("/health")
    async def health() -> Response:
        if state.loop.is_alive:
            return Response(status_code=200)
        return error_response(503, f"the engine is not running: {state.loop.dead_reason}; restart the server",
                              code="engine_dead")

    @app.get("/version")
    async def version() -> dict[str, str]:
        return {"version": accelkit.__version__}

    @app.get("/metrics")
    async def metrics() -> PlainTextResponse:
        state.bridge.on_scrape(state.loop.thread_id)
        return PlainTextResponse(generate_latest(registry).decode(), media_type="text/plain; version=0.0.4")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return serving_models.list()

    @app.get("/v1/models/{model_id:path}")  # :path — a served name may hold slashes (org/model)
    async def retrieve_model(model_id: str) -> dict[str, Any]:
        return serving_models.retrieve(model_id)

    @app.get("/ping")
    async def ping() -> Response:  # vLLM's (and SageMaker's) liveness route, GET or POST: /health's answer
        return await health()

    app.post("/ping", operation_id="ping_post")(ping)

    # ---- serving routes: parse, then the serving class answers ----------------------------------------
    async def accept(request: Request, cls: type[B]) -> B:  # (any serving class parses any body)
        return await serving_completion.accept(cls, await request.body(), request.headers.get("content-type"),
                                               route=request.url.path)

    @app.post("/v1/completions", openapi_extra=_request_body(CompletionRequest))
    async def completions(request: Request) -> Response:
        body = await accept(request, CompletionRequest)
        return _respond(await serving_completion.create_completion(body, disconnected=_disconnected(request)))

    @app.post("/v1/chat/completions", openapi_extra=_request_body(ChatCompletionRequest))
    async def chat(request: Request) -> Response:
        body = await accept(request, ChatCompletionRequest)
        return _respond(await serving_chat.create_chat_completion(body, disconnected=_disconnected(request)))

    @app.post("/tokenize", openapi_extra=_request_body(TokenizeRequest))
    async def tokenize(request: Request) -> dict[str, Any]:
        """vLLM's /tokenize: a text prompt, or messages through the chat template, to token ids."""
        return await serving_tokenization.tokenize(await accept(request, TokenizeRequest))

    @app.post("/detokenize", openapi_extra=_request_body(DetokenizeRequest))
    async def detokenize(request: Request) -> dict[str, Any]:
        """vLLM's /detokenize: token ids to text (special tokens included, as tokenizer.decode gives them)."""
        return await serving_tokenization.detokenize(await accept(request, DetokenizeRequest))

    # HEAD wherever GET is answered (RFC 9110: a server that has GET has HEAD): `curl -I /health` and uptime
    # monitors that probe with HEAD got 405 (found by a hunt). uvicorn sends the GET answer's head without its body;
    # out of /openapi.json, where each would repeat its GET operation's id.
    for route in list(app.routes):
        if isinstance(route, APIRoute) and "GET" in (route.methods or ()):
            app.add_api_route(route.path, route.endpoint, methods=["HEAD"], include_in_schema=False,
                              name=f"{route.name}_head")
    _with_body_schemas(app)
    return app
