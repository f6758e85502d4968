"""POST /v1/chat/completions: messages through the chat template → assistant messages (or tool calls, with
``tool_choice``), with logprobs and vLLM's prompt_logprobs; a full response or a stream of SSE events."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from accelkit.serve.outputs import RequestOutput
from accelkit.serve.server.protocol import ChatCompletionRequest
from accelkit.serve.server.serving_engine import Disconnected, GenerationServing, StreamChoices, Submitted, usage
from accelkit.serve.server.tools import ToolCallDeltas, ToolCalling


def chat_message(out: RequestOutput, tools: ToolCalling | None) -> dict[str, Any]:
    """A chat choice's message and finish_reason: the output's text, or the tool calls it makes (with "auto", the
    text around them too)."""
    if tools is not None:
        content, calls = tools.message(out.text)
        if calls is not None:
            return {"message": {"role": "assistant", "content": content, "tool_calls": calls},
                    "finish_reason": tools.finish_reason(out.finish_reason, called=True)}
        return {"message": {"role": "assistant", "content": content or ""}, "finish_reason": out.finish_reason}
    return {"message": {"role": "assistant", "content": out.text}, "finish_reason": out.finish_reason}


class ServingChat(GenerationServing[ChatCompletionRequest]):
    id_prefix = "chatcmpl"
    prompt_field = "messages"
    chunk_object = "chat.completion.chunk"

    async def create_chat_completion(self, body: ChatCompletionRequest, *, disconnected: Disconnected | None = None
                                     ) -> dict[str, Any] | AsyncIterator[str] | None:
        """The response (a dict), or with ``stream`` its SSE events; None when the client left (``disconnected``
        returned) before it was complete. An :class:`APIError` for anything refused before the engine ran."""
        body.tool_calling  # noqa: B018  # its 400s come before the template sees the tools
        prompt = await self.render_chat(body.messages, add_generation_prompt=body.add_generation_prompt,
                                        continue_final_message=body.continue_final_message,
                                        chat_template_kwargs=body.chat_template_kwargs, tools=body.tools or None)
        prepared = await self.prepare(body, [prompt], limit=body.token_limit, limit_field=body.token_limit_field,
                                      default_limit=None)
        return await self.answer(body, prepared, disconnected)

    def response(self, body: ChatCompletionRequest, run: Submitted, last: dict[int, RequestOutput],
                 outs: dict[int, RequestOutput]) -> dict[str, Any]:
        want, tools = run.prepared.user_logprobs is not None, body.tool_calling
        prompt_lp = self.prompt_logprobs(body, run, last)
        choices = [{"index": i, **chat_message(o, tools),
                    "logprobs": self.logprobs_format.chat(o.token_ids, o.logprobs or []) if want else None}
                   for i, o in sorted(outs.items())]
        data: dict[str, Any] = {"id": run.id, "object": "chat.completion", "created": run.created,
                                "model": self.models.name, "choices": choices, "usage": usage(outs, run.prepared.n)}
        if prompt_lp is not None:  # vLLM's place for chat: the response's (one prompt), not a choice's
            data["prompt_logprobs"] = prompt_lp[0]
        return data

    def stream_choices(self, body: ChatCompletionRequest, run: Submitted) -> StreamChoices:
        """The role first, then content deltas — or with tool_choice the
        tool-call deltas, one chunk each (the logprobs on the first, the finish reason on the last)."""
        tools, fmt = body.tool_calling, self.logprobs_format
        want = run.prepared.user_logprobs is not None
        calls: dict[int, ToolCallDeltas] = {}  # with tool_choice: each choice's tool-call deltas

        def choices(index: int, out: RequestOutput, first: bool) -> Iterator[dict[str, Any]]:
            if first:  # the role goes out with the first engine output, as in vLLM: clients (vLLM's benchmark
                # among them) time the first token by the first chunk with choices
                yield {"index": index, "delta": {"role": "assistant", "content": ""}, "logprobs": None,
                       "finish_reason": None}
            new_text, new_logprobs = out.new_text, out.new_logprobs if want else None
            if not new_text and not out.finished and not new_logprobs:
                return
            reason = out.finish_reason if out.finished else None
            lp = fmt.chat(out.new_token_ids, new_logprobs) if new_logprobs is not None else None
            if tools is None:
                yield {"index": index, "delta": {"content": new_text} if new_text else {}, "logprobs": lp,
                       "finish_reason": reason}
                return
            stream = calls.setdefault(index, ToolCallDeltas(tools))
            deltas = stream.step(new_text, out.finished)
            if not deltas and lp is None and reason is None:
                return
            reason = stream.finish_reason(reason)
            deltas = deltas or [{}]
            for k, delta in enumerate(deltas):
                yield {"index": index, "delta": delta, "logprobs": lp if k == 0 else None,
                       "finish_reason": reason if k == len(deltas) - 1 else None}

        return choices
