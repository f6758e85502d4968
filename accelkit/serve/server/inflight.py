"""One HTTP request's engine requests while they run: submitted to the engine loop, their outputs brought to the
event loop, their errors turned into API errors, and everything given back at the end (``cleanup``).

The engine thread hands outputs over through the event loop's ``Mailbox`` (one wake-up per engine step, not one
per output); each choice of each prompt is one engine request, its index the choice's place in the response.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from accelkit.serve.outputs import RequestOutput
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.server.errors import APIError
from accelkit.serve.server.params import leading_field
from accelkit.serve.server.state import ServingState

log = logging.getLogger("accelkit.serve")


class InFlight:
    """The engine requests ``{base_id}-{i}`` of one HTTP request, submitted on construction; the caller has
    entered ``len(seqs)`` into admission, and ``cleanup`` (or a failed submission) leaves it."""

    def __init__(self, state: ServingState, seqs: list[tuple[list[int], SamplingParams]], *, base_id: str,
                 priority: int, per_prompt: int, n: int, fields: frozenset[str], final_only: bool = False) -> None:
        """``per_prompt``: engine requests per prompt (best_of, else n); ``fields``: the body's field names (an
        engine refusal that names one of them is a 400 with that param); ``final_only``: only each engine
        request's finished output is brought to the event loop (vLLM's FINAL_ONLY: a response that is not streamed
        is built from the last outputs alone, and the loop is not woken for the others — a 2,000-token answer
        would wake it 2,000 times)."""
        self.state, self.num_seqs, self.per_prompt, self.n = state, len(seqs), per_prompt, n
        self.final_only = final_only
        self.request_ids = [f"{base_id}-{i}" for i in range(len(seqs))]
        self.finished: set[str] = set()
        self._max_tokens = [params.max_tokens for _, params in seqs]
        # per prompt, on the engine thread: its engine requests still running, the most tokens one of them generated
        self._prompt_left = [per_prompt] * (len(seqs) // per_prompt)
        self._prompt_most = [0] * len(self._prompt_left)
        self._cleaned_up = False
        self._queue: asyncio.Queue[Any] = asyncio.Queue()
        self._mailbox = state.mailbox(asyncio.get_running_loop())
        try:
            for i, (ids, params) in enumerate(seqs):
                state.loop.add_request(ids, params, request_id=self.request_ids[i], priority=priority,
                                       callback=self._sink(i))
        except (ValueError, RuntimeError) as exc:
            for rid in self.request_ids:
                state.loop.abort_request(rid)
            state.admission.leave(len(seqs))
            if isinstance(exc, RuntimeError):
                raise APIError(503, str(exc)) from exc
            # the engine's refusals start with the field they are about ("allowed_token_ids=[2] holds only …")
            field = leading_field(exc)
            raise APIError(400, str(exc), param=field if field in fields else None) from exc

    def _sink(self, index: int) -> Callable[[RequestOutput | BaseException], None]:
        state, mailbox, queue, final_only = self.state, self._mailbox, self._queue, self.final_only
        max_tokens = self._max_tokens[index]

        def deliver(item: RequestOutput | BaseException) -> None:  # on the engine thread
            if isinstance(item, RequestOutput):
                try:
                    state.bridge.on_output(item, max_tokens)  # (every output: time to first token, inter-token latency)
                    if item.finished:
                        prompt = index // self.per_prompt
                        self._prompt_most[prompt] = max(self._prompt_most[prompt], item.metrics.num_generation_tokens)
                        self._prompt_left[prompt] -= 1
                        if not self._prompt_left[prompt]:
                            state.bridge.on_prompt_finished(self.n, self._prompt_most[prompt])
                except Exception as exc:  # metrics must not cost the request
                    log.warning("metrics for request %s failed: %s", item.request_id, exc)
                if final_only and not item.finished:
                    return
            else:  # the engine loop died: no finished output will come for this request
                state.bridge.forget(self.request_ids[index])
            mailbox.put(queue, (index, item))  # one event-loop wake-up per engine step, not per output
        return deliver

    async def outputs(self) -> AsyncIterator[tuple[int, RequestOutput]]:
        """(engine request index, output) until every engine request has finished; an APIError (500 or 503) for
        one that failed inside the engine, the engine's death, or a shutdown that aborted it."""
        while len(self.finished) < self.num_seqs:
            index, item = await self._queue.get()
            if isinstance(item, BaseException):
                raise APIError(503, f"the engine stopped: {item}", code="engine_dead")
            if item.finished:
                self.finished.add(item.request_id)
                if item.error is not None:
                    raise APIError(500, f"{self._which(index)} failed inside the engine ({item.error})"
                                   f"{'; the rest of it was stopped' if self.num_seqs > 1 else ''}; other requests "
                                   "are not affected", code="engine_error")
                if item.finish_reason == "abort" and self.state.aborted_for_shutdown:
                    raise APIError(503, "the server shut down before this request finished "
                                   f"(--shutdown-timeout {self.state.config.shutdown_timeout_s:g} s)",
                                   code="shutting_down")
            yield index, item

    def _which(self, index: int) -> str:
        """Engine request ``index`` named as the response would: prompt, choice, best_of candidate."""
        if self.num_seqs == 1:
            return "this request"
        prompt, j = divmod(index, self.per_prompt)
        where = [f"prompt {prompt}"] if self.num_seqs > self.per_prompt else []
        if self.per_prompt > 1:
            where.append(f"{'candidate' if self.per_prompt > self.n else 'choice'} {j}")
        return f"{', '.join(where)} of this request"

    def cleanup(self) -> None:
        """Abort what has not finished (the client left, or a choice failed: its KV blocks are freed now) and
        leave admission; only the first call does anything."""
        if self._cleaned_up:
            return
        self._cleaned_up = True
        for rid in self.request_ids:
            if rid not in self.finished:
                self.state.loop.abort_request(rid)
        self.state.admission.leave(self.num_seqs)
