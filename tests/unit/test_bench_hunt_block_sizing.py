"""Interleaved blocks are re-sized from what each lane measured, not only from its warm-up: one stalled warm-up call
(`--warmup 1`, or a `--warmup 0` first call that compiled) sized a fast step's blocks at one call each, so that lane
needed hundreds of rounds to fill --min-time while every sibling ran a whole block each round — `bench custom
--precision fp32,bf16 --warmup 1 --warmup-time 0 --min-time 0.2` measured bf16 for 2.5 s."""

import time

from accelkit.timing import LoopConfig, interleaved_blocks


def test_a_lane_sized_from_a_stalled_warm_up_catches_up():
    calls = [0, 0]

    def step(i: int):
        def fn():
            calls[i] += 1
            time.sleep(0.001)
        return fn

    loop = LoopConfig(min_iterations=1, min_time_s=0.1)  # blocks of about 10 ms: ten 1 ms calls
    # lane 0's warm-up said a call takes ~0.1 s (one block of 1 call); lane 1's was right (10 calls)
    blocks = list(interleaved_blocks([step(0), step(1)], loop, iterations=[1, 10]))
    measured = [sum(b.wall_s for i, b in blocks if i == lane) for lane in (0, 1)]
    assert measured[0] >= 0.1 and measured[1] >= 0.1  # both met --min-time
    # the sibling was not kept running for ~100 rounds of lane 0's one-call blocks (≥ 1,000 calls, ≥ 1 s)
    assert calls[1] < 400, calls
    assert max(len(b.samples_s) for i, b in blocks if i == 0) > 1  # lane 0's blocks grew from what it measured
