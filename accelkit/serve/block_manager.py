"""Ref-counted fixed-size KV blocks with prefix caching (pure Python).

A block holds the K/V of ``block_size`` consecutive tokens of a sequence. Blocks are shared by
reference count: with prefix caching, a *full* block whose tokens are computed is registered under a
chained hash — SHA-256 of (the previous block's hash, its token ids) — so a later sequence whose prefix
has the same tokens reuses it instead of recomputing it. Only full, computed blocks are ever shared,
so a shared block is never written again. The hash is cryptographic, as vLLM's is since a report that its
builtin ``hash()`` let crafted prompts collide: Python's hash of a tuple of ints is the same in every process,
so a client could search offline for a prompt whose chain meets another's, and be served K/V computed from
someone else's prefix (the check of the block's own tokens cannot see a difference in the blocks before it).

Freed blocks go to an LRU free list: registered (hashed) blocks at the back, keeping their contents so
that a later request can still hit them; unregistered ones at the front, reused first. Taking a free
block for new tokens evicts the least recently freed one and drops its hash.

A block is registered only once computed, so two requests with the same prompt admitted together would
each compute it (the ``n`` choices of one prompt; a burst of requests behind one system prompt). The
hashes of the prompt blocks a running request is still computing are therefore counted as *in flight*
(:meth:`BlockManager.is_in_flight`): the scheduler holds back a request whose next block is one of them,
and admits it when that block is registered — a cache hit.
"""

from __future__ import annotations

import hashlib
from array import array
from collections import OrderedDict

from accelkit.serve.sequence import Sequence

_ROOT_HASH = hashlib.sha256(b"accelkit prefix cache").digest()  # parent hash of a sequence's first block


class Block:
    __slots__ = ("block_hash", "block_id", "ref_count", "token_ids")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_count = 0
        self.block_hash: bytes | None = None  # set while registered in the prefix cache
        self.token_ids: tuple[int, ...] | None = None  # the tokens behind block_hash (guards against collisions)


class BlockManager:
    """Owns the ``num_blocks`` KV blocks; the scheduler asks it for room and hands finished sequences back."""

    def __init__(self, *, num_blocks: int, block_size: int, enable_prefix_caching: bool = True) -> None:
        if num_blocks < 1:
            raise ValueError(f"num_blocks={num_blocks} must be >= 1")
        if block_size < 1:
            raise ValueError(f"block_size={block_size} must be >= 1")
        self.num_blocks = num_blocks
        self.block_size = block_size
        self.enable_prefix_caching = enable_prefix_caching
        self.blocks = [Block(i) for i in range(num_blocks)]
        self.free_block_ids: OrderedDict[int, None] = OrderedDict.fromkeys(range(num_blocks))  # front = evict first
        self.cached_block_ids: dict[bytes, int] = {}  # block hash → block id
        self.num_evictions = 0
        # prompt blocks running sequences will register once computed: hash → how many; seq_id → the range
        # [first, end) of its block indices still counted
        self._in_flight: dict[bytes, int] = {}
        self._in_flight_of: dict[int, tuple[int, int]] = {}

    # ---- queries -----------------------------------------------------------------------------------
    @property
    def num_free_blocks(self) -> int:
        """Blocks no sequence holds (cached-but-unused ones count as free: they are evictable)."""
        return len(self.free_block_ids)

    @property
    def usage(self) -> float:
        """Fraction of blocks held by sequences — ``vllm:kv_cache_usage_perc``."""
        return 1.0 - self.num_free_blocks / self.num_blocks

    def blocks_for(self, num_tokens: int) -> int:
        return -(-num_tokens // self.block_size)

    def _block_hashes(self, seq: Sequence, num_blocks: int) -> list[bytes]:
        """Chained hashes of the first ``num_blocks`` full blocks of ``seq`` (memoised on the sequence): SHA-256 of the
        parent's digest and the block's token ids as 64-bit integers."""
        hashes, bs = seq.block_hashes, self.block_size
        while len(hashes) < num_blocks:
            i = len(hashes)
            if hashes:
                parent = hashes[-1]
            else:  # (a salted request's chain starts elsewhere: it meets only its own salt's)
                salt = seq.params.cache_salt
                parent = _ROOT_HASH if salt is None else hashlib.sha256(
                    _ROOT_HASH + b"salt" + salt.encode("utf-8", "surrogatepass")).digest()
            block = array("q", seq.token_ids[i * bs : (i + 1) * bs]).tobytes()
            hashes.append(hashlib.sha256(parent + block).digest())
        return hashes[:num_blocks]

    def _num_candidates(self, seq: Sequence) -> int:
        """Full blocks a sequence could take from the cache: all but the one holding its last token, whose
        logits a step samples from."""
        return (seq.num_tokens - 1) // self.block_size

    def is_in_flight(self, seq: Sequence, num_cached_blocks: int) -> bool:
        """True when the block after ``seq``'s first ``num_cached_blocks`` is one a running sequence is computing
        now: admitted once that one registers it, ``seq`` takes it from the cache instead of computing it too.
        Never for a sequence that computes its prompt whatever the cache holds (prompt logprobs): it would wait
        for nothing, and hold up every request queued behind it."""
        if not self._in_flight or seq.needs_prompt_logprobs or num_cached_blocks >= self._num_candidates(seq):
            return False
        return self._block_hashes(seq, num_cached_blocks + 1)[num_cached_blocks] in self._in_flight

    def _count_in_flight(self, seq: Sequence, first: int, end: int, step: int) -> None:
        if first >= end:
            return
        for block_hash in self._block_hashes(seq, end)[first:end]:
            count = self._in_flight.get(block_hash, 0) + step
            if count:
                self._in_flight[block_hash] = count
            else:
                del self._in_flight[block_hash]

    def find_cached_prefix(self, seq: Sequence) -> list[int]:
        """Block ids holding the longest cached prefix of ``seq`` (no side effects).

        At most ``num_tokens - 1`` tokens are taken from the cache: the last token is always computed,
        because its logits are what the step samples from. None for a sequence whose prompt logprobs are still
        to compute: a cached token has no logits.
        """
        if not self.enable_prefix_caching or seq.needs_prompt_logprobs:
            return []
        bs = self.block_size
        num_candidates = self._num_candidates(seq)
        found: list[int] = []
        for i, block_hash in enumerate(self._block_hashes(seq, num_candidates)):
            block_id = self.cached_block_ids.get(block_hash)
            if block_id is None or self.blocks[block_id].token_ids != tuple(seq.token_ids[i * bs : (i + 1) * bs]):
                break
            found.append(block_id)
        return found

    # ---- allocation --------------------------------------------------------------------------------
    def allocate(self, seq: Sequence, cached_block_ids: list[int], num_tokens: int) -> bool:
        """Give a sequence without blocks the cached prefix blocks plus fresh blocks up to ``num_tokens``.

        All or nothing: returns False (changing nothing) when there is not enough room.
        """
        assert not seq.block_table, f"{seq} already holds blocks"
        num_new = self.blocks_for(num_tokens) - len(cached_block_ids)
        num_cached_free = sum(1 for b in cached_block_ids if self.blocks[b].ref_count == 0)
        if num_new > self.num_free_blocks - num_cached_free:
            return False
        for block_id in cached_block_ids:
            block = self.blocks[block_id]
            if block.ref_count == 0:
                del self.free_block_ids[block_id]
            block.ref_count += 1
            seq.block_table.append(block_id)
        seq.num_hashed_blocks = len(cached_block_ids)
        for _ in range(max(num_new, 0)):
            seq.block_table.append(self._take_free_block())
        if self.enable_prefix_caching:
            span = (len(cached_block_ids), self._num_candidates(seq))
            self._count_in_flight(seq, *span, +1)
            self._in_flight_of[seq.seq_id] = span
        return True

    def append_slots(self, seq: Sequence, num_new_tokens: int) -> bool:
        """Grow a running sequence's table to hold ``num_new_tokens`` more computed tokens; False if full."""
        num_new = self.blocks_for(seq.num_computed_tokens + num_new_tokens) - len(seq.block_table)
        if num_new > self.num_free_blocks:
            return False
        for _ in range(num_new):
            seq.block_table.append(self._take_free_block())
        return True

    def _take_free_block(self) -> int:
        block_id, _ = self.free_block_ids.popitem(last=False)
        block = self.blocks[block_id]
        if block.ref_count != 0:
            raise RuntimeError(f"block {block_id} is on the free list with ref_count {block.ref_count}")
        if block.block_hash is not None:  # evict its cached contents
            if self.cached_block_ids.get(block.block_hash) == block_id:
                del self.cached_block_ids[block.block_hash]
            block.block_hash = block.token_ids = None
            self.num_evictions += 1
        block.ref_count = 1
        return block_id

    def free(self, seq: Sequence) -> None:
        """Drop a sequence's references (finish, abort or preemption). Tail blocks are evicted first."""
        for block_id in reversed(seq.block_table):
            block = self.blocks[block_id]
            if block.ref_count <= 0:
                raise RuntimeError(f"double free of block {block_id} by {seq}")
            block.ref_count -= 1
            if block.ref_count == 0:
                self.free_block_ids[block_id] = None
                if block.block_hash is None:
                    self.free_block_ids.move_to_end(block_id, last=False)
        seq.block_table.clear()
        seq.num_hashed_blocks = 0
        span = self._in_flight_of.pop(seq.seq_id, None)
        if span is not None:
            self._count_in_flight(seq, *span, -1)

    def cache_full_blocks(self, seq: Sequence) -> None:
        """Register the blocks of ``seq`` that became full and computed, so later prefixes can hit them."""
        if not self.enable_prefix_caching:
            return
        num_full = min(seq.num_computed_tokens // self.block_size, len(seq.block_table))
        if num_full <= seq.num_hashed_blocks:
            return
        bs = self.block_size
        hashes = self._block_hashes(seq, num_full)
        for i in range(seq.num_hashed_blocks, num_full):
            block = self.blocks[seq.block_table[i]]
            if block.block_hash is None and hashes[i] not in self.cached_block_ids:
                block.block_hash = hashes[i]
                block.token_ids = tuple(seq.token_ids[i * bs : (i + 1) * bs])
                self.cached_block_ids[hashes[i]] = block.block_id
            # else: same content already cached in another block — this copy stays private
        seq.num_hashed_blocks = num_full
        span = self._in_flight_of.get(seq.seq_id)
        if span is not None and span[0] < num_full:  # registered now: no longer in flight
            first, end = span
            self._count_in_flight(seq, first, min(num_full, end), -1)
            self._in_flight_of[seq.seq_id] = (min(num_full, end), end)

    def check_invariants(self, live: list[Sequence]) -> None:
        """Raise AssertionError when bookkeeping is inconsistent (tests call this after every operation)."""
        refs = [0] * self.num_blocks
        for seq in live:
            assert len(set(seq.block_table)) == len(seq.block_table), f"{seq} holds a block twice"
            for block_id in seq.block_table:
                refs[block_id] += 1
        for block in self.blocks:
            assert block.ref_count == refs[block.block_id], f"block {block.block_id}: {block.ref_count} != {refs[block.block_id]}"
            assert (block.ref_count == 0) == (block.block_id in self.free_block_ids), f"block {block.block_id} free list"
        for block_hash, block_id in self.cached_block_ids.items():
            assert self.blocks[block_id].block_hash == block_hash, f"hash map points at block {block_id} wrongly"
        expected: dict[bytes, int] = {}
        for seq in live:
            first, end = self._in_flight_of.get(seq.seq_id, (0, 0))
            for block_hash in seq.block_hashes[first:end]:
                expected[block_hash] = expected.get(block_hash, 0) + 1
        assert self._in_flight == expected, f"in-flight prefix blocks {self._in_flight} != {expected}"
        assert set(self._in_flight_of) <= {s.seq_id for s in live}, "in-flight blocks of a sequence no longer live"
