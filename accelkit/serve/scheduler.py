"""Iteration-level scheduler: which sequences run in the next step, and how many tokens each (pure Python).

Every step has a token budget (``max_num_batched_tokens``) and a seat limit (``max_num_seqs``):

1. running sequences first — decodes (one token each), then unfinished (chunked) prefills; when a
   sequence needs a block and none is free, the lowest-priority running sequence not yet scheduled in
   this step is *preempted by recompute*: its blocks are freed and it waits again with
   ``num_computed_tokens = 0`` (its full blocks stay in the prefix cache, so the recompute may be cheap);
2. then waiting sequences in FCFS (or priority) order (``waiting_queue``: a deque, or a heap), each
   starting after its longest cached prefix, as long as budget, seats and blocks allow (none are admitted
   in a step that had to preempt).

``update`` then advances the computed counts, registers newly full blocks in the prefix cache and
appends the sampled tokens; ``finish`` frees a sequence (stop, length or abort) at any time.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Literal

from accelkit.core.spec import Spec, spec_field
from accelkit.serve.block_manager import BlockManager
from accelkit.serve.sequence import Sequence, SequenceStatus
from accelkit.serve.waiting_queue import WaitingQueue, make_waiting_queue


@dataclass(frozen=True, slots=True, kw_only=True)
class SchedulerConfig(Spec):
    """Limits of one scheduling step."""

    max_num_seqs: int = spec_field(256, min=1, doc="Most sequences in one step (decodes + prefills).")
    max_num_batched_tokens: int = spec_field(2048, min=1, doc="Token budget of one step (1 per decode + prefill chunks).")
    max_model_len: int = spec_field(2048, min=2, doc="Context length: prompt + output tokens of one sequence.")
    enable_chunked_prefill: bool = spec_field(True, doc="Split long prompts across steps to fit the token budget.")
    policy: Literal["fcfs", "priority"] = spec_field("fcfs", doc="Order of waiting requests; priority: lower value first, then FCFS.")

    def validate(self) -> None:
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise ValueError(
                f"max_num_batched_tokens={self.max_num_batched_tokens} is below max_model_len={self.max_model_len}; "
                "without chunked prefill a whole prompt must fit one step — raise it or enable_chunked_prefill"
            )


@dataclass(slots=True)
class ScheduledBatch:
    """What one step runs: ``seqs[i]`` computes ``num_tokens[i]`` tokens starting at its computed count."""

    seqs: list[Sequence] = field(default_factory=list)
    num_tokens: list[int] = field(default_factory=list)
    num_preempted: int = 0

    @property
    def total_tokens(self) -> int:
        return sum(self.num_tokens)

    def __len__(self) -> int:
        return len(self.seqs)


@dataclass(slots=True)
class SchedulerCounters:
    """Monotonic counters behind vLLM's metrics of the same names."""

    num_preemptions: int = 0
    prefix_cache_queries: int = 0  # prompt tokens looked up in the prefix cache
    prefix_cache_hits: int = 0  # of those, tokens found


class Scheduler:
    def __init__(
        self, config: SchedulerConfig, block_manager: BlockManager, *, eos_token_ids: frozenset[int] = frozenset()
    ) -> None:
        self.config = config
        self.block_manager = block_manager
        self.eos_token_ids = eos_token_ids
        self.waiting: WaitingQueue = make_waiting_queue(config.policy)  # in order_key order
        self.running: list[Sequence] = []  # kept sorted by order_key: decodes-first is then a stable partition
        self.counters = SchedulerCounters()
        self._by_request: dict[str, Sequence] = {}

    # ---- queue -------------------------------------------------------------------------------------
    def add(self, seq: Sequence) -> None:
        if seq.request_id in self._by_request:
            raise ValueError(f"request_id={seq.request_id!r} is already in use")
        self._by_request[seq.request_id] = seq
        seq.status = SequenceStatus.WAITING
        params = seq.params
        seq.order_key = (seq.priority if self.config.policy == "priority" else 0, seq.arrival_order)
        seq.stop_token_ids = frozenset(params.stop_token_ids) | (frozenset() if params.ignore_eos else self.eos_token_ids)
        limit = self.config.max_model_len
        seq.max_num_tokens = limit if params.max_tokens is None else min(seq.num_prompt_tokens + params.max_tokens, limit)
        self.waiting.push(seq)

    def get(self, request_id: str) -> Sequence | None:
        return self._by_request.get(request_id)

    def has_unfinished(self) -> bool:
        return bool(self.waiting or self.running)

    # ---- one step ----------------------------------------------------------------------------------
    def schedule(self) -> ScheduledBatch:
        batch = ScheduledBatch()
        budget, preempted = self._schedule_running(batch, self.config.max_num_batched_tokens)
        if not preempted:  # a step that had to preempt admits nobody
            self._admit_waiting(batch, budget)
        return batch

    def _schedule_running(self, batch: ScheduledBatch, budget: int) -> tuple[int, bool]:
        """1. running: decodes first, then unfinished prefills, each group in scheduling order (``running`` is kept
        in that order, so this is a stable partition rather than a sort). Returns the budget left and whether a
        sequence had to be preempted."""
        cfg, bm = self.config, self.block_manager
        scheduled: set[int] = set()
        preempted: set[int] = set()
        decodes: list[Sequence] = []
        prefills: list[Sequence] = []
        for s in self.running:  # is_decoding, inlined: this loop sees every running sequence every step
            (decodes if s.num_computed_tokens and len(s.token_ids) - s.num_computed_tokens == 1 else prefills).append(s)
        order = decodes + prefills
        if decodes and len(decodes) <= budget and self._grow_decodes(decodes):
            # the common step: every decode fits (one token each, at most one new block each, enough free
            # blocks for all), so none can trigger a preemption — the per-sequence loop below would admit
            # them all in this order and take the same blocks
            batch.seqs.extend(decodes)
            batch.num_tokens.extend([1] * len(decodes))
            scheduled.update(s.seq_id for s in decodes)
            budget -= len(decodes)
            order = order[len(decodes) :]
        for seq in order:
            if budget == 0:
                break
            if seq.seq_id in preempted:
                continue
            num_new = seq.num_uncomputed_tokens
            if num_new > budget:
                if not cfg.enable_chunked_prefill:
                    continue
                num_new = budget
            while not bm.append_slots(seq, num_new):
                # the last in scheduling order (under priority: the lowest priority, the newest of it), even one
                # this step already scheduled — it gives its tokens back — as vLLM's scheduler takes it; choosing
                # only among the unscheduled made a high-priority prefill preempt itself while lower-priority
                # decodes went on (found in review)
                victim = max((s for s in self.running if s.seq_id not in preempted), key=_order_key)
                if victim.seq_id in scheduled:
                    budget += _unschedule(batch, victim)
                    scheduled.discard(victim.seq_id)
                self._preempt(victim)
                preempted.add(victim.seq_id)
                batch.num_preempted += 1
                if victim is seq:
                    break
            if seq.seq_id in preempted:
                continue
            batch.seqs.append(seq)
            batch.num_tokens.append(num_new)
            scheduled.add(seq.seq_id)
            budget -= num_new
        return budget, bool(preempted)

    def _admit_waiting(self, batch: ScheduledBatch, budget: int) -> None:
        """2. waiting, in queue order, each starting after its longest cached prefix, while budget, seats and
        blocks allow."""
        cfg, bm = self.config, self.block_manager
        while self.waiting and budget > 0 and len(self.running) < cfg.max_num_seqs:
            seq = self.waiting.peek()
            cached = bm.find_cached_prefix(seq)
            if bm.is_in_flight(seq, len(cached)):
                break  # a running request computes its next block now: next step that block is a cache hit
            num_cached = len(cached) * bm.block_size
            num_new = seq.num_tokens - num_cached
            if num_new > budget:
                if not cfg.enable_chunked_prefill:
                    break
                num_new = budget
            if not bm.allocate(seq, cached, num_cached + num_new):
                break
            self.waiting.pop()
            if seq.num_preemptions == 0:
                # (a request that looks the cache up for the first time: one that does not — prompt logprobs — or
                # that comes back after a preemption is no query, as vLLM counts them; re-admissions inflated the
                # hit rate)
                if not seq.needs_prompt_logprobs:
                    self.counters.prefix_cache_queries += seq.num_tokens
                    self.counters.prefix_cache_hits += num_cached
                seq.num_cached_tokens = num_cached
            seq.num_computed_tokens = num_cached
            seq.status = SequenceStatus.RUNNING
            bisect.insort(self.running, seq, key=_order_key)
            batch.seqs.append(seq)
            batch.num_tokens.append(num_new)
            budget -= num_new

    def _grow_decodes(self, decodes: list[Sequence]) -> bool:
        """Give each decoding sequence whose blocks are full its next block, if there are enough free blocks
        for all of them; False (changing nothing) otherwise."""
        bm = self.block_manager
        bs = bm.block_size
        # a decode computes one token at slot num_computed_tokens; it needs a block when that slot is past
        # its table (the table covers its computed tokens, so it is then exactly one block short)
        full = [s for s in decodes if s.num_computed_tokens >= len(s.block_table) * bs]
        if len(full) > bm.num_free_blocks:
            return False
        for seq in full:
            bm.append_slots(seq, 1)
        return True

    def _preempt(self, seq: Sequence) -> None:
        self.block_manager.free(seq)
        self.running.remove(seq)
        seq.num_computed_tokens = 0
        seq.num_preemptions += 1
        seq.status = SequenceStatus.WAITING
        self.counters.num_preemptions += 1
        self.waiting.push(seq)

    def update(self, batch: ScheduledBatch, sampled: list[int | None]) -> list[Sequence]:
        """Account for a finished step; ``sampled[i]`` is the new token of ``batch.seqs[i]`` (None for a
        prefill chunk that did not reach the end of its prompt). Returns the sequences that got a token,
        already finished when a length or token-id stop condition was met."""
        bm = self.block_manager
        caching, bs = bm.enable_prefix_caching, bm.block_size
        finished = SequenceStatus.FINISHED
        got_token = []
        for seq, num_tokens, token_id in zip(batch.seqs, batch.num_tokens, sampled, strict=True):
            if seq.status is finished:  # aborted while the step ran
                continue
            computed = seq.num_computed_tokens = seq.num_computed_tokens + num_tokens
            if caching and computed >= (seq.num_hashed_blocks + 1) * bs:  # a block became full: register it
                bm.cache_full_blocks(seq)
            if token_id is None:
                continue
            seq.token_ids.append(token_id)
            got_token.append(seq)
            if token_id == seq.wake_token:  # (a reasoning model's </think>: its structured output starts now)
                seq.wake_guide()
            elif seq.defer_token >= 0:  # (its first token: a hybrid model's <think> defers its structured output)
                seq.first_token(token_id)
            if token_id in seq.stop_token_ids:
                self.finish(seq, "stop")
            elif len(seq.token_ids) >= seq.max_num_tokens:
                self.finish(seq, "length")
        return got_token

    def finish(self, seq: Sequence, reason: str) -> None:
        """End a sequence for ``reason`` (stop, length, abort) wherever it is; its blocks go back."""
        if seq.is_finished:
            return
        if seq.status is SequenceStatus.RUNNING:
            self.block_manager.free(seq)
            self.running.remove(seq)
        else:
            self.waiting.remove(seq)
        seq.status = SequenceStatus.FINISHED
        seq.finish_reason = reason
        del self._by_request[seq.request_id]

    def abort(self, request_id: str) -> Sequence | None:
        """Abort a request at any point; returns its sequence, or None if unknown or already finished."""
        seq = self._by_request.get(request_id)
        if seq is not None:
            self.finish(seq, "abort")
        return seq


def _order_key(seq: Sequence) -> tuple[int, int]:
    return seq.order_key


def _unschedule(batch: ScheduledBatch, seq: Sequence) -> int:
    """Take ``seq`` out of ``batch`` (it is being preempted): the tokens it had been given, back to the budget."""
    at = next(i for i, s in enumerate(batch.seqs) if s is seq)
    del batch.seqs[at]
    return batch.num_tokens.pop(at)
