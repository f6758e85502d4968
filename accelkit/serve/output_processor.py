"""From sampled tokens to :class:`RequestOutput` objects: the engine's output side, kept outside its core (as
vLLM v1 keeps its ``OutputProcessor``).

Per request it holds the incremental detokenizer and the text so far; per step it takes the sequences that got
a token and gives an output for each streaming request and each finished one. Stop strings are found here —
they live in text, which the scheduler never sees — and end their sequence through ``finish_sequence`` (the
scheduler's ``finish``); every request that ends, however it ends, goes back through ``release`` (the engine's
per-request cleanup: runner state, request ids). Engine thread only, except :meth:`new_request`.

:meth:`process` runs for every sequence of every step, so it is kept to a few attribute updates, one
detokenizer call and (only where one is due) one output object per sequence.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from accelkit.serve.detokenizer import IncrementalDetokenizer, TokenDecoder
from accelkit.serve.isolation import describe
from accelkit.serve.outputs import RequestOutput
from accelkit.serve.sequence import Sequence, SequenceStatus

log = logging.getLogger("accelkit.serve")


@dataclass(slots=True)
class RequestState:
    """One request's output side: its detokenizer, its text, and how much of both was handed out."""

    seq: Sequence
    detokenizer: IncrementalDetokenizer | None
    final_only: bool = False  # no output until it finishes (LLM.generate); else one per step with a token
    text: str = ""
    num_sent_chars: int = 0  # characters of text handed out in outputs (a stop string's possible start waits)
    num_returned_tokens: int = 0  # output tokens handed out in outputs so far (new_token_ids start after them)
    num_detokenized: int = 0  # output tokens the detokenizer has seen


class OutputProcessor:
    """Detokenizing, stop strings and output assembly for every request the engine holds."""

    def __init__(self, decoder: TokenDecoder | None, *, finish_sequence: Callable[[Sequence, str], None],
                 release: Callable[[Sequence], None]) -> None:
        """``decoder``: the tokenizer's (None for a model without one: outputs then carry no text).
        ``finish_sequence(seq, reason)`` ends a sequence that is not finished yet (a stop string, a failure);
        ``release(seq)`` runs once for every request that ends and must not raise."""
        self._decoder = decoder
        # one token's text (special tokens kept, memoised by the decoder): the decoded_token of vLLM-shaped logprobs
        self._token_text = (lambda token: decoder.decode_special([token])) if decoder is not None else None
        self._finish_sequence = finish_sequence
        self._release = release
        self.requests: dict[str, RequestState] = {}
        # counters behind vllm:prompt_tokens, vllm:generation_tokens and vllm:request_success
        self.num_prompt_tokens = self.num_generation_tokens = 0
        self.num_finished: dict[str, int] = {"stop": 0, "length": 0, "abort": 0, "error": 0}

    def new_request(self, seq: Sequence, *, final_only: bool = False) -> RequestState:
        """The output state of a request not yet added (any thread: it touches nothing shared)."""
        detok = (IncrementalDetokenizer(self._decoder, seq.token_ids, skip_special_tokens=seq.params.skip_special_tokens)
                 if self._decoder is not None else None)
        return RequestState(seq, detok, final_only)

    def add(self, state: RequestState) -> None:
        self.requests[state.seq.request_id] = state

    # ---- every step --------------------------------------------------------------------------------
    def process(self, seqs: list[Sequence]) -> list[RequestOutput]:
        """Timestamps, detokenization and stop strings of the sequences that got a token; an output for each
        streaming request and each finished one."""
        now = time.monotonic()
        outputs = []
        requests = self.requests
        finished = SequenceStatus.FINISHED
        self.num_generation_tokens += len(seqs)
        for seq in seqs:
            req = requests[seq.request_id]
            if seq.first_token_time is None:
                seq.first_token_time = now
                self.num_prompt_tokens += seq.num_prompt_tokens
            seq.last_token_time = now
            new_text = ""
            if req.detokenizer is not None:
                try:
                    new_text = self._detokenize(req, seq)
                except Exception as exc:  # e.g. a tokenizer that cannot decode a sampled id: this request only
                    outputs.append(self.fail(seq, exc))
                    continue
            if seq.status is finished:
                outputs.append(self.finish(req, now, new_text))
            elif not req.final_only:
                outputs.append(self._output(req, new_text))
            else:  # no output now; as if it had been handed out, so the final one's new_* are its last step's
                req.num_returned_tokens = len(seq.token_ids) - seq.num_prompt_tokens
        return outputs

    def _detokenize(self, req: RequestState, seq: Sequence) -> str:
        assert req.detokenizer is not None
        start = seq.num_prompt_tokens + req.num_detokenized
        new_ids = seq.token_ids[start:]
        req.num_detokenized += len(new_ids)
        params = seq.params
        done = seq.status is SequenceStatus.FINISHED
        if (done and not params.include_stop_str_in_output and new_ids and seq.finish_reason == "stop"
                and new_ids[-1] in seq.stop_token_ids):  # the stop token that ended it (EOS, or one of
            new_ids = new_ids[:-1]  # stop_token_ids): not text, as vLLM leaves it out unless include_stop_str…
        delta = req.detokenizer.add(new_ids, final=done)
        stops = params.stop
        if not stops:
            req.text += delta
            return self._release_text(req)
        reach = max(len(s) for s in stops) - 1  # characters before the end where a stop string could start
        # within min_tokens a stop string ends nothing (vLLM's: checked once more than min_tokens tokens exist)
        if delta and len(seq.token_ids) - seq.num_prompt_tokens > params.min_tokens:
            text = req.text + delta
            # each stop string where it ends in the new text (as vLLM searches: from len(s) - 1 characters before
            # it — not from the longest one's reach, which found a short one that had ended within min_tokens)
            hits = [(j, s) for s in stops if (j := text.find(s, max(0, len(req.text) - len(s) + 1))) >= 0]
            if params.include_stop_str_in_output:
                # cut after the first stop string to complete (the text before was all handed out: nothing is held
                # back in this mode)
                ends = [(j + len(s), s) for j, s in hits]
                first = min(ends) if ends else None
            else:
                first = min(hits) if hits else None
            if first is not None:
                cut, seq.stop_reason = first
                req.text = text[:cut]
                if not seq.is_finished:
                    self._finish_sequence(seq, "stop")
                else:
                    seq.finish_reason = "stop"
                return self._release_text(req)
        req.text += delta
        if not seq.is_finished and not params.include_stop_str_in_output:
            # hold back what could be the start of a stop string completed by the next tokens: a stream must
            # never show text that then turns out to begin a stop string (the final text would lack it)
            return self._release_text(req, len(req.text) - reach)
        return self._release_text(req)

    @staticmethod
    def _release_text(req: RequestState, end: int | None = None) -> str:
        """The text of ``req`` not handed out yet, up to ``end`` (all of it by default)."""
        start = req.num_sent_chars
        end = len(req.text) if end is None else max(start, end)
        req.num_sent_chars = end
        return req.text[start:end]

    def _output(self, req: RequestState, new_text: str, error: str | None = None) -> RequestOutput:
        """A snapshot of the request (no token list is copied here: see ``RequestOutput``)."""
        seq = req.seq
        # (what a stop string holds back is left out; a whole-string slice copies nothing)
        out = RequestOutput.of(seq, text=req.text[: req.num_sent_chars], new_text=new_text,
                               num_returned_tokens=req.num_returned_tokens, error=error, token_text=self._token_text)
        req.num_returned_tokens = len(seq.token_ids) - seq.num_prompt_tokens
        return out

    # ---- ending a request --------------------------------------------------------------------------
    def finish(self, req: RequestState, now: float, new_text: str = "", *, error: str | None = None) -> RequestOutput:
        """The final output of a request whose sequence has finished (with what a stop string held back)."""
        seq = req.seq
        seq.finished_time = now
        del self.requests[seq.request_id]
        self.num_finished[seq.finish_reason or "abort"] += 1
        self._release(seq)
        return self._output(req, new_text + self._release_text(req), error)

    def fail(self, seq: Sequence, exc: BaseException) -> RequestOutput:
        """End one request because of ``exc`` (logged with its id): finish_reason "error", the others go on."""
        log.error("request %s failed; the engine goes on without it: %s", seq.request_id, describe(exc), exc_info=exc)
        if not seq.is_finished:
            self._finish_sequence(seq, "error")
        return self.finish(self.requests[seq.request_id], time.monotonic(), error=describe(exc))
