"""The OpenAI-compatible HTTP API over an engine loop.

Routes: GET /v1/models (and /v1/models/{id}) · POST /v1/completions · POST /v1/chat/completions (streaming by
SSE, with ``stream_options.include_usage``) · POST /tokenize · POST /detokenize (vLLM's) · GET /health · GET /ping ·
GET /metrics · GET /version. The engine runs on its own thread; each request gets an asyncio queue that the engine
thread feeds through the event loop's ``Mailbox`` (one ``call_soon_threadsafe`` per engine step, not per output).
Tokenization and chat templating run in worker threads, never on the event loop. A client that disconnects
— streaming or not — aborts its request, which frees its KV blocks. A request that fails inside the engine
gets a 500 naming the error; the engine and every other request go on.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import CollectorRegistry, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

import accelkit
from accelkit.core import strict_json
from accelkit.serve.outputs import RequestOutput
from accelkit.serve.sampling import MAX_LOGPROBS, SEED_MAX, SEED_MIN, SamplingParams, StructuredOutputs
from accelkit.serve.server.errors import APIError, error_response, validation_message
from accelkit.serve.server.logprobs import LogprobFormatter, TextOffsets
from accelkit.serve.server.middleware import ServerMiddleware
from accelkit.serve.server.prompts import (
    ContextLengthExceeded,
    chat_template_arguments,
    output_budget,
    prompt_token_ids,
    render_chat_template,
)
from accelkit.serve.server.protocol import (
    B,
    ChatCompletionRequest,
    ChatMessage,
    CompletionRequest,
    DetokenizeRequest,
    TokenizeRequest,
    parse_body,
)
from accelkit.serve.server.state import ServingState
from accelkit.serve.server.tools import ToolCallDeltas, ToolCalling

log = logging.getLogger("accelkit.serve")

_HTTP_CODES = {404: "not_found", 405: "method_not_allowed", 408: "request_timeout", 413: "request_too_large"}
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's (and vLLM's) default for /v1/completions
RETRY_AFTER_S = 1  # the Retry-After of a 429: a queue slot frees as soon as one request finishes
MAX_IGNORED_NAMED = 20  # unknown fields named in one log line


def _usage(outs: dict[int, RequestOutput], n: int, *, generated: bool = True) -> dict[str, int]:
    """Usage of the choices ``outs`` (by choice index): each prompt counted once whatever its number of choices
    ``n``, as vLLM counts it; every choice's tokens (none when ``generated`` is false: echo with max_tokens=0 returns
    none of the token the engine sampled)."""
    prompts = {index // n: o for index, o in outs.items()}
    prompt = sum(len(o.prompt_token_ids) for o in prompts.values())
    completion = sum(len(o.token_ids) for o in outs.values()) if generated else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _joined(first: dict[str, list[Any]], second: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Two completions logprobs objects (prompt, then generated tokens) as one."""
    return {key: first[key] + second[key] for key in first}


def _derived_seed(seed: int | None, choice: int) -> int | None:
    """Choice ``choice``'s seed: distinct per choice (so n choices differ), fixed by the request's seed (so the
    request is reproducible) — vLLM's ``seed + index``, wrapped into the range a generator takes."""
    if seed is None or choice == 0:
        return seed
    return (seed + choice - SEED_MIN) % (SEED_MAX - SEED_MIN + 1) + SEED_MIN


def _chat_message(out: RequestOutput, tools: ToolCalling | None) -> dict[str, Any]:
    """A chat choice's message and finish_reason: the output's text, or the tool calls it makes."""
    if tools is not None and (calls := tools.calls(out.text)) is not None:
        return {"message": {"role": "assistant", "content": None, "tool_calls": calls},
                "finish_reason": tools.finish_reason(out.finish_reason, called=True)}
    return {"message": {"role": "assistant", "content": out.text}, "finish_reason": out.finish_reason}


def _sse(data: Any) -> str:
    return f"data: {strict_json.dumps(data, separators=(',', ':'))}\n\n"  # never a bare NaN in an event


def _leading_field(exc: ValueError) -> str:
    """The field a validation message starts with: 'top_k=0 is …', 'logit_bias[5]=…', 'prompt is empty …'."""
    return str(exc).split("=")[0].split("[")[0].split()[0]


def _number(name: str, value: int | float) -> float:
    """A JSON number as a float; an integer too large for one is the client's mistake, not a 500."""
    try:
        number = float(value)
    except OverflowError:
        raise APIError(400, f"{name}={value} is too large; expected a finite number", param=name) from None
    if not math.isfinite(number):
        raise APIError(400, f"{name}={value!r} is not finite; expected a finite number", param=name)
    return number


_BODIES = (CompletionRequest, ChatCompletionRequest, TokenizeRequest, DetokenizeRequest)


def _request_body(cls: type[Any]) -> dict[str, Any]:
    """The OpenAPI request body FastAPI writes for a typed body parameter. The routes take the raw request instead
    (its body parsed and validated in a worker thread), so they declare it; ``_with_body_schemas`` adds the models."""
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


def create_app(state: ServingState, *, registry: CollectorRegistry) -> FastAPI:
    """The FastAPI application for one engine loop."""
    app = FastAPI(title="accelkit serve", version=accelkit.__version__)
    app.state.serving = state
    names = state.config.model_names
    name = names[0]  # what every response reports, whichever alias the request used (as vLLM)
    app.add_middleware(ServerMiddleware, api_key=state.config.api_key, max_body_bytes=state.config.max_body_bytes,
                       is_shutting_down=lambda: not state.accepting, body_timeout_s=state.config.body_timeout_s)
    if state.config.allowed_origins:  # added last = outermost: a preflight is answered before the API key check
        app.add_middleware(CORSMiddleware, allow_origins=list(state.config.allowed_origins), allow_methods=["*"],
                           allow_headers=["*"])
    template_args = chat_template_arguments(state.engine.tokenizer)
    logprobs_format = LogprobFormatter(state.engine.tokenizer)

    # ---- errors: every failure is an OpenAI error object ---------------------------------------------
    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError) -> JSONResponse:
        return error_response(exc.status, exc.message, param=exc.param, code=exc.code, error_type=exc.error_type,
                              headers=exc.headers)

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        message = {404: f"no route {request.url.path}; see GET /v1/models and the POST /v1/* routes",
                   405: f"{request.method} is not allowed on {request.url.path}"}.get(exc.status_code, str(exc.detail))
        return error_response(exc.status_code, message, code=_HTTP_CODES.get(exc.status_code),
                              headers=dict(exc.headers) if exc.headers else None)

    @app.exception_handler(RequestValidationError)
    async def _validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors()) or [{}]
        err = errors[0]
        loc = [x for x in err.get("loc", ()) if x != "body"]
        if err.get("type") == "json_invalid":
            return error_response(400, f"the request body is not valid JSON: {err.get('msg')}", code="invalid_json")
        if not loc and err.get("type") in ("model_attributes_type", "dict_type"):
            return error_response(400, "the request body must be a JSON object, sent with 'Content-Type: application/json'",
                                  code="invalid_json")
        message, param = validation_message(errors)  # the field is the param, the full path goes in the message
        return error_response(400, message, param=param, code="invalid_value")

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:  # never a bare 500 page
        log.error("%s %s failed: %s: %s", request.method, request.url.path, type(exc).__name__, exc, exc_info=exc)
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
        return PlainTextResponse(generate_latest(registry).decode(), media_type="text/plain; version=0.0.4")

    def model_card(model_id: str) -> dict[str, Any]:
        # root is the first served name, not the weights' path as in vLLM: the path is the host's business
        return {"id": model_id, "object": "model", "created": state.created, "owned_by": "accelkit", "root": name,
                "parent": None, "max_model_len": state.engine.max_model_len}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [model_card(n) for n in names]}

    @app.get("/v1/models/{model_id:path}")  # :path — a served name may hold slashes (org/model)
    async def retrieve_model(model_id: str) -> dict[str, Any]:
        check_model(model_id)
        return model_card(model_id)

    @app.get("/ping")
    async def ping() -> Response:  # vLLM's (and SageMaker's) liveness route, GET or POST: /health's answer
        return await health()

    app.post("/ping", operation_id="ping_post")(ping)

    # ---- generation ---------------------------------------------------------------------------------
    def check_model(model_id: str | None) -> None:
        if model_id is not None and model_id not in names:
            served = ", ".join(repr(n) for n in names)
            raise APIError(404, f"The model `{model_id}` does not exist on this server; it serves {served} "
                           "(GET /v1/models)", param="model", code="model_not_found", error_type="invalid_request_error")

    async def accept(request: Request, cls: type[B]) -> B:
        """The request's body parsed and validated in a worker thread (``parse_body``), then the checks every body
        gets first: a served model, the unknown fields logged, nothing asked for that the engine does not do."""
        route = request.url.path
        body, ignored = await asyncio.to_thread(parse_body, cls, await request.body(),
                                                request.headers.get("content-type"),
                                                max_model_len=state.engine.max_model_len)
        check_model(body.model)
        unsupported = body.unsupported()
        if unsupported:
            raise APIError(400, unsupported[1], param=unsupported[0], code="unsupported")
        if ignored:
            more = f" and {len(ignored) - MAX_IGNORED_NAMED} more" if len(ignored) > MAX_IGNORED_NAMED else ""
            log.warning("POST %s: ignoring unknown field(s) %s%s, as vLLM does", route,
                        ", ".join(ignored[:MAX_IGNORED_NAMED]), more)
        return body

    async def render_chat(messages: list[ChatMessage], *, add_generation_prompt: bool, continue_final_message: bool,
                          chat_template_kwargs: dict[str, Any] | None, tools: list[Any] | None = None) -> str:
        """The chat template rendered to text, in a worker thread (the messages turned into dicts there too)."""
        def render() -> str:
            return render_chat_template(
                state.engine.tokenizer, [m.for_template() for m in messages],
                chat_template=state.config.chat_template, add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message, variables=chat_template_kwargs or {},
                reserved=template_args, tools=tools,
            )

        return await asyncio.to_thread(render)

    @app.post("/v1/completions", openapi_extra=_request_body(CompletionRequest))
    async def completions(request: Request) -> Response:
        body = await accept(request, CompletionRequest)
        prompts = await asyncio.to_thread(body.prompts)  # a copy of every token id: not on the event loop
        if not prompts or any(p == "" or p == [] for p in prompts):
            raise APIError(400, "prompt is empty; give at least one token", param="prompt")
        if body.max_tokens == 0 and not body.echo:
            raise APIError(400, "max_tokens=0 returns nothing without echo; send max_tokens of at least 1, or echo=true "
                           "(with logprobs, to score the prompt)", param="max_tokens")
        return await _generate(request, body, prompts, body.max_tokens, "max_tokens", chat=False,
                               default_limit=COMPLETIONS_DEFAULT_MAX_TOKENS)

    @app.post("/v1/chat/completions", openapi_extra=_request_body(ChatCompletionRequest))
    async def chat(request: Request) -> Response:
        body = await accept(request, ChatCompletionRequest)
        tools = body.tool_calling  # (its 400s before the template sees the tools)
        prompt = await render_chat(body.messages, add_generation_prompt=body.add_generation_prompt,
                                   continue_final_message=body.continue_final_message,
                                   chat_template_kwargs=body.chat_template_kwargs, tools=body.tools or None)
        return await _generate(request, body, [prompt], body.token_limit, body.token_limit_field, chat=True,
                               default_limit=None, tools=tools)

    @app.post("/tokenize", openapi_extra=_request_body(TokenizeRequest))
    async def tokenize(request: Request) -> dict[str, Any]:
        """vLLM's /tokenize: a text prompt, or messages through the chat template, to token ids."""
        body = await accept(request, TokenizeRequest)
        if (body.prompt is None) == (body.messages is None):
            raise APIError(400, "give exactly one of prompt (text) or messages (a chat)", param="prompt")
        if body.tools and body.messages is None:
            raise APIError(400, "tools are rendered by the chat template: send them with messages, not a prompt",
                           param="tools")
        if body.messages is not None:
            text = await render_chat(body.messages, add_generation_prompt=body.add_generation_prompt,
                                     continue_final_message=body.continue_final_message,
                                     chat_template_kwargs=body.chat_template_kwargs, tools=body.tools or None)
            special = bool(body.add_special_tokens)  # a rendered template holds its BOS already
        else:
            text = body.prompt or ""
            special = body.add_special_tokens is not False
        tokenizer = state.engine.tokenizer
        if tokenizer is None:
            raise APIError(400, "this model has no tokenizer", param="prompt")
        try:
            ids = await asyncio.to_thread(state.engine.encode, text, add_special_tokens=special)
        except ValueError as exc:
            raise APIError(400, str(exc), param="prompt") from exc
        strs = await asyncio.to_thread(tokenizer.convert_ids_to_tokens, ids) if body.return_token_strs else None
        return {"count": len(ids), "max_model_len": state.engine.max_model_len, "tokens": ids, "token_strs": strs}

    @app.post("/detokenize", openapi_extra=_request_body(DetokenizeRequest))
    async def detokenize(request: Request) -> dict[str, Any]:
        """vLLM's /detokenize: token ids to text (special tokens included, as tokenizer.decode gives them)."""
        body = await accept(request, DetokenizeRequest)
        tokenizer, vocab = state.engine.tokenizer, state.engine.model_args.vocab_size
        if tokenizer is None:
            raise APIError(400, "this model has no tokenizer", param="tokens")
        for i, t in enumerate(body.tokens):
            if not 0 <= t < vocab:
                raise APIError(400, f"tokens[{i}]={t} is not a token id; expected an int in [0, {vocab})",
                               param="tokens")
        return {"prompt": str(await asyncio.to_thread(tokenizer.decode, body.tokens))}

    def check_choices(body: Any, num_prompts: int) -> None:
        """n, best_of and the logprobs fields: in range, and what they ask for fits the server."""
        if body.n < 1:
            raise APIError(400, f"n={body.n} must be at least 1", param="n")
        best_of = getattr(body, "best_of", None)
        if best_of is not None:
            if best_of < body.n:
                raise APIError(400, f"best_of={best_of} must be at least n={body.n}", param="best_of")
            if body.stream and best_of > body.n:
                raise APIError(400, "best_of > n cannot be streamed (the best choices are known only at the end); "
                               "send stream false or best_of equal to n", param="best_of")
        logprobs_field = "top_logprobs" if hasattr(body, "top_logprobs") else "logprobs"
        k = body.top_logprobs if logprobs_field == "top_logprobs" else body.logprobs
        if k is not None and not 0 <= k <= MAX_LOGPROBS:
            raise APIError(400, f"{logprobs_field}={k} is out of range; expected 0 to {MAX_LOGPROBS}",
                           param=logprobs_field)
        if logprobs_field == "top_logprobs" and k is not None and not body.logprobs:
            raise APIError(400, "top_logprobs needs logprobs true", param="top_logprobs")
        k = body.prompt_logprobs
        if k is not None and not 0 <= k <= MAX_LOGPROBS:  # vLLM's -1 (the whole vocabulary) too
            raise APIError(400, f"prompt_logprobs={k} is out of range; expected 0 to {MAX_LOGPROBS} (the most likely "
                           "tokens listed beside each prompt token)", param="prompt_logprobs")
        if k is not None and body.stream:  # vLLM's rule: its stream chunks have no field for them
            raise APIError(400, "prompt_logprobs is not available with stream true (as in vLLM); send stream false, "
                           "or omit prompt_logprobs", param="prompt_logprobs")
        if body.logit_bias:
            vocab = state.engine.model_args.vocab_size
            seen: dict[int, str] = {}
            for key in body.logit_bias:
                # ASCII digits only: int() also takes '5_0', ' 5', '+5' and other scripts' digits
                if not (key.isascii() and key.isdigit() and int(key) < vocab):
                    raise APIError(400, f"logit_bias key {key[:40]!r} is not a token id; keys are token ids in "
                                   f"[0, {vocab}) as strings, e.g. {{\"5\": -100}}", param="logit_bias")
                if int(key) in seen:  # '5' and '05': one token, two biases
                    raise APIError(400, f"logit_bias keys {seen[int(key)]!r} and {key!r} are the same token; give "
                                   "each token once", param="logit_bias")
                seen[int(key)] = key
        if body.allowed_token_ids is not None:
            vocab = state.engine.model_args.vocab_size
            if not body.allowed_token_ids:
                raise APIError(400, "allowed_token_ids is empty; give at least one token id, or omit it to allow any",
                               param="allowed_token_ids")
            for i, t in enumerate(body.allowed_token_ids):
                if not 0 <= t < vocab:
                    raise APIError(400, f"allowed_token_ids[{i}]={t} is not a token id; expected ids in [0, {vocab})",
                                   param="allowed_token_ids")
        k = body.truncate_prompt_tokens
        if k is not None and k < 1:  # vLLM's -1 ("keep max_model_len tokens") too: a prompt too long has its own 400
            raise APIError(400, f"truncate_prompt_tokens={k} is out of range; expected k >= 1 (the last k prompt "
                           "tokens run), or null for the whole prompt", param="truncate_prompt_tokens")
        total = num_prompts * body.num_generated
        if total > state.admission.capacity:  # each choice is an engine request
            if body.num_generated == 1:
                raise APIError(400, f"prompt holds {num_prompts} prompts; this server runs at most "
                               f"{state.admission.capacity} at once", param="prompt")
            raise APIError(400, f"the request asks for {total} completions ({num_prompts} prompt(s) × "
                           f"{'best_of' if best_of else 'n'}={body.num_generated}); this server runs at most "
                           f"{state.admission.capacity} at once", param="best_of" if best_of else "n")

    def sampling_params(body: Any, max_tokens: int, choice: int, logprobs: int | None,
                        prompt_logprobs: int | None, structured: StructuredOutputs | None) -> SamplingParams:
        temperature, top_p = _number("temperature", body.temperature), _number("top_p", body.top_p)
        try:
            return SamplingParams(
                temperature=temperature, top_p=top_p, top_k=body.top_k_limit, max_tokens=max_tokens,
                stop=body.stop_list(), stop_token_ids=tuple(body.stop_token_ids or ()),
                seed=_derived_seed(body.seed, choice), ignore_eos=body.ignore_eos,
                presence_penalty=_number("presence_penalty", body.presence_penalty),
                frequency_penalty=_number("frequency_penalty", body.frequency_penalty),
                repetition_penalty=_number("repetition_penalty", body.repetition_penalty),
                min_p=_number("min_p", body.min_p), min_tokens=body.min_tokens,
                logit_bias={int(k): _number("logit_bias", v) for k, v in body.logit_bias.items()}
                if body.logit_bias else None,
                logprobs=logprobs, prompt_logprobs=prompt_logprobs,
                allowed_token_ids=None if body.allowed_token_ids is None else tuple(body.allowed_token_ids),
                include_stop_str_in_output=body.include_stop_str_in_output,
                truncate_prompt_tokens=body.truncate_prompt_tokens, structured_outputs=structured,
            )
        except ValueError as exc:
            field = _leading_field(exc)
            if field == "logprobs" and hasattr(body, "top_logprobs"):
                field = "top_logprobs"
            hint = "; 0 or -1 means no limit" if field == "top_k" else ""
            raise APIError(400, f"{exc}{hint}", param=field) from exc

    def echo_text(token_ids: list[int]) -> str:
        """A prompt of token ids as completions' echo gives it: ``tokenizer.decode`` (special tokens included)."""
        tokenizer = state.engine.tokenizer
        return str(tokenizer.decode(token_ids)) if tokenizer is not None else ""

    async def _generate(request: Request, body: Any, prompts: list[Any], limit: int | None, limit_field: str, *,
                        chat: bool, default_limit: int | None, tools: ToolCalling | None = None) -> Response:
        if body.priority != 0 and state.engine.config.scheduling_policy != "priority":  # vLLM refuses it too
            raise APIError(400, f"priority={body.priority} needs the server started with --scheduling-policy priority",
                           param="priority", code="unsupported")
        if not state.accepting:
            raise APIError(503, "the server is shutting down", code="shutting_down")
        if not state.loop.is_alive:
            raise APIError(503, f"the engine is not running: {state.loop.dead_reason}", code="engine_dead")
        check_choices(body, len(prompts))
        n, per_prompt = body.n, body.num_generated
        user_logprobs = body.num_logprobs
        # best_of ranks by cumulative logprob: the engine computes them even when the client did not ask
        logprobs = user_logprobs if user_logprobs is not None or per_prompt == n else 0
        echo = not chat and body.echo
        # completions' echo with logprobs carries the prompt tokens' logprobs first (what scores a text: lm-eval's
        # loglikelihood); max_tokens=0 with echo returns the prompt alone (the engine still samples one token)
        echo_only = echo and limit == 0
        echo_logprobs = user_logprobs if echo else None
        # the engine's prompt logprobs serve the echo and vLLM's prompt_logprobs field: k is the larger of the two,
        # each cut to its own k when formatted
        prompt_logprobs = max((k for k in (echo_logprobs, body.prompt_logprobs) if k is not None), default=None)
        if echo_only:
            if body.min_tokens:
                raise APIError(400, f"min_tokens={body.min_tokens} with max_tokens=0 asks for tokens that are not "
                               "returned; leave min_tokens out, or send max_tokens of at least min_tokens",
                               param="min_tokens")
            limit = 1
        structured = body.structured()
        if structured is not None:  # compiled here, off the event loop (a schema can take a while); cached after
            try:
                await asyncio.to_thread(state.engine.structured_guide, structured[1])
            except ValueError as exc:
                raise APIError(400, body.structured_message(structured[0], str(exc)), param=structured[0]) from exc
        spec = structured[1] if structured is not None else None
        param = "messages" if chat else "prompt"
        seqs = []
        prompt_ids = []
        for i, p in enumerate(prompts):  # validate every prompt before queueing any
            try:
                ids, truncated = await asyncio.to_thread(prompt_token_ids, state.engine, p,
                                                         add_special_tokens=body.add_special_tokens,
                                                         truncate_prompt_tokens=body.truncate_prompt_tokens)
            except ContextLengthExceeded as exc:
                raise APIError(400, str(exc), param=param, code="context_length_exceeded") from exc
            except ValueError as exc:
                raise APIError(400, str(exc), param=param) from exc
            max_tokens = output_budget(max_model_len=state.engine.max_model_len, num_prompt_tokens=len(ids),
                                       requested=limit, field=limit_field, default=default_limit)
            # one engine request per choice: the prefix cache shares the prompt's KV blocks between them. Prompt
            # logprobs (which skip that cache) in each choice's request with echo's, else in the prompt's first only:
            # the prompt_logprobs field is the prompt's, whichever choices it has
            seqs += [(ids, sampling_params(body, max_tokens, j, logprobs,
                                           prompt_logprobs if j == 0 or echo_logprobs is not None else None, spec))
                     for j in range(per_prompt)]
            prompt_ids.append(ids)
            if truncated:  # echo returns the text of what ran: the kept ids, decoded
                prompts[i] = ids
        # completions' echo: each prompt's text before its choices' (a prompt of token ids decoded, as vLLM does; a
        # truncated one too, from the ids that ran), with logprobs where each of its tokens starts in that text
        echoes = [p if isinstance(p, str) else await asyncio.to_thread(echo_text, p)
                  for p in prompts] if echo else None
        echo_offsets = [await asyncio.to_thread(logprobs_format.prompt_offsets, p, ids,
                                                add_special_tokens=body.add_special_tokens)
                        for p, ids in zip(prompts, prompt_ids, strict=True)] if echo_logprobs is not None \
            else None
        if not state.admission.try_enter(len(seqs)):
            raise APIError(429, f"the waiting queue is full ({state.config.max_queue} waiting beyond "
                           f"{state.engine.config.max_num_seqs} running); retry in {RETRY_AFTER_S} s",
                           code="queue_full", headers={"Retry-After": str(RETRY_AFTER_S)})
        base_id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        mailbox = state.mailbox(asyncio.get_running_loop())
        queue: asyncio.Queue[Any] = asyncio.Queue()
        request_ids = [f"{base_id}-{i}" for i in range(len(seqs))]
        finished: set[str] = set()

        def sink(index: int):  # type: ignore[no-untyped-def]
            def deliver(item: RequestOutput | BaseException) -> None:  # on the engine thread
                if isinstance(item, RequestOutput):
                    try:
                        state.bridge.on_output(item)
                    except Exception as exc:  # metrics must not cost the request
                        log.warning("metrics for request %s failed: %s", item.request_id, exc)
                else:  # the engine loop died: no finished output will come for this request
                    state.bridge.forget(request_ids[index])
                mailbox.put(queue, (index, item))  # one event-loop wake-up per engine step, not per output
            return deliver

        try:
            for i, (ids, params) in enumerate(seqs):
                state.loop.add_request(ids, params, request_id=request_ids[i], priority=body.priority,
                                       callback=sink(i))
        except (ValueError, RuntimeError) as exc:
            for rid in request_ids:
                state.loop.abort_request(rid)
            state.admission.leave(len(seqs))
            if isinstance(exc, RuntimeError):
                raise APIError(503, str(exc)) from exc
            # the engine's refusals start with the field they are about ("allowed_token_ids=[2] holds only …")
            field = _leading_field(exc)
            raise APIError(400, str(exc), param=field if field in type(body).model_fields else None) from exc

        async def outputs() -> AsyncIterator[tuple[int, RequestOutput]]:
            while len(finished) < len(seqs):
                index, item = await queue.get()
                if isinstance(item, BaseException):
                    raise APIError(503, f"the engine stopped: {item}", code="engine_dead")
                if item.finished:
                    finished.add(item.request_id)
                    if item.error is not None:
                        which, rest = "this request", ""
                        if len(seqs) > 1:  # name it as the response would: prompt, choice, best_of candidate
                            prompt, j = divmod(index, per_prompt)
                            where = [f"prompt {prompt}"] if len(seqs) > per_prompt else []
                            if per_prompt > 1:
                                where.append(f"{'candidate' if per_prompt > n else 'choice'} {j}")
                            which = f"{', '.join(where)} of this request"
                            rest = "; the rest of it was stopped"
                        raise APIError(500, f"{which} failed inside the engine ({item.error}){rest}; other requests "
                                       "are not affected", code="engine_error")
                    if item.finish_reason == "abort" and state.aborted_for_shutdown:
                        raise APIError(503, "the server shut down before this request finished "
                                       f"(--shutdown-timeout {state.config.shutdown_timeout_s:g} s)",
                                       code="shutting_down")
                yield index, item

        def cleanup() -> None:
            for rid in request_ids:
                if rid not in finished:
                    state.loop.abort_request(rid)  # disconnected or failed: free the KV blocks now
            state.admission.leave(len(seqs))

        created = int(time.time())
        if body.stream:  # (per_prompt == n here: best_of > n is refused with stream)
            include_usage = bool(body.stream_options and body.stream_options.include_usage)
            continuous = include_usage and bool(body.stream_options and body.stream_options.continuous_usage_stats)
            return StreamingResponse(
                _stream(outputs(), cleanup, base_id, created, chat=chat, include_usage=include_usage,
                        continuous_usage=continuous, n=n, tools=tools,
                        echoes=echoes, logprobs=user_logprobs is not None, echo_only=echo_only,
                        echo_offsets=echo_offsets, echo_logprobs=echo_logprobs),
                media_type="text/event-stream",
            )
        last: dict[int, RequestOutput] = {}
        try:
            if not await _until_done_or_disconnected(_collect(outputs(), last), request):
                return Response(status_code=499)  # nobody is listening; the request is aborted in cleanup
        finally:
            cleanup()
        outs: dict[int, RequestOutput] = {}  # choice index → its output
        for p in range(len(prompts)):
            candidates = [last[p * per_prompt + j] for j in range(per_prompt)]
            if per_prompt > n:  # best_of: the n with the highest cumulative logprob (vLLM's, OpenAI's)
                candidates.sort(key=lambda o: -sum(chosen for chosen, _ in o.logprobs or ()))
            for j, out in enumerate(candidates[:n]):
                outs[p * n + j] = out
        want = user_logprobs is not None
        asked_prompt_logprobs = body.prompt_logprobs

        def completion_logprobs(o: RequestOutput, prompt: int) -> dict[str, Any]:
            token_ids, logprobs = ([], []) if echo_only else (o.token_ids, o.logprobs or [])
            start = len(echoes[prompt]) if echoes else 0
            offsets = logprobs_format.offsets(o.prompt_token_ids, start=start).add(token_ids, final=True)
            generated = logprobs_format.completion(token_ids, logprobs, offsets)
            if echo_offsets is None:
                return generated
            return _joined(logprobs_format.prompt_completion(o.prompt_token_ids, o.prompt_logprobs or [],
                                                             echo_offsets[prompt], top=echo_logprobs), generated)

        def prompt_logprobs_fields() -> list[Any] | None:
            """vLLM's prompt_logprobs of each prompt, from its first engine request (see above)."""
            if asked_prompt_logprobs is None:
                return None
            return [logprobs_format.prompt_logprobs(o.prompt_token_ids, o.prompt_logprobs or [],
                                                    o.prompt_logprob_ranks or [], asked_prompt_logprobs)
                    for o in (last[p * per_prompt] for p in range(len(prompts)))]

        def response() -> dict[str, Any]:  # (with logprobs it decodes every token: in a worker thread)
            prompt_lp = prompt_logprobs_fields()
            if chat:
                choices = [{"index": i, **_chat_message(o, tools),
                            "logprobs": logprobs_format.chat(o.token_ids, o.logprobs or []) if want else None}
                           for i, o in sorted(outs.items())]
                data: dict[str, Any] = {"id": base_id, "object": "chat.completion", "created": created, "model": name,
                                        "choices": choices, "usage": _usage(outs, n)}
                if prompt_lp is not None:  # vLLM's place for chat: the response's (one prompt), not a choice's
                    data["prompt_logprobs"] = prompt_lp[0]
                return data
            # (max_tokens=0: the one token the engine sampled is dropped, whatever ended it)
            choices = [{"index": i, "text": (echoes[i // n] if echoes else "") + ("" if echo_only else o.text),
                        "logprobs": completion_logprobs(o, i // n) if want else None,
                        "finish_reason": "length" if echo_only else o.finish_reason,
                        **({"prompt_logprobs": prompt_lp[i // n]} if prompt_lp is not None else {})}
                       for i, o in sorted(outs.items())]
            return {"id": base_id, "object": "text_completion", "created": created, "model": name,
                    "choices": choices, "usage": _usage(outs, n, generated=not echo_only)}

        decodes = want or asked_prompt_logprobs is not None
        return JSONResponse(await asyncio.to_thread(response) if decodes else response())

    async def _stream(outputs: AsyncIterator[tuple[int, RequestOutput]], cleanup: Any, base_id: str, created: int, *,
                      chat: bool, include_usage: bool, n: int, echoes: list[str] | None, continuous_usage: bool = False,
                      logprobs: bool, echo_only: bool = False,
                      echo_offsets: list[list[int]] | None = None,
                      echo_logprobs: int | None = None, tools: ToolCalling | None = None) -> AsyncIterator[str]:
        obj = "chat.completion.chunk" if chat else "text_completion"
        echoed: set[int] = set()  # choices whose prompt went out
        last: dict[int, RequestOutput] = {}
        offsets: dict[int, TextOffsets] = {}  # completions: each choice's text_offset so far
        calls: dict[int, ToolCallDeltas] = {}  # chat with tool_choice: each choice's tool-call deltas

        def chunk(choices: list[dict[str, Any]], usage: dict[str, int] | None = None) -> str:
            data: dict[str, Any] = {"id": base_id, "object": obj, "created": created, "model": name, "choices": choices}
            if include_usage:  # continuous_usage_stats (vLLM's): the usage so far on every chunk, not only the last
                data["usage"] = usage if usage is not None or not continuous_usage else \
                    _usage(last, n, generated=not echo_only)
            return _sse(data)

        try:
            async for index, out in outputs:  # (one engine request per choice: its index is the choice's)
                if chat and index not in last:  # the role goes out with the first engine output, as in vLLM:
                    # clients (vLLM's benchmark among them) time the first token by the first chunk with choices
                    yield chunk([{"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                                  "finish_reason": None}],
                                _usage({**last, index: out}, n) if continuous_usage else None)
                last[index] = out
                new_text, new_ids = ("", []) if echo_only else (out.new_text, out.new_token_ids)
                new_logprobs = ([] if echo_only else out.new_logprobs) if logprobs else None
                first = echoes is not None and index not in echoed  # the prompt goes out with the choice's first chunk
                if not new_text and not out.finished and not new_logprobs and not first:
                    continue
                reason = ("length" if echo_only else out.finish_reason) if out.finished else None
                if chat and tools is not None:  # one chunk per delta: the logprobs on the first, the reason on the last
                    lp = logprobs_format.chat(new_ids, new_logprobs) if new_logprobs is not None else None
                    stream = calls.setdefault(index, ToolCallDeltas(tools))
                    deltas = stream.step(new_text, out.finished)
                    if not deltas and lp is None and reason is None:
                        continue
                    reason = stream.finish_reason(reason)
                    deltas = deltas or [{}]
                    for k, delta in enumerate(deltas):
                        yield chunk([{"index": index, "delta": delta, "logprobs": lp if k == 0 else None,
                                      "finish_reason": reason if k == len(deltas) - 1 else None}])
                    continue
                if chat:
                    lp = logprobs_format.chat(new_ids, new_logprobs) if new_logprobs is not None else None
                    choice = {"index": index, "delta": {"content": new_text} if new_text else {},
                              "logprobs": lp, "finish_reason": reason}
                else:
                    echo = echoes[index // n] if first and echoes is not None else ""
                    lp = None
                    if new_logprobs is not None:
                        if index not in offsets:
                            offsets[index] = logprobs_format.offsets(out.prompt_token_ids, start=len(echo))
                        lp = logprobs_format.completion(new_ids, new_logprobs,
                                                        offsets[index].add(new_ids, final=out.finished))
                        if first and echo_offsets is not None:  # (vLLM's) the prompt's logprobs lead the first chunk,
                            lp = _joined(logprobs_format.prompt_completion(  # as its text does
                                out.prompt_token_ids, out.prompt_logprobs or [], echo_offsets[index // n],
                                top=echo_logprobs), lp)
                    if first:
                        echoed.add(index)
                    choice = {"index": index, "text": echo + new_text, "logprobs": lp, "finish_reason": reason}
                yield chunk([choice])
            if include_usage:
                yield chunk([], _usage(last, n, generated=not echo_only))
            yield "data: [DONE]\n\n"
        except APIError as exc:  # the status line is long gone: the error travels as the stream's last event
            yield _sse({"error": {"message": exc.message, "type": "internal_error" if exc.status == 500
                                  else "service_unavailable", "param": None, "code": exc.code}})
            yield "data: [DONE]\n\n"
        finally:
            cleanup()

    _with_body_schemas(app)
    return app


async def _collect(outputs: AsyncIterator[tuple[int, RequestOutput]], last: dict[int, RequestOutput]) -> None:
    async for index, out in outputs:
        last[index] = out


async def _until_done_or_disconnected(work: Any, request: Request) -> bool:
    """Run ``work`` unless the client leaves first: True when it finished (its exception, if any, is raised),
    False when the client disconnected (``work`` is cancelled).

    The body has been read, so the next ASGI message can only be ``http.disconnect`` — waiting for it costs
    nothing while the engine generates (no polling).
    """
    async def disconnected() -> None:
        while (await request.receive())["type"] != "http.disconnect":
            pass

    task = asyncio.ensure_future(work)
    watch = asyncio.ensure_future(disconnected())
    try:
        await asyncio.wait({task, watch}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (task, watch):
            if not t.done():
                t.cancel()
    if task.done() and not task.cancelled():
        task.result()
        return True
    return False
