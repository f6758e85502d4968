"""What every serving class shares (``ServingBase``: the state, the served models, a body's acceptance, the chat
template), and the generation path that completions and chat completions share (``GenerationServing``):

    request → engine requests (``prepare``: checks, parameters, tokens) → submitted (``submit``) →
    a full response (``collect``, then the endpoint's own assembly) or a stream of SSE events (``stream``).

Nothing here knows HTTP: a serving class is called with a parsed body and answers with a dict (the JSON response)
or an async iterator of SSE events; errors are :class:`APIError`. ``app.py`` does the HTTP around it.

Where a request's own work runs (:func:`off_loop_unless`): parsing a body, templating a chat and tokenizing a prompt
run in a worker thread when their input is large, so that their milliseconds stall no stream and no /health; when
it is small (most requests) they run on the event loop. A plain body parses in ~25 µs, and the slowest small inputs
found take 0.6 ms (a 2 KiB body of a thousand token ids) and 0.5 ms (512 emoji to tokenize with a 50K BPE): about
what a hop to a worker thread and back costs idle, and under load the hop also waits behind every other request's
hops for the pool and for the interpreter lock. A 4-token completion of the tiny test model took 5.9 ms idle
without the three hops and 7.0 ms with them, 18 ms and 28 ms beside 8 busy clients (medians of 6 servers each way in
one run on a 2-core VM: ``benchmarks/results/serve_request_path.json``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, ParamSpec, TypeVar

from accelkit.core import strict_json
from accelkit.core.terminal import printable
from accelkit.serve.chat_template import chat_template_arguments
from accelkit.serve.outputs import RequestOutput
from accelkit.serve.sampling import SamplingParams, StructuredOutputs
from accelkit.serve.server.errors import APIError
from accelkit.serve.server.inflight import InFlight
from accelkit.serve.server.logprobs import LogprobFormatter
from accelkit.serve.server.params import GenerationRequest, check_choices, sampling_params
from accelkit.serve.server.prompts import (
    ContextLengthExceeded,
    output_budget,
    prompt_token_ids,
    render_chat_template,
)
from accelkit.serve.server.protocol import B, ChatMessage, parse_body
from accelkit.serve.server.serving_models import ServingModels
from accelkit.serve.server.state import ServingState

log = logging.getLogger("accelkit.serve")

RETRY_AFTER_S = 1  # the Retry-After of a 429: a queue slot frees as soon as one request finishes
# a body at most this large is parsed, and its chat templated, on the event loop: the slowest found take 0.6 ms to
# parse (a thousand token ids) and 0.4 ms to template (70 empty messages), and bodies sent at once queue that on the
# loop back to back (at 8 KiB, four times the work, 32 of them stalled /health for 0.1–0.2 s: found in review)
INLINE_BODY_BYTES = 2 * 1024
# a request's prompts of at most this many characters (or token ids) together are tokenized on the event loop:
# ~0.1 ms for ASCII text with a 50K BPE, ~0.5 ms for 512 emoji (4 bytes each)
INLINE_PROMPT_LEN = 512
# a small body's chat of at most this many messages is templated on the event loop: the template's work grows with
# the messages, and 2 KiB holds 70 empty ones (32 such chats at once lagged /health up to twice as long as in worker
# threads: found in review), where a real chat of a few messages templates in tens of microseconds
INLINE_CHAT_MESSAGES = 8
MAX_IGNORED_NAMED = 20  # unknown fields named in one log line
DONE = "data: [DONE]\n\n"

Disconnected = Callable[[], Awaitable[None]]  # returns when the client has gone (app.py: the ASGI disconnect)
R = TypeVar("R", bound=GenerationRequest)
T = TypeVar("T")
P = ParamSpec("P")
StreamChoices = Callable[[int, RequestOutput, bool], Iterable[dict[str, Any]]]  # see GenerationServing.stream


async def off_loop_unless(small: bool, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> T:
    """``fn(*args, **kwargs)``: on the event loop when its input is ``small`` (the hop would cost more than the
    work), else in a worker thread (see the module's docstring)."""
    if small:
        return fn(*args, **kwargs)
    return await asyncio.to_thread(fn, *args, **kwargs)


def small_body(body: Any) -> bool:
    """Whether work bounded by ``body``'s size runs on the event loop (:data:`INLINE_BODY_BYTES`)."""
    return bool(body.num_bytes <= INLINE_BODY_BYTES)


def sse(data: Any) -> str:
    return f"data: {strict_json.dumps(data, separators=(',', ':'))}\n\n"  # never a bare NaN in an event


def usage(outs: dict[int, RequestOutput], n: int, *, generated: bool = True) -> dict[str, int]:
    """Usage of the choices ``outs`` (by choice index): each prompt counted once whatever its number of choices
    ``n``, as vLLM counts it; every choice's tokens (none when ``generated`` is false: echo with max_tokens=0 returns
    none of the token the engine sampled)."""
    prompts = {index // n: o for index, o in outs.items()}
    prompt = sum(len(o.prompt_token_ids) for o in prompts.values())
    completion = sum(len(o.token_ids) for o in outs.values()) if generated else 0
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


class ServingBase:
    """A serving class over one engine loop's ``ServingState``."""

    def __init__(self, state: ServingState, models: ServingModels) -> None:
        self.state, self.models = state, models
        self.engine = state.engine
        self._template_args = chat_template_arguments(self.engine.tokenizer)
        # the tokenizer's added tokens (a parser's form follows them: Mistral's v11 calls where it has [ARGS])
        self._added_tokens = frozenset(getattr(self.engine.tokenizer, "get_added_vocab", dict)())

    async def accept(self, cls: type[B], raw: bytes, content_type: str | None, *, route: str) -> B:
        """A body parsed and validated (``parse_body``; in a worker thread when large), then the checks every body
        gets first: a served model, the unknown fields logged, nothing asked for that the engine does not do."""
        body, ignored = await off_loop_unless(len(raw) <= INLINE_BODY_BYTES, parse_body, cls, raw, content_type,
                                              max_model_len=self.engine.max_model_len)
        self.models.check(body.model)
        body.configure(self.state.config, self._added_tokens)
        unsupported = body.unsupported()
        if unsupported:
            raise APIError(400, unsupported[1], param=unsupported[0], code="unsupported")
        if ignored:
            more = f" and {len(ignored) - MAX_IGNORED_NAMED} more" if len(ignored) > MAX_IGNORED_NAMED else ""
            named = ", ".join(printable(name, single_line=True) for name in ignored[:MAX_IGNORED_NAMED])
            log.warning("POST %s: ignoring unknown field(s) %s%s, as vLLM does", route, named, more)  # (one line)
        return body

    async def render_chat(self, messages: list[ChatMessage], *, add_generation_prompt: bool,
                          continue_final_message: bool, chat_template_kwargs: dict[str, Any] | None,
                          tools: list[Any] | None = None, documents: list[Any] | None = None,
                          small: bool) -> str:
        """The chat template rendered to text (the messages turned into dicts first): on the event loop when the body
        they came from is ``small`` (:func:`small_body`) and they are at most :data:`INLINE_CHAT_MESSAGES`, else in a
        worker thread."""
        def render() -> str:
            return render_chat_template(
                self.engine.tokenizer, [m.for_template() for m in messages],
                chat_template=self.state.config.chat_template, add_generation_prompt=add_generation_prompt,
                continue_final_message=continue_final_message, variables=chat_template_kwargs or {},
                reserved=self._template_args, tools=tools, documents=documents,
            )

        return await off_loop_unless(small and len(messages) <= INLINE_CHAT_MESSAGES, render)


@dataclass(slots=True, kw_only=True)
class PreparedRequest:
    """A generation request as engine requests: ``per_prompt`` of them per prompt (best_of, else n), of which the
    response returns ``n``. The echo fields are completions' (None for chat)."""

    prompts: list[str | list[int]]  # as sent; a truncated one replaced by the token ids that run
    seqs: list[tuple[list[int], SamplingParams]]  # (prompt token ids, params) per engine request
    n: int
    per_prompt: int
    user_logprobs: int | None  # the logprobs the client asked for (the engine may compute some for best_of)
    echo_only: bool = False  # echo with max_tokens=0: the prompt alone
    echo_logprobs: int | None = None  # echo with logprobs: the prompt tokens' logprobs first
    echoes: list[str] | None = None  # each prompt's text, before its choices' (echo)
    echo_offsets: list[list[int]] | None = None  # where each prompt token starts in that text (echo with logprobs)
    token_ids_as_tokens: bool = False  # vLLM's return_tokens_as_token_ids: logprobs name tokens token_id:<id>
    return_token_ids: bool = False  # vLLM's return_token_ids: the prompt's and each choice's token ids beside the text


@dataclass(slots=True)
class Submitted:
    """A prepared request running in the engine."""

    prepared: PreparedRequest
    inflight: InFlight
    id: str
    created: int


class GenerationServing(ServingBase, ABC, Generic[R]):
    """The path shared by /v1/completions and /v1/chat/completions; each subclass assembles its own responses
    (``response``, ``stream_choices``)."""

    id_prefix = "cmpl"  # of the response's id (and its engine requests')
    prompt_field = "prompt"  # the field a prompt's 400 names
    chunk_object = "text_completion"  # the ``object`` of a stream's chunks
    # return_token_ids: the prompt's ids on the chunk (chat, vLLM's place), else in the choice (stream_choices')
    prompt_ids_on_chunk = False

    def __init__(self, state: ServingState, models: ServingModels) -> None:
        super().__init__(state, models)
        self.logprobs_format = LogprobFormatter(self.engine.tokenizer)

    # ---- request → engine requests -----------------------------------------------------------------
    async def prepare(self, body: R, prompts: list[str | list[int]], *, limit: int | None,
                      limit_field: str, default_limit: int | None, echo: bool = False) -> PreparedRequest:
        """Every check and every prompt's tokens before anything is queued. ``limit``: the output tokens asked for
        (in ``limit_field``), ``default_limit`` when not given (None: the rest of the context)."""
        self._check_ready(body)
        check_choices(body, len(prompts), vocab_size=self.engine.model_args.vocab_size,
                      capacity=self.state.admission.capacity)
        n, per_prompt = body.n, body.num_generated
        user_logprobs = body.num_logprobs
        # best_of ranks by logprob per token: the engine computes them even when the client did not ask
        logprobs = user_logprobs if user_logprobs is not None or per_prompt == n else 0
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
        spec = await self._structured(body)
        prepared = PreparedRequest(prompts=prompts, seqs=[], n=n, per_prompt=per_prompt, user_logprobs=user_logprobs,
                                   echo_only=echo_only, echo_logprobs=echo_logprobs,
                                   token_ids_as_tokens=bool(body.return_tokens_as_token_ids),
                                   return_token_ids=bool(body.return_token_ids))
        prompt_ids = []
        # one decision for the whole request: 512 prompts of 1,000 characters each, tokenized one after another on the
        # event loop, held it for half a second (found in review)
        small = sum(map(len, prompts)) <= INLINE_PROMPT_LEN
        for i, p in enumerate(prompts):  # validate every prompt before queueing any
            ids, truncated = await self._prompt_ids(body, p, small=small)
            max_tokens = output_budget(max_model_len=self.engine.max_model_len, num_prompt_tokens=len(ids),
                                       requested=limit, field=limit_field, default=default_limit)
            # one engine request per choice: the prefix cache shares the prompt's KV blocks between them. Prompt
            # logprobs (which skip that cache) in each choice's request with echo's, else in the prompt's first only:
            # the prompt_logprobs field is the prompt's, whichever choices it has
            after = self.structured_after(body, ids) if spec is not None else None
            prepared.seqs += [(ids, sampling_params(
                body, max_tokens=max_tokens, choice=j, logprobs=logprobs, structured=spec, structured_after=after,
                prompt_logprobs=prompt_logprobs if j == 0 or echo_logprobs is not None else None))
                for j in range(per_prompt)]
            prompt_ids.append(ids)
            if truncated:  # echo returns the text of what ran: the kept ids, decoded
                prompts[i] = ids
        if echo:
            await self._echo(body, prepared, prompt_ids)
        return prepared

    def structured_after(self, body: R, prompt_ids: list[int]) -> tuple[int, int | None] | None:
        """Where a structured output's constraint starts: (the token after which — a reasoning model's ``</think>``:
        chat, ``--reasoning-parser`` —, the token that must open the output for it to wait so — ``<think>`` — or
        None: it always waits); None: from the first token."""
        return None

    def _check_ready(self, body: R) -> None:
        state = self.state
        if body.priority != 0 and self.engine.config.scheduling_policy != "priority":  # vLLM refuses it too
            raise APIError(400, f"priority={body.priority} needs the server started with --scheduling-policy priority",
                           param="priority", code="unsupported")
        if not state.accepting:
            raise APIError(503, "the server is shutting down", code="shutting_down")
        if not state.loop.is_alive:
            raise APIError(503, f"the engine is not running: {state.loop.dead_reason}", code="engine_dead")

    async def _structured(self, body: R) -> StructuredOutputs | None:
        """The structured-output spec asked for, compiled here: on the compiler's own threads within its time limit,
        awaited (neither the event loop nor its default thread pool waits on it); cached after."""
        structured = body.structured()
        if structured is None:
            return None
        try:
            await self.engine.structured_compiler.compile_async(structured[1])
        except ValueError as exc:
            raise body.structured_error(structured[0], str(exc)) from exc
        return structured[1]

    async def _prompt_ids(self, body: R, prompt: str | list[int], *, small: bool) -> tuple[list[int], bool]:
        """``small``: the request's prompts together are short enough to tokenize on the event loop."""
        param = self.prompt_field
        try:
            return await off_loop_unless(small, prompt_token_ids, self.engine, prompt,
                                         add_special_tokens=body.add_special_tokens,
                                         truncate_prompt_tokens=body.truncate_prompt_tokens)
        except ContextLengthExceeded as exc:
            raise APIError(400, str(exc), param=param, code="context_length_exceeded") from exc
        except ValueError as exc:
            raise APIError(400, str(exc), param=param) from exc

    async def _echo(self, body: R, prepared: PreparedRequest, prompt_ids: list[list[int]]) -> None:
        """Completions' echo: each prompt's text before its choices' (a prompt of token ids decoded, as vLLM does;
        a truncated one too, from the ids that ran), with logprobs where each of its tokens starts in that text."""
        prepared.echoes = [p if isinstance(p, str) else await asyncio.to_thread(self._echo_text, p)
                           for p in prepared.prompts]
        if prepared.echo_logprobs is not None:
            prepared.echo_offsets = [await asyncio.to_thread(self.logprobs_format.prompt_offsets, p, ids,
                                                             add_special_tokens=body.add_special_tokens)
                                     for p, ids in zip(prepared.prompts, prompt_ids, strict=True)]

    def _echo_text(self, token_ids: list[int]) -> str:
        """A prompt of token ids as completions' echo gives it: ``tokenizer.decode`` (special tokens included)."""
        tokenizer = self.engine.tokenizer
        return str(tokenizer.decode(token_ids)) if tokenizer is not None else ""

    # ---- engine requests → the answer ---------------------------------------------------------------
    async def answer(self, body: R, prepared: PreparedRequest, disconnected: Disconnected | None
                     ) -> dict[str, Any] | AsyncIterator[str] | None:
        """Submit ``prepared``; the full response, or with ``stream`` its SSE events; None when the client left
        (``disconnected`` returned) before the response was complete."""
        run = self.submit(body, prepared)
        if body.stream:
            return self.stream(body, run, object_name=self.chunk_object, choices=self.stream_choices(body, run))
        collected = await self.collect(run, disconnected)
        if collected is None:
            return None
        last, outs = collected
        if prepared.user_logprobs is not None or body.prompt_logprobs is not None:  # logprobs decode every token:
            return await asyncio.to_thread(self.response, body, run, last, outs)  # not on the event loop
        return self.response(body, run, last, outs)

    @abstractmethod
    def response(self, body: R, run: Submitted, last: dict[int, RequestOutput],
                 outs: dict[int, RequestOutput]) -> dict[str, Any]:
        """The full response from the returned choices ``outs`` (by choice index) and every engine request's last
        output ``last`` (by engine request)."""

    @abstractmethod
    def stream_choices(self, body: R, run: Submitted) -> StreamChoices:
        """What ``stream`` calls for each output: the choices it adds to the stream (state kept per request)."""

    def submit(self, body: R, prepared: PreparedRequest) -> Submitted:
        """Queue the engine requests (a 429 when the waiting queue is full)."""
        state, num = self.state, len(prepared.seqs)
        if not state.admission.try_enter(num):
            raise APIError(429, f"the waiting queue is full ({state.config.max_queue} waiting beyond "
                           f"{self.engine.config.max_num_seqs} running); retry in {RETRY_AFTER_S} s",
                           code="queue_full", headers={"Retry-After": str(RETRY_AFTER_S)})
        base_id = f"{self.id_prefix}-{uuid.uuid4().hex}"
        inflight = InFlight(state, prepared.seqs, base_id=base_id, priority=body.priority,
                            per_prompt=prepared.per_prompt, n=prepared.n, fields=frozenset(type(body).model_fields),
                            final_only=not body.stream)
        return Submitted(prepared, inflight, base_id, int(time.time()))

    async def collect(self, run: Submitted, disconnected: Disconnected | None = None
                      ) -> tuple[dict[int, RequestOutput], dict[int, RequestOutput]] | None:
        """Every engine request's last output (by engine request) and the returned choices (by choice index: with
        best_of, the n of each prompt with the highest logprob per token, as OpenAI picks them); None when
        the client left first (``disconnected`` returned: the requests are aborted)."""
        last: dict[int, RequestOutput] = {}

        async def gather() -> None:
            async for index, out in run.inflight.outputs():
                last[index] = out

        try:
            if not await _until_done_or(gather(), disconnected):
                return None
        finally:
            run.inflight.cleanup()
        prepared, outs = run.prepared, {}
        n, per_prompt = prepared.n, prepared.per_prompt
        for p in range(len(prepared.prompts)):
            candidates = [last[p * per_prompt + j] for j in range(per_prompt)]
            if per_prompt > n:  # (OpenAI's "highest log probability per token"; a sum — vLLM v0's — ranked an
                candidates.sort(key=_logprob_per_token, reverse=True)  # output that ends at once first)
            for j, out in enumerate(candidates[:n]):
                outs[p * n + j] = out
        return last, outs

    def formatter(self, prepared: PreparedRequest) -> LogprobFormatter:
        """The logprobs formatter of a request: tokens named by their text, or by id (return_tokens_as_token_ids)."""
        return self.logprobs_format.by_id() if prepared.token_ids_as_tokens else self.logprobs_format

    def prompt_logprobs(self, body: R, run: Submitted,
                        last: dict[int, RequestOutput]) -> list[Any] | None:
        """vLLM's prompt_logprobs of each prompt, from its first engine request (the one that computed them)."""
        if body.prompt_logprobs is None:
            return None
        per_prompt = run.prepared.per_prompt
        return [self.logprobs_format.prompt_logprobs(o.prompt_token_ids, o.prompt_logprobs or [],
                                                     o.prompt_logprob_ranks or [], body.prompt_logprobs)
                for o in (last[p * per_prompt] for p in range(len(run.prepared.prompts)))]

    async def stream(self, body: R, run: Submitted, *, object_name: str,
                     choices: StreamChoices) -> AsyncIterator[str]:
        """The SSE events of a streamed response: one chunk per choice ``choices(index, output, first)`` gives for
        each output (``first``: the choice's first output), then the usage (``stream_options.include_usage``) and
        ``[DONE]``. An error after the status line travels as the last event, before ``[DONE]``."""
        prepared = run.prepared
        include_usage = bool(body.stream_options and body.stream_options.include_usage)
        # continuous_usage_stats (vLLM's): the usage so far on every chunk, not only the last
        continuous = include_usage and bool(body.stream_options and body.stream_options.continuous_usage_stats)
        last: dict[int, RequestOutput] = {}

        def chunk(choice_list: list[dict[str, Any]], final: bool = False,
                  prompt_token_ids: list[int] | None = None) -> str:
            data: dict[str, Any] = {"id": run.id, "object": object_name, "created": run.created,
                                    "model": self.models.name, "choices": choice_list}
            if include_usage:
                data["usage"] = usage(last, prepared.n, generated=not prepared.echo_only) \
                    if final or continuous else None
            if prompt_token_ids is not None:
                data["prompt_token_ids"] = prompt_token_ids
            return sse(data)

        prompt_ids_on_chunk = prepared.return_token_ids and self.prompt_ids_on_chunk
        try:
            async for index, out in run.inflight.outputs():  # (one engine request per choice: its index is the choice's)
                first = index not in last
                last[index] = out
                for k, choice in enumerate(choices(index, out, first)):  # (a choice's first chunk: its prompt's ids)
                    yield chunk([choice], prompt_token_ids=out.prompt_token_ids
                                if prompt_ids_on_chunk and first and k == 0 else None)
            if include_usage:
                yield chunk([], final=True)
            yield DONE
        except APIError as exc:  # the status line is long gone: the error travels as the stream's last event
            yield sse({"error": {"message": exc.message, "type": "internal_error" if exc.status == 500
                                 else "service_unavailable", "param": None, "code": exc.code}})
            yield DONE
        except Exception as exc:  # (a bug, or a tokenizer failing on an id): said too, as vLLM does — the stream
            # just stopped, with no reason given; logged with its traceback
            log.error("%s stream %s failed: %s: %s", object_name, run.id, type(exc).__name__, exc, exc_info=exc)
            yield sse({"error": {"message": f"internal error: {type(exc).__name__}: {exc}", "type": "internal_error",
                                 "param": None, "code": "internal_error"}})
            yield DONE
        finally:
            run.inflight.cleanup()


async def _until_done_or(work: Awaitable[None], disconnected: Disconnected | None) -> bool:
    """Run ``work`` unless the client leaves first: True when it finished (its exception, if any, is raised),
    False when ``disconnected`` returned first (``work`` is cancelled)."""
    if disconnected is None:
        await work
        return True
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


def _logprob_per_token(out: RequestOutput) -> float:
    """A best_of candidate's mean logprob per generated token (-inf for none: it is ranked last)."""
    chosen = [lp for lp, _ in out.logprobs or ()]
    return sum(chosen) / len(chosen) if chosen else float("-inf")
