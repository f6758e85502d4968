"""What the engine hands back: per-request outputs with timings, and engine-wide counters."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from accelkit.serve.sequence import Sequence, SequenceStatus

TokenLogprobs = tuple[float, list[tuple[int, float]]]  # a token's logprob, and the most likely (id, logprob)


@dataclass(frozen=True, slots=True)
class Logprob:
    """vLLM's ``Logprob``: one token's log-probability, its rank in the vocabulary there (1 = the most likely; 1 +
    the tokens strictly more likely, so ties share a rank) and its text alone (``tokenizer.decode([id])``; None for
    a model without a tokenizer)."""

    logprob: float
    rank: int | None = None
    decoded_token: str | None = None


def vllm_logprobs(token_ids: list[int], logprobs: list[TokenLogprobs], token_text: Callable[[int], str] | None,
                  ranks: list[int] | None = None) -> list[dict[int, Logprob]]:
    """The engine's per-token ``(logprob, [(id, logprob)] most likely first)`` as vLLM's ``CompletionOutput.logprobs``:
    per token a dict ``{id: Logprob}`` holding the token itself first, then the k most likely (ranked 1.. k, ties
    sharing the better rank). The token's rank is the engine's (``ranks``, entry by entry: 1 + the tokens strictly
    more likely in the whole vocabulary); without it, exact when the token is at least as likely as the k-th (every
    token more likely than it is then among the k), else None."""
    out = []
    for i, (token, (chosen, top)) in enumerate(zip(token_ids, logprobs, strict=False)):
        if ranks is not None and i < len(ranks):
            rank: int | None = ranks[i]
        else:
            rank = 1 + sum(lp > chosen for _, lp in top) if top and chosen >= top[-1][1] else None
        entry = {token: Logprob(chosen, rank, token_text(token) if token_text is not None else None)}
        place = 0
        for i, (t, lp) in enumerate(top):
            if i == 0 or lp < top[i - 1][1]:  # a tie keeps the rank of the one before it
                place = i + 1
            if t not in entry:
                entry[t] = Logprob(lp, place, token_text(t) if token_text is not None else None)
        out.append(entry)
    return out


@dataclass(frozen=True, slots=True)
class CompletionOutput:
    """One completion of a request, as vLLM's ``RequestOutput.outputs[i]`` holds it (the engine runs one per
    request: ``index`` is 0). ``cumulative_logprob`` is the sum of the sampled tokens' logprobs, with
    ``SamplingParams.logprobs`` only (None without, as vLLM gives it); ``logprobs`` is vLLM's shape then: per token
    ``{token id: Logprob(logprob, rank, decoded_token)}``, the token itself first, then the k most likely. ``stop_reason``: the stop string or stop token id
    that ended it; None when EOS, the length limit or an abort did."""

    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: list[dict[int, Logprob]] | None
    finish_reason: str | None
    stop_reason: int | str | None = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass(slots=True)
class RequestMetrics:
    """Monotonic timestamps (``time.monotonic()``, seconds) and token counts of one request."""

    arrival_time: float
    num_prompt_tokens: int
    first_scheduled_time: float | None = None
    first_token_time: float | None = None
    last_token_time: float | None = None
    finished_time: float | None = None
    num_cached_tokens: int = 0  # prompt tokens served from the prefix cache
    num_generation_tokens: int = 0
    num_preemptions: int = 0

    @property
    def queue_time_s(self) -> float | None:
        return None if self.first_scheduled_time is None else self.first_scheduled_time - self.arrival_time

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def prefill_time_s(self) -> float | None:
        if self.first_token_time is None or self.first_scheduled_time is None:
            return None
        return self.first_token_time - self.first_scheduled_time

    @property
    def decode_time_s(self) -> float | None:
        if self.last_token_time is None or self.first_token_time is None:
            return None
        return self.last_token_time - self.first_token_time

    @property
    def e2e_s(self) -> float | None:
        return None if self.finished_time is None else self.finished_time - self.arrival_time


class RequestOutput:
    """The state of one request after a step. ``new_*`` is what this step added (for streaming);
    ``text``/``token_ids`` are everything generated so far. ``finish_reason``: stop | length | abort | error;
    with ``error``, the request failed inside the engine (``error`` says why) and only this request ended.

    The engine builds one per request and step, so it copies nothing long: its token lists and metrics are
    taken from the request's sequence when first read, as they were when the output was made (a sequence's
    tokens only grow by appends, so remembering the length is a snapshot). Built by hand, from keywords,
    it holds exactly what it was given.
    """

    __slots__ = (
        "_end", "_last_token_time", "_logprobs", "_metrics", "_new_logprobs", "_new_start", "_new_token_ids",
        "_num_preemptions", "_prompt_logprob_ranks", "_prompt_logprobs", "_prompt_token_ids", "_seq", "_token_ids",
        "_token_text", "error", "finish_reason", "finished", "new_text", "prompt", "request_id", "text",
    )

    def __init__(
        self, *, request_id: str, prompt: str | None, prompt_token_ids: list[int], text: str, token_ids: list[int],
        new_text: str, new_token_ids: list[int], finished: bool, finish_reason: str | None, metrics: RequestMetrics,
        error: str | None = None, logprobs: list[TokenLogprobs] | None = None,
        new_logprobs: list[TokenLogprobs] | None = None, prompt_logprobs: list[TokenLogprobs | None] | None = None,
        prompt_logprob_ranks: list[int | None] | None = None, token_text: Callable[[int], str] | None = None,
    ) -> None:
        self.request_id, self.prompt, self.text, self.new_text = request_id, prompt, text, new_text
        self._logprobs, self._new_logprobs, self._prompt_logprobs = logprobs, new_logprobs, prompt_logprobs
        self._prompt_logprob_ranks = prompt_logprob_ranks
        self.finished, self.finish_reason, self.error = finished, finish_reason, error
        self._prompt_token_ids: list[int] | None = prompt_token_ids
        self._token_ids: list[int] | None = token_ids
        self._new_token_ids: list[int] | None = new_token_ids
        self._metrics: RequestMetrics | None = metrics
        self._seq: Sequence | None = None
        self._end = self._new_start = self._num_preemptions = 0
        self._last_token_time: float | None = None
        self._token_text = token_text

    @classmethod
    def of(cls, seq: Sequence, *, text: str, new_text: str, num_returned_tokens: int, error: str | None = None,
           token_text: Callable[[int], str] | None = None) -> RequestOutput:
        """The engine's snapshot of ``seq`` now: the output tokens past ``num_returned_tokens`` are new.
        ``token_text(id)``: one token's text, for the ``decoded_token`` of ``outputs[0].logprobs``."""
        out = cls.__new__(cls)
        out._token_text = token_text
        out.request_id, out.prompt, out.text, out.new_text = seq.request_id, seq.prompt, text, new_text
        out.finished, out.finish_reason, out.error = seq.status is SequenceStatus.FINISHED, seq.finish_reason, error
        out._seq, out._end, out._new_start = seq, len(seq.token_ids), seq.num_prompt_tokens + num_returned_tokens
        out._last_token_time, out._num_preemptions = seq.last_token_time, seq.num_preemptions
        out._prompt_token_ids = out._token_ids = out._new_token_ids = None
        out._logprobs = out._new_logprobs = out._prompt_logprobs = out._prompt_logprob_ranks = None
        out._metrics = None
        return out

    @property
    def logprobs(self) -> list[TokenLogprobs] | None:
        """With ``SamplingParams.logprobs``: per output token so far, (its logprob, [(id, logprob)] of the most
        likely tokens, most likely first); else None."""
        if self._logprobs is None and self._seq is not None and self._seq.logprobs is not None:
            self._logprobs = self._seq.logprobs[: self._end - self._seq.num_prompt_tokens]
        return self._logprobs

    @property
    def prompt_logprobs(self) -> list[TokenLogprobs | None] | None:
        """With ``SamplingParams.prompt_logprobs``: per prompt token, (its logprob given the tokens before it, [(id,
        logprob)] of the most likely there); the first token's entry is None (nothing precedes it). Complete once the
        first output token is; a request aborted or failed during its prompt has the entries computed by then (fewer
        than its prompt's tokens). None without ``prompt_logprobs``."""
        self._copy_prompt_logprobs()
        return self._prompt_logprobs

    @property
    def prompt_logprob_ranks(self) -> list[int | None] | None:
        """Beside ``prompt_logprobs``, entry by entry: each prompt token's rank in the vocabulary where it stands (1
        = the most likely; 1 + the number of tokens more likely, so ties share a rank) — vLLM's ``Logprob.rank``,
        which may exceed k. The first is None. None without ``prompt_logprobs``."""
        self._copy_prompt_logprobs()
        return self._prompt_logprob_ranks

    def _copy_prompt_logprobs(self) -> None:
        """Both prompt lists from the sequence, the same length: the engine thread may still be appending (it
        appends an entry, then its rank), so the ranks are copied first and the entries cut to them."""
        seq = self._seq
        if self._prompt_logprobs is None and seq is not None and seq.prompt_logprob_ranks is not None:
            ranks = seq.prompt_logprob_ranks[:]
            assert seq.prompt_logprobs is not None
            self._prompt_logprobs, self._prompt_logprob_ranks = seq.prompt_logprobs[: len(ranks)], ranks

    @property
    def new_logprobs(self) -> list[TokenLogprobs] | None:
        """``logprobs`` of ``new_token_ids``."""
        seq = self._seq
        if self._new_logprobs is None and seq is not None and seq.logprobs is not None:
            self._new_logprobs = seq.logprobs[self._new_start - seq.num_prompt_tokens : self._end - seq.num_prompt_tokens]
        return self._new_logprobs

    @property
    def prompt_token_ids(self) -> list[int]:
        if self._prompt_token_ids is None:
            assert self._seq is not None
            self._prompt_token_ids = self._seq.token_ids[: self._seq.num_prompt_tokens]
        return self._prompt_token_ids

    @property
    def token_ids(self) -> list[int]:
        """Every output token so far."""
        if self._token_ids is None:
            assert self._seq is not None
            self._token_ids = self._seq.token_ids[self._seq.num_prompt_tokens : self._end]
        return self._token_ids

    @property
    def new_token_ids(self) -> list[int]:
        """The output tokens this step added."""
        if self._new_token_ids is None:
            assert self._seq is not None
            self._new_token_ids = self._seq.token_ids[self._new_start : self._end]
        return self._new_token_ids

    @property
    def stop_reason(self) -> int | str | None:
        """The stop string or (user-given) stop token id that ended the request; None otherwise (EOS, length, abort,
        a request still running, or an output built by hand)."""
        seq = self._seq
        if seq is None or self.finish_reason != "stop" or not self.finished:
            return None
        if seq.stop_reason is not None:
            return seq.stop_reason
        last = seq.token_ids[self._end - 1] if self._end > seq.num_prompt_tokens else None
        return last if last is not None and last in seq.params.stop_token_ids else None

    @property
    def outputs(self) -> list[CompletionOutput]:
        """vLLM's view of this output: one ``CompletionOutput`` (text and tokens generated so far), so code written
        for ``vllm.LLM`` reads ``output.outputs[0].text`` unchanged."""
        logprobs, token_ids = self.logprobs, self.token_ids
        cumulative = sum(lp for lp, _ in logprobs) if logprobs is not None else None
        ranks = self._seq.logprob_ranks[: len(logprobs)] if self._seq is not None and logprobs is not None else None
        shaped = vllm_logprobs(token_ids, logprobs, self._token_text, ranks) if logprobs is not None else None
        return [CompletionOutput(index=0, text=self.text, token_ids=token_ids, cumulative_logprob=cumulative,
                                 logprobs=shaped, finish_reason=self.finish_reason, stop_reason=self.stop_reason)]

    @property
    def num_cached_tokens(self) -> int:
        """Prompt tokens served from the prefix cache (vLLM's ``RequestOutput.num_cached_tokens``)."""
        return self.metrics.num_cached_tokens

    @property
    def num_new_tokens(self) -> int:
        return len(self.new_token_ids) if self._seq is None else self._end - self._new_start

    @property
    def metrics(self) -> RequestMetrics:
        if self._metrics is None:
            seq = self._seq
            assert seq is not None
            self._metrics = RequestMetrics(
                arrival_time=seq.arrival_time, num_prompt_tokens=seq.num_prompt_tokens,
                first_scheduled_time=seq.first_scheduled_time, first_token_time=seq.first_token_time,
                last_token_time=self._last_token_time, finished_time=seq.finished_time if self.finished else None,
                num_cached_tokens=seq.num_cached_tokens, num_generation_tokens=self._end - seq.num_prompt_tokens,
                num_preemptions=self._num_preemptions,
            )
        return self._metrics

    def __repr__(self) -> str:
        return (
            f"RequestOutput(request_id={self.request_id!r}, text={self.text!r}, token_ids={self.token_ids!r}, "
            f"new_text={self.new_text!r}, finished={self.finished}, finish_reason={self.finish_reason!r}, "
            f"error={self.error!r})"
        )


@dataclass(slots=True)
class EngineStats:
    """A snapshot for dashboards; counters are monotonic, under vLLM's metric names in comments."""

    num_running: int  # vllm:num_requests_running
    num_waiting: int  # vllm:num_requests_waiting
    kv_cache_usage: float  # vllm:kv_cache_usage_perc (a fraction, 0..1)
    num_preemptions: int  # vllm:num_preemptions
    prefix_cache_queries: int  # vllm:prefix_cache_queries (tokens)
    prefix_cache_hits: int  # vllm:prefix_cache_hits (tokens)
    prompt_tokens: int  # vllm:prompt_tokens
    generation_tokens: int  # vllm:generation_tokens
    num_steps: int
    last_step_num_tokens: int  # vllm:iteration_tokens_total observes this per step
    num_blocks: int
    block_size: int
    requests_finished: dict[str, int] = field(default_factory=dict)  # vllm:request_success by finished_reason
    # guided tokens drawn before their mask (accelkit_structured_first_draws by result): the grammar allowed them, or
    # refused them (drawn again from the masked logits)
    first_draws_allowed: int = 0
    first_draws_refused: int = 0
    # steps that ran something (accelkit_engine_step_seconds observes last_step_seconds after each): their wall time in
    # all, and the engine thread's CPU time in them (accelkit_engine_step_cpu_seconds) — on a CPU engine the difference
    # is time the engine thread could not run: the interpreter lock held by another thread, or no core free
    step_seconds: float = 0.0
    step_cpu_seconds: float = 0.0
    # the engine thread's time in those steps waiting for structured-output masks filled beside the forward
    # (accelkit_structured_mask_wait_seconds): part of the time it did not run
    mask_wait_seconds: float = 0.0
    last_step_seconds: float = 0.0
