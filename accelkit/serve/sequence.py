"""One request's tokens and bookkeeping as the scheduler and block manager see it (pure Python)."""

from __future__ import annotations

import enum
import itertools
from typing import Any

from accelkit.serve.sampling import SamplingParams

_seq_counter = itertools.count()


class SequenceStatus(enum.Enum):
    WAITING = "waiting"  # queued, or preempted: holds no KV blocks
    RUNNING = "running"  # admitted: holds KV blocks for its computed tokens
    FINISHED = "finished"


class Sequence:
    """Prompt + generated tokens, the KV blocks that hold them, and how many of them are computed.

    ``num_computed_tokens`` counts tokens whose K/V are in the cache. A step schedules
    ``num_tokens - num_computed_tokens`` of them (all of a prompt, a chunk of it, or the one new token of a
    decode) — prefill, chunked prefill, decode and recompute after preemption are the same arithmetic.

    ``token_ids`` only ever grows by appends (a preemption keeps it; only the KV is recomputed): outputs
    snapshot a request by remembering its length instead of copying it (``outputs.py``).
    """

    __slots__ = (
        "arrival_order", "arrival_time", "bad_words_ids", "block_hashes", "block_table", "defer_token",
        "finish_reason", "finished_time", "first_scheduled_time", "first_token_time", "guide", "last_token_time",
        "logprob_ranks", "logprobs", "max_num_tokens", "num_cached_tokens", "num_computed_tokens", "num_hashed_blocks",
        "num_preemptions", "num_prompt_tokens", "order_key", "params", "priority", "prompt", "prompt_logprob_ranks",
        "prompt_logprobs", "request_id", "sampling_extras", "seq_id", "sleeping_guide", "status", "stop_reason",
        "stop_token_ids", "token_ids", "wake_token",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: list[int],
        params: SamplingParams,
        *,
        prompt: str | None = None,
        priority: int = 0,
        arrival_time: float = 0.0,
    ) -> None:
        if params.n != 1:  # (else the engine would run one choice and silently drop the rest)
            raise ValueError(f"n={params.n}: an engine request makes one output; LLM.generate/LLM.chat and the server "
                             "take n (one request per choice), or add n requests with n=1 (seeds seed, seed + 1, ...)")
        self.seq_id = next(_seq_counter)
        self.request_id = request_id
        self.prompt = prompt
        self.token_ids: list[int] = list(prompt_token_ids)
        self.num_prompt_tokens = len(prompt_token_ids)
        self.params = params
        self.priority = priority
        self.arrival_order = self.seq_id  # FCFS tie-breaker
        self.arrival_time = arrival_time
        self.status = SequenceStatus.WAITING
        self.block_table: list[int] = []
        self.block_hashes: list[bytes] = []  # chained hash of each full block of token_ids (prefix caching)
        self.num_hashed_blocks = 0  # leading blocks of block_table already registered in the prefix cache
        self.num_computed_tokens = 0
        self.num_cached_tokens = 0  # prompt tokens served from the prefix cache at first admission
        self.num_preemptions = 0
        self.finish_reason: str | None = None  # "stop" | "length" | "abort"
        # the stop string that ended it (set by the output processor); a stop token is read off the last token
        self.stop_reason: str | None = None
        self.first_scheduled_time: float | None = None
        self.first_token_time: float | None = None
        self.last_token_time: float | None = None
        self.finished_time: float | None = None
        # the stop conditions as one set lookup and one length compare per sampled token; the scheduler
        # folds in the EOS ids and the context limit when the sequence is added
        self.stop_token_ids: frozenset[int] = frozenset(params.stop_token_ids)
        # params.bad_words as token id sequences (the engine tokenizes them when it makes the request)
        self.bad_words_ids: tuple[tuple[int, ...], ...] = ()
        # (the scheduler caps it at the context limit when the sequence is added; max_tokens=None: only that)
        self.max_num_tokens = self.num_prompt_tokens + params.max_tokens if params.max_tokens is not None else 2**62
        self.order_key: tuple[int, int] = (0, self.arrival_order)  # the scheduler's order (set by its policy)
        # read by the runner every step: a batch where no row has it samples exactly as without these features
        self.sampling_extras = params.needs_processing
        # with params.structured_outputs: its ``structured.RequestGuide`` (a matcher of the compiled grammar), set by
        # the engine when it accepts the request; the sampler masks this sequence's logits with it
        self.guide: object | None = None
        # with params.structured_outputs_after_token_id: the guide sleeps here (the sequence samples unguided) until
        # the output's first ``wake_token``, when ``wake_guide`` makes it ``guide`` (-1: none; one compare per token)
        self.sleeping_guide: object | None = None
        self.wake_token = -1
        # with params.structured_outputs_deferred_by_token_id, until the first output token: that token, which puts
        # the guide to sleep if it comes first (``first_token``); -1 once the first token is out, or without it
        self.defer_token = -1
        # with params.logprobs: one (logprob of the sampled token, [(id, logprob) of the most likely]) per output
        # token, appended by the runner when it reads the sampled ids (grows by appends only, like token_ids)
        self.logprobs: list[tuple[float, list[tuple[int, float]]]] | None = (
            [] if params.logprobs is not None else None
        )
        # beside logprobs, entry by entry: each sampled token's rank in the vocabulary (1 = the most likely; vLLM's
        # Logprob.rank: 1 + the tokens strictly more likely), empty without params.logprobs
        self.logprob_ranks: list[int] = []
        # with params.prompt_logprobs: one entry per prompt token, the first None (nothing precedes it); the runner
        # appends the rest as the prompt's chunks are computed (a recompute after preemption adds none twice)
        self.prompt_logprobs: list[tuple[float, list[tuple[int, float]]] | None] | None = (
            [None] if params.prompt_logprobs is not None else None
        )
        # beside prompt_logprobs, entry by entry: each prompt token's rank in the vocabulary (1 = the most likely)
        self.prompt_logprob_ranks: list[int | None] | None = [None] if params.prompt_logprobs is not None else None

    def __repr__(self) -> str:
        return (
            f"Sequence({self.request_id!r}, tokens={self.num_tokens}, computed={self.num_computed_tokens}, "
            f"blocks={self.block_table}, {self.status.value})"
        )

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)

    @property
    def num_output_tokens(self) -> int:
        return len(self.token_ids) - self.num_prompt_tokens

    @property
    def output_token_ids(self) -> list[int]:
        return self.token_ids[self.num_prompt_tokens :]

    @property
    def num_uncomputed_tokens(self) -> int:
        return len(self.token_ids) - self.num_computed_tokens

    @property
    def needs_prompt_logprobs(self) -> bool:
        """Prompt logprobs were asked for and some are still to compute: its prompt cannot come from the prefix cache."""
        return self.prompt_logprobs is not None and len(self.prompt_logprobs) < self.num_prompt_tokens

    @property
    def is_decoding(self) -> bool:
        """Only the newest token lacks K/V: a one-token step that samples the next one."""
        return self.num_computed_tokens > 0 and self.num_uncomputed_tokens == 1

    @property
    def is_finished(self) -> bool:
        return self.status is SequenceStatus.FINISHED

    def wake_guide(self) -> None:
        """The output's tokens from here on follow the guide (its grammar starts after the tokens so far)."""
        guide: Any = self.sleeping_guide
        guide.start_after(self.num_output_tokens)
        self.guide, self.sleeping_guide, self.wake_token = guide, None, -1

    def first_token(self, token_id: int) -> None:
        """The first output token, with ``defer_token`` set: that token puts the guide to sleep until
        structured_outputs_after_token_id (a hybrid reasoning model opened ``<think>``); any other leaves it on."""
        if token_id == self.defer_token:
            after = self.params.structured_outputs_after_token_id
            assert after is not None  # (SamplingParams: deferred_by needs it)
            self.sleeping_guide, self.guide, self.wake_token = self.guide, None, after
        self.defer_token = -1

    def append_token(self, token_id: int) -> None:
        self.token_ids.append(token_id)
