"""POST /v1/chat/completions: messages through the chat template → assistant messages (or tool calls, with
``tool_choice``), with logprobs and vLLM's prompt_logprobs; a full response or a stream of SSE events."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from typing import Any

from accelkit.serve.outputs import RequestOutput
from accelkit.serve.sampling import StructuredOutputs
from accelkit.serve.server.errors import APIError
from accelkit.serve.server.protocol import ChatCompletionRequest
from accelkit.serve.server.reasoning import ReasoningFormat, ReasoningSplitter, split_reasoning, thinks_first
from accelkit.serve.server.serving_engine import (
    Disconnected,
    GenerationServing,
    StreamChoices,
    Submitted,
    small_body,
    usage,
)
from accelkit.serve.server.tools import EMPTY_PARAMETERS, ToolCallDeltas, ToolCalling
from accelkit.serve.structured import CompileTimeout


def chat_message(out: RequestOutput, tools: ToolCalling | None, reasoning: ReasoningFormat | None = None, *,
                 include_reasoning: bool = True) -> dict[str, Any]:
    """A chat choice's message and finish_reason: the output's text, or the tool calls it makes (with "auto", the
    text around them too); with a ``reasoning`` format, the model's thinking apart, as ``reasoning`` (and vLLM's
    older ``reasoning_content``)."""
    text, thought = out.text, None
    if reasoning is not None:
        thought, text = split_reasoning(reasoning, text)
    content, calls = tools.message(text) if tools is not None else (text, None)
    # no content: null beside calls or reasoning, else "" (a plain message always has its text)
    message: dict[str, Any] = {"role": "assistant",
                               "content": content or (None if calls is not None or reasoning is not None else "")}
    reason = out.finish_reason
    if calls is not None:
        assert tools is not None
        message["tool_calls"] = calls
        reason = tools.finish_reason(reason, called=True)
    if reasoning is not None and include_reasoning:
        message["reasoning"] = message["reasoning_content"] = thought
    # (vLLM's: the stop string or stop token id that ended the output, else null)
    return {"message": message, "finish_reason": reason, "stop_reason": out.stop_reason}


async def tool_at_fault(calling: ToolCalling, compile_: Callable[[StructuredOutputs], Awaitable[object]]) -> str | None:
    """The error of the first of ``calling``'s tools whose parameters schema alone does not compile (``compile_``),
    as a named choice of it would say it, in the words of ``calling``'s tool_choice; None where a schema any tool
    could have (no arguments) does not compile either (the error is not about the tools: the tokenizer, a time
    limit) or each tool's compiles alone."""
    tools = calling.each_tool()
    if not tools:
        return None
    try:
        await compile_(dataclasses.replace(tools[0], schema=EMPTY_PARAMETERS).spec())
    except ValueError:
        return None
    for alone in tools:
        try:
            await compile_(alone.spec())
        except ValueError as exc:
            return f"tool_choice {calling.kind!r}: {alone.error_message(str(exc))}"
    return None


async def tool_never_called(calling: ToolCalling, compile_: Callable[[StructuredOutputs], Awaitable[object]]
                            ) -> str | None:
    """"required" with several tools whose schemas compile together: the error of the first tool whose parameters
    schema alone does not compile (``compile_``) — its branch of the calls' ``anyOf`` matches nothing, and the
    grammar engine drops it without a word: the model could never call it —, else None. A compile time limit met
    by one alone is no error of the tool (they all compiled together within it)."""
    if calling.kind != "required" or len(calling.functions) < 2:
        return None
    for alone in calling.each_tool():
        try:
            await compile_(alone.spec())
        except CompileTimeout:
            continue
        except ValueError as exc:
            return (f"tool_choice 'required': {alone.error_message(str(exc))}; no call of it could be made — fix "
                    "its parameters, or leave the tool out")
    return None


class MessageDeltas:
    """One streamed choice's ``delta`` objects past the role: with a reasoning format, the thinking as
    ``reasoning`` (and ``reasoning_content``) deltas first; then content — or, with tools, :class:`ToolCallDeltas`'
    content and calls. The deltas joined are the non-streamed message (:func:`chat_message`)."""

    def __init__(self, tools: ToolCalling | None, reasoning: ReasoningFormat | None, include_reasoning: bool) -> None:
        self.tools = ToolCallDeltas(tools) if tools is not None else None
        self.splitter = ReasoningSplitter(reasoning) if reasoning is not None else None
        self.include_reasoning = include_reasoning

    def step(self, new_text: str, finished: bool) -> list[dict[str, Any]]:
        parts = self.splitter.feed(new_text, finished) if self.splitter is not None else [("content", new_text)]
        deltas = [{"reasoning": text, "reasoning_content": text} for kind, text in parts
                  if kind == "reasoning" and self.include_reasoning]
        content = "".join(text for kind, text in parts if kind == "content")  # (it follows all the reasoning)
        if self.tools is not None:
            return deltas + self.tools.step(content, finished)
        return deltas + ([{"content": content}] if content else [])

    def finish_reason(self, reason: str | None) -> str | None:
        return self.tools.finish_reason(reason) if self.tools is not None else reason


class ServingChat(GenerationServing[ChatCompletionRequest]):
    id_prefix = "chatcmpl"
    prompt_field = "messages"
    chunk_object = "chat.completion.chunk"
    prompt_ids_on_chunk = True  # (return_token_ids: vLLM's place, the first chunk's, not a choice's)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        tokenizer = self.engine.tokenizer
        ids = [tokenizer.convert_tokens_to_ids(t) for t in ("<think>", "</think>")]
        # the reasoning tags as single tokens (as Qwen3's and DeepSeek-R1's are): where a structured output starts
        unknown = getattr(tokenizer, "unk_token_id", None)
        self._think_ids = tuple(ids) if all(isinstance(i, int) and i != unknown for i in ids) else None

    def structured_after(self, body: ChatCompletionRequest, prompt_ids: list[int]) -> tuple[int, int | None] | None:
        """With ``--reasoning-parser``, a model that thinks first gets its structured output after ``</think>``,
        as vLLM does it; a hybrid one that may or may not (qwen3, no tag in the prompt) after ``</think>`` if its
        first token is ``<think>``, else from its first token (the tags single tokens; else from the first token:
        then, but for "auto"'s free text, the output is all answer)."""
        fmt = body.server_reasoning_format
        if fmt is not None and self._think_ids is not None:
            start_id, end_id = self._think_ids
            first = fmt.prompt_opens  # (create_chat_completion read it from the generation prompt)
            if first is not False:
                return int(end_id), (None if first else int(start_id))
        if body.tool_calling is None or body.tool_calling.kind != "auto":
            body.answer_only()
        return None

    async def _structured(self, body: ChatCompletionRequest) -> StructuredOutputs | None:
        """:meth:`GenerationServing._structured`; a compile error of several tools' schemas together ("required")
        that does not say which tool it is about is said of the tool whose schema alone fails so; and "required"'s
        tools that compile together are refused where one alone does not (:func:`tool_never_called`)."""
        try:
            spec = await super()._structured(body)
        except APIError as exc:
            calling = body.tool_calling
            if exc.param != "tools" or calling is None or "tools[" in exc.message or calling.answer is not None \
                    or isinstance(exc.__cause__, CompileTimeout):  # (each tool alone could take as long)
                raise
            message = await tool_at_fault(calling, self.engine.structured_compiler.compile_async)
            if message is None:
                raise
            raise APIError(400, message, param="tools") from exc
        calling = body.tool_calling
        if spec is not None and calling is not None:
            message = await tool_never_called(calling, self.engine.structured_compiler.compile_async)
            if message is not None:
                raise APIError(400, message, param="tools")
        return spec

    async def _generation_prompt(self, body: ChatCompletionRequest, prompt: str) -> str | None:
        """What the chat template adds after the messages for the model's turn (``prompt`` rendered without it is
        its start), or None where there is none or it is not a suffix. With ``continue_final_message`` the output
        goes on from the final message: its text is what precedes the output (a continued ``<think>`` that it opens
        and does not close is thinking still — the whole output was content, ``</think>`` included)."""
        if body.continue_final_message:
            return body.messages[-1].text()
        if not body.add_generation_prompt:
            return None
        bare = await self.render_chat(body.messages, add_generation_prompt=False, continue_final_message=False,
                                      chat_template_kwargs=body.chat_template_kwargs, tools=body.tools or None,
                                      documents=body.documents, small=small_body(body))
        return prompt[len(bare):] if prompt.startswith(bare) else None

    async def create_chat_completion(self, body: ChatCompletionRequest, *, disconnected: Disconnected | None = None
                                     ) -> dict[str, Any] | AsyncIterator[str] | None:
        """The response (a dict), or with ``stream`` its SSE events; None when the client left (``disconnected``
        returned) before it was complete. An :class:`APIError` for anything refused before the engine ran."""
        body.tool_calling  # noqa: B018  # its 400s come before the template sees the tools
        prompt = await self.render_chat(body.messages, add_generation_prompt=body.add_generation_prompt,
                                        continue_final_message=body.continue_final_message,
                                        chat_template_kwargs=body.chat_template_kwargs, tools=body.tools or None,
                                        documents=body.documents, small=small_body(body))
        fmt = body.server_reasoning_format
        if fmt is not None:  # (where the output's thinking starts: its structured output and its split)
            body.prompt_thinking(thinks_first(fmt, await self._generation_prompt(body, prompt)))
        prepared = await self.prepare(body, [prompt], limit=body.token_limit, limit_field=body.token_limit_field,
                                      default_limit=None)
        return await self.answer(body, prepared, disconnected)

    def response(self, body: ChatCompletionRequest, run: Submitted, last: dict[int, RequestOutput],
                 outs: dict[int, RequestOutput]) -> dict[str, Any]:
        want, tools, want_ids = run.prepared.user_logprobs is not None, body.tool_calling, run.prepared.return_token_ids
        prompt_lp = self.prompt_logprobs(body, run, last)
        choices = [{"index": i, **chat_message(o, tools, body.reasoning_format,
                                               include_reasoning=body.include_reasoning),
                    "logprobs": self.formatter(run.prepared).chat(o.token_ids, o.logprobs or []) if want else None,
                    **({"token_ids": o.token_ids} if want_ids else {})}
                   for i, o in sorted(outs.items())]
        data: dict[str, Any] = {"id": run.id, "object": "chat.completion", "created": run.created,
                                "model": self.models.name, "choices": choices, "usage": usage(outs, run.prepared.n)}
        if prompt_lp is not None:  # vLLM's place for chat: the response's (one prompt), not a choice's
            data["prompt_logprobs"] = prompt_lp[0]
        if want_ids:  # (vLLM's: the rendered template's ids, as they ran)
            data["prompt_token_ids"] = outs[0].prompt_token_ids
        return data

    def stream_choices(self, body: ChatCompletionRequest, run: Submitted) -> StreamChoices:
        """The role first, then content deltas — or with tool_choice the tool-call deltas, and with a reasoning
        parser the reasoning deltas first —, one chunk each (the logprobs on the first, the finish reason on the
        last)."""
        tools, fmt, reasoning = body.tool_calling, self.formatter(run.prepared), body.reasoning_format
        want, want_ids = run.prepared.user_logprobs is not None, run.prepared.return_token_ids
        streams: dict[int, MessageDeltas] = {}  # with tools or a reasoning format: each choice's deltas

        def ids(new_ids: list[int]) -> dict[str, Any]:  # return_token_ids: each chunk's new ids (joined: all)
            return {"token_ids": list(new_ids)} if want_ids else {}

        def choices(index: int, out: RequestOutput, first: bool) -> Iterator[dict[str, Any]]:
            if first:  # the role goes out with the first engine output, as in vLLM: clients (vLLM's benchmark
                # among them) time the first token by the first chunk with choices
                yield {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                       "finish_reason": None, "stop_reason": None, **ids([])}
            new_text, new_logprobs = out.new_text, out.new_logprobs if want else None
            new_ids = out.new_token_ids if want_ids else []
            if not new_text and not out.finished and not new_logprobs and not new_ids:
                return
            reason = out.finish_reason if out.finished else None
            stop_reason = out.stop_reason if out.finished else None
            lp = fmt.chat(out.new_token_ids, new_logprobs) if new_logprobs is not None else None
            if tools is None and reasoning is None:
                yield {"index": index, "delta": {"content": new_text} if new_text else {}, "logprobs": lp,
                       "finish_reason": reason, "stop_reason": stop_reason, **ids(new_ids)}
                return
            if index not in streams:
                streams[index] = MessageDeltas(tools, reasoning, body.include_reasoning)
            stream = streams[index]
            deltas = stream.step(new_text, out.finished)
            if not deltas and lp is None and reason is None and not new_ids:
                return
            reason = stream.finish_reason(reason)
            deltas = deltas or [{}]
            for k, delta in enumerate(deltas):
                last = k == len(deltas) - 1
                yield {"index": index, "delta": delta, "logprobs": lp if k == 0 else None,
                       "finish_reason": reason if last else None, "stop_reason": stop_reason if last else None,
                       **ids(new_ids if k == 0 else [])}

        return choices
