"""Block manager: ref counts, prefix hits, LRU eviction — and no leak or double free under random use."""

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from accelkit.serve.block_manager import BlockManager
from accelkit.serve.sampling import SamplingParams
from accelkit.serve.sequence import Sequence

PARAMS = SamplingParams.greedy(4)


def seq_of(tokens, rid="r"):
    return Sequence(rid, list(tokens), PARAMS)


def compute(bm, seq, num_tokens):
    """What the scheduler does around a step: room, compute, register full blocks."""
    assert bm.append_slots(seq, num_tokens)
    seq.num_computed_tokens += num_tokens
    bm.cache_full_blocks(seq)


def test_allocate_and_free_return_every_block():
    bm = BlockManager(num_blocks=8, block_size=4)
    seq = seq_of(range(10))
    assert bm.allocate(seq, [], 10)
    assert len(seq.block_table) == 3 and bm.num_free_blocks == 5
    bm.check_invariants([seq])
    bm.free(seq)
    assert bm.num_free_blocks == 8 and bm.usage == 0.0
    bm.check_invariants([])


def test_allocation_is_all_or_nothing():
    bm = BlockManager(num_blocks=2, block_size=4)
    seq = seq_of(range(12))
    assert not bm.allocate(seq, [], 12)
    assert seq.block_table == [] and bm.num_free_blocks == 2


def test_double_free_is_detected():
    bm = BlockManager(num_blocks=4, block_size=4)
    seq = seq_of(range(4))
    bm.allocate(seq, [], 4)
    table = list(seq.block_table)
    bm.free(seq)
    seq.block_table = table
    with pytest.raises(RuntimeError, match="double free"):
        bm.free(seq)


def test_prefix_hit_shares_full_computed_blocks_only():
    bm = BlockManager(num_blocks=16, block_size=4)
    a = seq_of([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], "a")
    assert bm.find_cached_prefix(a) == []
    bm.allocate(a, [], 0)
    compute(bm, a, 10)  # blocks [1-4] [5-8] full and registered, [9 10] partial
    b = seq_of([1, 2, 3, 4, 5, 6, 7, 8, 99], "b")
    hit = bm.find_cached_prefix(b)
    assert hit == a.block_table[:2]
    assert bm.allocate(b, hit, 9)
    assert bm.blocks[hit[0]].ref_count == 2
    bm.check_invariants([a, b])
    # a prompt that is entirely cached still recomputes its last token (its logits are needed)
    c = seq_of([1, 2, 3, 4, 5, 6, 7, 8], "c")
    assert bm.find_cached_prefix(c) == a.block_table[:1]
    # diverging first block: no hit
    assert bm.find_cached_prefix(seq_of([0, 2, 3, 4, 5, 6, 7, 8, 9])) == []


def test_uncomputed_blocks_are_never_hit():
    bm = BlockManager(num_blocks=8, block_size=4)
    a = seq_of(range(9), "a")
    bm.allocate(a, [], 9)  # room only; nothing computed yet
    bm.cache_full_blocks(a)
    assert bm.find_cached_prefix(seq_of(range(9), "b")) == []


def test_freed_cached_blocks_are_reused_then_evicted_lru():
    bm = BlockManager(num_blocks=4, block_size=2)
    a = seq_of([1, 2, 3, 4, 5], "a")
    bm.allocate(a, [], 0)
    compute(bm, a, 5)
    bm.free(a)
    assert bm.num_free_blocks == 4 and bm.usage == 0.0
    # still cached after free: a new request with the same prefix hits it
    b = seq_of([1, 2, 3, 4, 7], "b")
    assert len(bm.find_cached_prefix(b)) == 2
    # a request that needs every block evicts them; after that the prefix is gone
    big = seq_of(range(100, 108), "big")
    assert bm.allocate(big, [], 8)
    assert bm.find_cached_prefix(b) == [] and bm.num_evictions == 2
    bm.check_invariants([big])


def test_prefix_cache_off_never_hits():
    bm = BlockManager(num_blocks=8, block_size=2, enable_prefix_caching=False)
    a = seq_of([1, 2, 3, 4, 5], "a")
    bm.allocate(a, [], 0)
    compute(bm, a, 5)
    assert bm.find_cached_prefix(seq_of([1, 2, 3, 4, 5], "b")) == []


class BlockManagerMachine(RuleBasedStateMachine):
    """Random interleavings of allocate / grow / compute / free with shared prefixes."""

    def __init__(self):
        super().__init__()
        self.bm = BlockManager(num_blocks=12, block_size=4)
        self.live: list[Sequence] = []
        self.n = 0

    @rule(prefix=st.sampled_from([(), (1, 2, 3, 4), (1, 2, 3, 4, 5, 6, 7, 8)]),
          tail=st.lists(st.integers(0, 3), min_size=1, max_size=12))
    def add(self, prefix, tail):
        seq = seq_of([*prefix, *tail], f"s{self.n}")
        self.n += 1
        hit = self.bm.find_cached_prefix(seq)
        if self.bm.allocate(seq, hit, len(hit) * 4 + 1):
            seq.num_computed_tokens = len(hit) * 4
            self.live.append(seq)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 100), k=st.integers(1, 6))
    def compute(self, i, k):
        seq = self.live[i % len(self.live)]
        k = min(k, seq.num_uncomputed_tokens)
        if k and self.bm.append_slots(seq, k):
            seq.num_computed_tokens += k
            self.bm.cache_full_blocks(seq)
            if seq.num_uncomputed_tokens == 0:
                seq.append_token(7)

    @precondition(lambda self: self.live)
    @rule(i=st.integers(0, 100))
    def free(self, i):
        self.bm.free(self.live.pop(i % len(self.live)))

    @invariant()
    def consistent(self):
        self.bm.check_invariants(self.live)
        for seq in self.live:
            # a block shared between sequences is full, computed and registered
            for j, block_id in enumerate(seq.block_table):
                if self.bm.blocks[block_id].ref_count > 1:
                    assert self.bm.blocks[block_id].block_hash is not None
                    assert (j + 1) * 4 <= seq.num_computed_tokens

    def teardown(self):
        for seq in self.live:
            self.bm.free(seq)
        assert self.bm.num_free_blocks == self.bm.num_blocks


TestBlockManagerMachine = BlockManagerMachine.TestCase
TestBlockManagerMachine.settings = settings(
    max_examples=150, stateful_step_count=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def test_block_hashes_are_a_sha256_chain_over_the_whole_prefix():
    """A block is found by the hash of its prefix; the check of its own tokens cannot see a difference in the blocks
    before it. With Python's hash() — the same in every process for ints — a client could search offline for a
    prompt whose chain meets another's and be served K/V computed from someone else's prefix (vLLM moved to SHA-256
    for that report). The chain is SHA-256 of the parent's digest and the block's ids as 64-bit integers."""
    import hashlib
    from array import array

    from accelkit.serve import block_manager

    bm = BlockManager(num_blocks=8, block_size=2)
    first = hashlib.sha256(block_manager._ROOT_HASH + array("q", [1, 2]).tobytes()).digest()
    second = hashlib.sha256(first + array("q", [3, 4]).tobytes()).digest()
    assert bm._block_hashes(seq_of([1, 2, 3, 4, 5]), 2) == [first, second]
