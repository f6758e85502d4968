"""The timing loop every measurement goes through (warm-up, stopping rule, device events on CUDA).

It sits below ``hardware`` (the probe) and ``bench`` (the runner), which both time with it.
"""

from accelkit.timing.loop import (
    Block,
    LoopConfig,
    LoopResult,
    block_iterations,
    capped_iterations,
    interleaved_blocks,
    lane_done,
    time_block,
    time_loop,
    timer_name,
    warm_up,
)

__all__ = [
    "Block",
    "LoopConfig",
    "LoopResult",
    "block_iterations",
    "capped_iterations",
    "interleaved_blocks",
    "lane_done",
    "time_block",
    "time_loop",
    "timer_name",
    "warm_up",
]
