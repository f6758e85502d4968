"""POST /v1/completions: prompts (text or token ids, one or many) → choices, with echo, logprobs, best_of and
vLLM's prompt_logprobs; a full response or a stream of SSE events."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

from accelkit.serve.outputs import RequestOutput
from accelkit.serve.server.errors import APIError
from accelkit.serve.server.logprobs import TextOffsets
from accelkit.serve.server.protocol import CompletionRequest
from accelkit.serve.server.serving_engine import (
    Disconnected,
    GenerationServing,
    StreamChoices,
    Submitted,
    off_loop_unless,
    small_body,
    usage,
)

COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's (and vLLM's) default for /v1/completions


def _joined(first: dict[str, list[Any]], second: dict[str, list[Any]]) -> dict[str, list[Any]]:
    """Two completions logprobs objects (prompt, then generated tokens) as one."""
    return {key: first[key] + second[key] for key in first}


class ServingCompletion(GenerationServing[CompletionRequest]):
    id_prefix = "cmpl"
    prompt_field = "prompt"
    chunk_object = "text_completion"

    async def create_completion(self, body: CompletionRequest, *, disconnected: Disconnected | None = None
                                ) -> dict[str, Any] | AsyncIterator[str] | None:
        """The response (a dict), or with ``stream`` its SSE events; None when the client left (``disconnected``
        returned) before it was complete. An :class:`APIError` for anything refused before the engine ran."""
        # (a copy of every token id: in a worker thread for a large body)
        prompts = await off_loop_unless(small_body(body), body.prompts)
        if not prompts or any(p == "" or p == [] for p in prompts):
            raise APIError(400, "prompt is empty; give at least one token", param="prompt")
        if body.max_tokens == 0 and not body.echo:
            raise APIError(400, "max_tokens=0 returns nothing without echo; send max_tokens of at least 1, or echo=true "
                           "(with logprobs, to score the prompt)", param="max_tokens")
        prepared = await self.prepare(body, prompts, limit=body.max_tokens, limit_field="max_tokens",
                                      default_limit=COMPLETIONS_DEFAULT_MAX_TOKENS, echo=body.echo)
        return await self.answer(body, prepared, disconnected)

    def response(self, body: CompletionRequest, run: Submitted, last: dict[int, RequestOutput],
                 outs: dict[int, RequestOutput]) -> dict[str, Any]:
        """(max_tokens=0: the one token the engine sampled is dropped, whatever ended it.)"""
        prepared = run.prepared
        n, echoes, echo_only = prepared.n, prepared.echoes, prepared.echo_only
        prompt_lp = self.prompt_logprobs(body, run, last)
        want = prepared.user_logprobs is not None
        choices = [{"index": i, "text": (echoes[i // n] if echoes else "") + ("" if echo_only else o.text),
                    "logprobs": self._logprobs(run, o, i // n) if want else None,
                    "finish_reason": "length" if echo_only else o.finish_reason,
                    "stop_reason": None if echo_only else o.stop_reason,
                    **({"prompt_logprobs": prompt_lp[i // n]} if prompt_lp is not None else {}),
                    **({"prompt_token_ids": o.prompt_token_ids, "token_ids": [] if echo_only else o.token_ids}
                       if prepared.return_token_ids else {})}
                   for i, o in sorted(outs.items())]
        return {"id": run.id, "object": "text_completion", "created": run.created, "model": self.models.name,
                "choices": choices, "usage": usage(outs, n, generated=not echo_only)}

    def _logprobs(self, run: Submitted, o: RequestOutput, prompt: int) -> dict[str, Any]:
        """A choice's logprobs object: its tokens' (none with echo only), after its prompt's with echo."""
        prepared, fmt = run.prepared, self.formatter(run.prepared)
        token_ids, logprobs = ([], []) if prepared.echo_only else (o.token_ids, o.logprobs or [])
        start = len(prepared.echoes[prompt]) if prepared.echoes else 0
        offsets = fmt.offsets(o.prompt_token_ids, start=start).add(token_ids, final=True)
        generated = fmt.completion(token_ids, logprobs, offsets)
        if prepared.echo_offsets is None:
            return generated
        return _joined(fmt.prompt_completion(o.prompt_token_ids, o.prompt_logprobs or [],
                                             prepared.echo_offsets[prompt], top=prepared.echo_logprobs), generated)

    def stream_choices(self, body: CompletionRequest, run: Submitted) -> StreamChoices:
        """Text deltas, the prompt first with echo (each choice's text offsets kept across its outputs). (per_prompt
        is n here: best_of > n is refused with stream.)"""
        prepared, fmt = run.prepared, self.formatter(run.prepared)
        n, echoes, echo_only = prepared.n, prepared.echoes, prepared.echo_only
        want, want_ids = prepared.user_logprobs is not None, prepared.return_token_ids
        offsets: dict[int, TextOffsets] = {}  # each choice's text_offset so far

        def choices(index: int, out: RequestOutput, first: bool) -> Iterator[dict[str, Any]]:
            new_text, new_ids = ("", []) if echo_only else (out.new_text, out.new_token_ids)
            new_logprobs = ([] if echo_only else out.new_logprobs) if want else None
            echoing = first and echoes is not None  # the prompt goes out with the choice's first chunk
            echo = echoes[index // n] if echoing and echoes is not None else ""
            if not new_text and not out.finished and not new_logprobs and not echoing and not (want_ids and new_ids):
                return  # (a token with no text yet — part of a character — still has its id to hand out)
            reason = ("length" if echo_only else out.finish_reason) if out.finished else None
            lp = None
            if new_logprobs is not None:
                if index not in offsets:
                    offsets[index] = fmt.offsets(out.prompt_token_ids, start=len(echo))
                lp = fmt.completion(new_ids, new_logprobs, offsets[index].add(new_ids, final=out.finished))
                if first and prepared.echo_offsets is not None:  # (vLLM's) the prompt's logprobs lead the first
                    lp = _joined(fmt.prompt_completion(  # chunk, as its text does
                        out.prompt_token_ids, out.prompt_logprobs or [], prepared.echo_offsets[index // n],
                        top=prepared.echo_logprobs), lp)
            choice: dict[str, Any] = {"index": index, "text": echo + new_text, "logprobs": lp, "finish_reason": reason,
                                      "stop_reason": None if echo_only or reason is None else out.stop_reason}
            if want_ids:  # (vLLM's: the prompt's ids with the choice's first chunk, the new ids with every chunk; a
                # choice's first output always makes a chunk here: it holds a token, or the echo)
                choice.update({"prompt_token_ids": out.prompt_token_ids} if first else {}, token_ids=list(new_ids))
            yield choice

        return choices
