"""Scheduler: budgets, decode-first order, chunked prefill, preemption, priority, abort — and, under
thousands of random steps with aborts and preemptions, no leaked or double-freed block and every
request finishing."""

import functools
import random

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from accelkit.serve.block_manager import BlockManager
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.scheduler import Scheduler, SchedulerConfig
from accelkit.serve.sequence import Sequence, SequenceStatus

EOS = 3


def make(num_blocks=64, block_size=4, **cfg):
    cfg = {"max_num_seqs": 8, "max_num_batched_tokens": 32, "max_model_len": 64, **cfg}
    bm = BlockManager(num_blocks=num_blocks, block_size=block_size)
    return Scheduler(SchedulerConfig(**cfg), bm, eos_token_ids=frozenset({EOS}))


def req(rid, n, max_tokens=4, priority=0, first=10, **kw):
    return Sequence(rid, list(range(first, first + n)), SamplingParams.greedy(max_tokens, **kw), priority=priority)


@functools.cache
def greedy(max_tokens, **kwargs):
    """``SamplingParams.greedy``, one frozen instance per distinct argument list (requests share it, as a batch's
    prompts do in ``LLM.generate``): the state machines make thousands of requests, and validating each new
    SamplingParams was a sixth of their run time."""
    return SamplingParams.greedy(max_tokens, **kwargs)


def step(sched, token=5):
    batch = sched.schedule()
    sampled = [token if s.num_computed_tokens + n == s.num_tokens else None for s, n in zip(batch.seqs, batch.num_tokens, strict=True)]
    sched.update(batch, sampled)
    return batch


def test_config_errors_name_the_field():
    import pytest

    with pytest.raises(ValueError, match="max_num_seqs"):
        SchedulerConfig(max_num_seqs=0)
    with pytest.raises(ValueError, match="max_num_batched_tokens"):
        SchedulerConfig(max_num_batched_tokens=16, max_model_len=64, enable_chunked_prefill=False)


def test_decodes_come_first_then_chunked_prefill_fills_the_budget():
    sched = make(max_num_batched_tokens=16)
    sched.add(req("a", 6))
    step(sched)  # a: prefill 6 → decoding
    sched.add(req("b", 40, first=100))
    batch = sched.schedule()
    assert [s.request_id for s in batch.seqs] == ["a", "b"]
    assert batch.num_tokens == [1, 15]  # decode first, then a 15-token chunk of b
    sched.update(batch, [5, None])
    assert sched.get("b").num_computed_tokens == 15 and sched.get("b").num_output_tokens == 0


def test_without_chunking_a_prompt_waits_for_a_whole_budget():
    sched = make(max_num_batched_tokens=64, enable_chunked_prefill=False)
    sched.add(req("a", 40))
    sched.add(req("b", 40))
    batch = sched.schedule()
    assert [s.request_id for s in batch.seqs] == ["a"] and batch.num_tokens == [40]


def test_length_eos_and_stop_token_finish_and_free():
    sched = make()
    sched.add(req("len", 5, max_tokens=1))
    sched.add(req("eos", 5, max_tokens=9, first=20))  # distinct prompts: one step, none held back for the cache
    sched.add(req("ign", 5, max_tokens=2, ignore_eos=True, first=30))
    seqs = {r: sched.get(r) for r in ("len", "eos", "ign")}
    step(sched, token=5)
    step(sched, token=EOS)
    assert seqs["len"].finish_reason == "length"
    assert seqs["eos"].finish_reason == "stop" and seqs["eos"].output_token_ids == [5, EOS]
    assert seqs["ign"].finish_reason == "length"
    assert not sched.has_unfinished() and sched.block_manager.num_free_blocks == 64


def test_preemption_by_recompute_when_blocks_run_out():
    sched = make(num_blocks=6, block_size=4, max_model_len=24)  # 24 tokens of KV in all
    sched.add(req("a", 8, max_tokens=10))
    sched.add(req("b", 8, max_tokens=10, first=50))
    a, b = sched.get("a"), sched.get("b")
    step(sched)
    while a.status is not SequenceStatus.FINISHED:
        step(sched)
        sched.block_manager.check_invariants(sched.running)
    assert sched.counters.num_preemptions >= 1 and b.num_preemptions >= 1  # the later arrival is the victim
    while sched.has_unfinished():
        step(sched)
    assert a.num_output_tokens == 10 and b.num_output_tokens == 10
    assert sched.block_manager.num_free_blocks == 6


def test_priority_policy_admits_and_keeps_the_lower_value():
    sched = make(max_num_seqs=1, policy="priority")
    sched.add(req("low", 4, priority=5))
    sched.add(req("high", 4, priority=-1))
    assert [s.request_id for s in sched.schedule().seqs] == ["high"]


def test_abort_anywhere_frees_blocks():
    sched = make(max_num_batched_tokens=8)
    sched.add(req("run", 20))
    sched.add(req("wait", 20))
    step(sched)  # "run" mid-prefill, holding blocks
    assert sched.abort("run").finish_reason == "abort"
    assert sched.abort("wait").finish_reason == "abort"
    assert sched.abort("unknown") is None
    assert sched.block_manager.num_free_blocks == 64 and not sched.has_unfinished()


def test_prefix_hits_are_counted():
    sched = make()
    sched.add(req("a", 12, max_tokens=1))
    step(sched)
    sched.add(req("b", 12, max_tokens=1))
    batch = sched.schedule()
    assert batch.num_tokens == [4]  # 8 of 12 prompt tokens (two full blocks) came from the cache
    assert sched.counters.prefix_cache_hits == 8 and sched.counters.prefix_cache_queries == 24


class SchedulerMachine(RuleBasedStateMachine):
    """Random arrivals, steps (with random sampled tokens) and aborts against a tight KV budget."""

    def __init__(self):
        super().__init__()
        self.rng = random.Random(0)
        self.sched = None
        self.n = 0
        self.all: list[Sequence] = []

    @rule(num_blocks=st.integers(8, 14), budget=st.integers(1, 40), seats=st.integers(1, 6),
          chunked=st.booleans(), policy=st.sampled_from(["fcfs", "priority"]), caching=st.booleans())
    @precondition(lambda self: self.sched is None)
    def configure(self, num_blocks, budget, seats, chunked, policy, caching):
        bm = BlockManager(num_blocks=num_blocks, block_size=4, enable_prefix_caching=caching)
        cfg = SchedulerConfig(max_num_seqs=seats, max_num_batched_tokens=budget if chunked else max(budget, 32),
                              max_model_len=32, enable_chunked_prefill=chunked, policy=policy)
        self.sched = Scheduler(cfg, bm, eos_token_ids=frozenset({EOS}))

    @precondition(lambda self: self.sched is not None)
    @rule(shared=st.sampled_from([0, 4, 9]), tail=st.integers(1, 16), max_tokens=st.integers(1, 12),
          priority=st.integers(-2, 2))
    def add(self, shared, tail, max_tokens, priority):
        tokens = list(range(100, 100 + shared)) + [self.rng.randrange(4, 9) for _ in range(tail)]
        seq = Sequence(f"r{self.n}", tokens, greedy(max_tokens), priority=priority)
        self.n += 1
        self.all.append(seq)
        self.sched.add(seq)

    @precondition(lambda self: self.sched is not None)
    @rule()
    def step(self):
        cfg = self.sched.config
        batch = self.sched.schedule()
        assert batch.total_tokens <= cfg.max_num_batched_tokens
        assert len(self.sched.running) <= cfg.max_num_seqs
        assert len({s.seq_id for s in batch.seqs}) == len(batch.seqs)
        for seq, n in zip(batch.seqs, batch.num_tokens, strict=True):
            assert seq.status is SequenceStatus.RUNNING and n >= 1
            assert len(seq.block_table) * 4 >= seq.num_computed_tokens + n
        sampled = [self.rng.choice([5, 6, 7, 8, 5, 6, 7, 8, 5, EOS]) if s.num_computed_tokens + n == s.num_tokens else None
                   for s, n in zip(batch.seqs, batch.num_tokens, strict=True)]
        self.sched.update(batch, sampled)

    @precondition(lambda self: self.sched is not None and self.all)
    @rule(i=st.integers(0, 1000))
    def abort(self, i):
        self.sched.abort(self.all[i % len(self.all)].request_id)

    @invariant()
    def consistent(self):
        if self.sched is None:
            return
        self.sched.block_manager.check_invariants(self.sched.running)
        assert all(not s.block_table for s in self.sched.waiting)
        assert all(not s.block_table for s in self.all if s.is_finished)

    def teardown(self):
        if self.sched is None:
            return
        for _ in range(2000):  # liveness: everything finishes without outside help
            if not self.sched.has_unfinished():
                break
            self.step()
        assert not self.sched.has_unfinished()
        for seq in self.all:
            assert seq.finish_reason in ("stop", "length", "abort")
            if seq.finish_reason != "abort":
                assert 1 <= seq.num_output_tokens <= seq.params.max_tokens
        assert self.sched.block_manager.num_free_blocks == self.sched.block_manager.num_blocks


TestSchedulerMachine = SchedulerMachine.TestCase
TestSchedulerMachine.settings = settings(
    max_examples=200, stateful_step_count=60, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


# ---- the fast paths schedule exactly what the plain algorithm does -----------------------------------
class ReferenceScheduler(Scheduler):
    """The plain algorithm the fast paths must reproduce: sort the running sequences every step, grow and
    admit them one at a time, and evaluate every stop condition from the sampling params."""

    def schedule(self):
        cfg, bm = self.config, self.block_manager
        from accelkit.serve.scheduler import ScheduledBatch

        batch = ScheduledBatch()
        budget = cfg.max_num_batched_tokens
        scheduled, preempted = set(), set()

        def order(s):
            return (s.priority if cfg.policy == "priority" else 0, s.arrival_order)

        for seq in sorted(self.running, key=lambda s: (not s.is_decoding, order(s))):
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
                # the last in scheduling order, already scheduled or not (then it gives its tokens back)
                victim = max((s for s in self.running if s.seq_id not in preempted), key=order)
                if victim.seq_id in scheduled:
                    at = batch.seqs.index(victim)
                    batch.seqs.pop(at)
                    budget += batch.num_tokens.pop(at)
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
        while self.waiting and not preempted and budget > 0 and len(self.running) < cfg.max_num_seqs:
            seq = self.waiting.peek()
            cached = bm.find_cached_prefix(seq)
            if bm.is_in_flight(seq, len(cached)):
                break
            num_cached = len(cached) * bm.block_size
            num_new = seq.num_tokens - num_cached
            if num_new > budget:
                if not cfg.enable_chunked_prefill:
                    break
                num_new = budget
            if not bm.allocate(seq, cached, num_cached + num_new):
                break
            self.waiting.pop()
            if seq.num_preemptions == 0:  # (a re-admission is no new query, as vLLM counts them)
                self.counters.prefix_cache_queries += seq.num_tokens
                self.counters.prefix_cache_hits += num_cached
            if seq.num_preemptions == 0:
                seq.num_cached_tokens = num_cached
            seq.num_computed_tokens = num_cached
            seq.status = SequenceStatus.RUNNING
            self.running.append(seq)
            batch.seqs.append(seq)
            batch.num_tokens.append(num_new)
            budget -= num_new
        return batch

    def update(self, batch, sampled):
        got = []
        for seq, n, token in zip(batch.seqs, batch.num_tokens, sampled, strict=True):
            if seq.is_finished:
                continue
            seq.num_computed_tokens += n
            self.block_manager.cache_full_blocks(seq)
            if token is None:
                continue
            seq.append_token(token)
            got.append(seq)
            p = seq.params
            if token in p.stop_token_ids or (not p.ignore_eos and token in self.eos_token_ids):
                self.finish(seq, "stop")
            elif seq.num_output_tokens >= p.max_tokens or seq.num_tokens >= self.config.max_model_len:
                self.finish(seq, "length")
        return got


class FastPathMachine(RuleBasedStateMachine):
    """The scheduler and the reference, fed the same requests, tokens and aborts, make the same steps: the
    same sequences with the same token counts, the same block tables, preemptions and finish reasons."""

    def __init__(self):
        super().__init__()
        self.rng = random.Random(1)
        self.pair = None
        self.n = 0

    @rule(num_blocks=st.integers(6, 40), budget=st.integers(1, 48), seats=st.integers(1, 8), block_size=st.sampled_from([1, 2, 4]),
          chunked=st.booleans(), policy=st.sampled_from(["fcfs", "priority"]), caching=st.booleans())
    @precondition(lambda self: self.pair is None)
    def configure(self, num_blocks, budget, seats, block_size, chunked, policy, caching):
        def build(cls):
            bm = BlockManager(num_blocks=num_blocks, block_size=block_size, enable_prefix_caching=caching)
            cfg = SchedulerConfig(max_num_seqs=seats, max_num_batched_tokens=budget if chunked else max(budget, 32),
                                  max_model_len=32, enable_chunked_prefill=chunked, policy=policy)
            return cls(cfg, bm, eos_token_ids=frozenset({EOS}))

        self.pair = (build(Scheduler), build(ReferenceScheduler))

    @precondition(lambda self: self.pair is not None)
    @rule(tail=st.integers(1, 14), max_tokens=st.integers(1, 20), priority=st.integers(-2, 2), ignore_eos=st.booleans(),
          stop=st.sampled_from([(), (6,)]))
    def add(self, tail, max_tokens, priority, ignore_eos, stop):
        tokens = [100, 101, 102, 103] + [self.rng.randrange(4, 9) for _ in range(tail)]
        params = greedy(max_tokens, ignore_eos=ignore_eos, stop_token_ids=stop)
        for sched in self.pair:
            sched.add(Sequence(f"r{self.n}", tokens, params, priority=priority))
        self.n += 1

    @precondition(lambda self: self.pair is not None)
    @rule()
    def step(self):
        fast, ref = self.pair
        a, b = fast.schedule(), ref.schedule()
        assert [s.request_id for s in a.seqs] == [s.request_id for s in b.seqs]
        assert a.num_tokens == b.num_tokens and a.num_preempted == b.num_preempted
        assert [s.block_table for s in a.seqs] == [s.block_table for s in b.seqs]
        sampled = [self.rng.choice([5, 6, 7, 8, EOS]) if s.num_computed_tokens + n == s.num_tokens else None
                   for s, n in zip(a.seqs, a.num_tokens, strict=True)]
        got_a, got_b = fast.update(a, sampled), ref.update(b, sampled)
        assert [(s.request_id, s.finish_reason, s.token_ids) for s in got_a] == \
               [(s.request_id, s.finish_reason, s.token_ids) for s in got_b]

    @precondition(lambda self: self.pair is not None and self.n > 0)
    @rule(i=st.integers(0, 1000))
    def abort(self, i):
        for sched in self.pair:
            sched.abort(f"r{i % self.n}")

    @invariant()
    def same_state(self):
        if self.pair is None:
            return
        fast, ref = self.pair
        assert sorted(s.request_id for s in fast.running) == sorted(s.request_id for s in ref.running)
        assert [s.request_id for s in fast.waiting] == [s.request_id for s in ref.waiting]
        assert fast.counters == ref.counters
        assert fast.block_manager.num_free_blocks == ref.block_manager.num_free_blocks
        fast.block_manager.check_invariants(fast.running)


TestFastPathMachine = FastPathMachine.TestCase
TestFastPathMachine.settings = settings(
    max_examples=200, stateful_step_count=80, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_a_prompt_admitted_beside_its_twin_waits_one_step_and_hits_the_cache():
    """Blocks register in the prefix cache only once computed, so the n choices of one prompt, admitted in the same
    step, each computed the whole prompt (0 hits of 640 looked up for n=4). The second is now held back while the
    first computes the blocks it would take, and then takes them from the cache."""
    sched = make(num_blocks=64, block_size=4)
    for i in range(3):
        sched.add(req(f"c{i}", 17, max_tokens=3))  # 4 full blocks the later two can share
    first = sched.schedule()
    assert [s.request_id for s in first.seqs] == ["c0"] and first.num_tokens == [17]
    sched.block_manager.check_invariants(sched.running)
    sched.update(first, [5])
    second = sched.schedule()
    assert [s.request_id for s in second.seqs] == ["c0", "c1", "c2"] and second.num_tokens == [1, 1, 1]
    assert sched.counters.prefix_cache_hits == 2 * 16 and sched.get("c1").num_cached_tokens == 16
    sched.block_manager.check_invariants(sched.running)


def test_a_twin_held_back_is_admitted_when_the_request_computing_its_prefix_goes_away():
    """What is in flight stops being so when its sequence is aborted (or preempted) before computing it."""
    sched = make(num_blocks=64, block_size=4, max_num_batched_tokens=8)  # chunked: the prompt takes 3 steps
    sched.add(req("a", 17, max_tokens=3))
    sched.add(req("b", 17, max_tokens=3))
    batch = sched.schedule()
    assert [s.request_id for s in batch.seqs] == ["a"] and batch.num_tokens == [8]
    sched.update(batch, [None])
    sched.abort("a")
    sched.block_manager.check_invariants(sched.running)
    batch = sched.schedule()
    assert [s.request_id for s in batch.seqs] == ["b"] and sched.get("b").num_cached_tokens == 8  # a's 2 blocks
    sched.block_manager.check_invariants(sched.running)


def test_under_priority_a_prefill_preempts_the_lower_priority_decode_not_itself():
    """Decodes are scheduled first, and a victim was chosen among the requests this step had not scheduled yet: a
    high-priority prompt arriving beside a low-priority decode, with too few blocks for both, preempted itself step
    after step while the decode went on (found in review). The victim is now the last in scheduling order whether
    scheduled or not — the low-priority decode, which gives its token back — as vLLM's scheduler picks it. Its
    re-admission is no new prefix-cache query."""
    sched = make(num_blocks=8, block_size=4, max_num_batched_tokens=8, policy="priority", max_model_len=32)
    low = req("low", 12, max_tokens=20, priority=10, ignore_eos=True)
    sched.add(low)
    while low.num_computed_tokens < 16:  # its prompt, then decodes: 4 of the 8 blocks
        step(sched)
    queries = sched.counters.prefix_cache_queries
    high = req("high", 16, max_tokens=4, priority=0, first=40, ignore_eos=True)  # 4 blocks, then a 5th
    sched.add(high)
    for _ in range(12):
        step(sched)
        if high.is_finished:
            break
    assert high.is_finished and high.num_preemptions == 0, (high.num_preemptions, low.num_preemptions)
    assert low.num_preemptions >= 1 and not low.is_finished
    assert sched.counters.prefix_cache_queries == queries + 16  # (high's prompt; low's re-admissions are none)
    sched.block_manager.check_invariants(sched.running)
