"""The bench timing loop (``accelkit.timing``) run by every rank at once.

A distributed step contains collectives, so every rank must run exactly as many iterations as the others
— a rank that stops early leaves the rest waiting in an all-reduce forever. Each rank therefore times
blocks of a fixed count with the single-device helpers (``warm_up``, ``time_block``), and after each
block the ranks agree (all-reduce MAX) on the elapsed time of the slowest rank; the stopping rule is
then evaluated on the same numbers everywhere. The agreement is a collective outside the timed blocks.

Block sizes come from agreed numbers only (:func:`next_block_iterations`), so they are the same on every rank.
Unlike the single-process rounds, a block cannot also end by time: each rank would stop on its own clock, at its
own count. Instead every block is re-sized from the slowest rank's measured time per iteration so far, which
bounds how far a wrong estimate can carry: with no warm-up iterations the first block is a single call.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from accelkit.timing import LoopConfig, block_iterations, capped_iterations, lane_done, time_block, warm_up


def agree_max(values: list[float], device: str) -> list[float]:
    """Element-wise maximum of ``values`` over all ranks (one all-reduce)."""
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return [float(v) for v in t.tolist()]


@dataclass(slots=True)
class AgreedRun:
    """One rank's view of a timed run: its own per-iteration samples, and the slowest rank's block walls."""

    warmup_iterations: int = 0
    warmup_s: float = 0.0  # slowest rank
    samples_s: list[float] = field(default_factory=list)  # this rank's
    block_walls_s: list[float] = field(default_factory=list)  # this rank's
    agreed_walls_s: list[float] = field(default_factory=list)  # max over ranks, block by block

    @property
    def measured_s(self) -> float:
        return sum(self.agreed_walls_s)


def agreed_warm_up(fn: Callable[[], object], loop: LoopConfig, *, device: str, run: AgreedRun) -> None:
    """Warm up until ``warmup_iterations`` and ``warmup_time_s`` hold on the slowest rank."""
    sync_device = "cpu" if not device.startswith("cuda") else device
    chunk = max(1, loop.warmup_iterations)
    local_s = 0.0
    while run.warmup_iterations < loop.warmup_iterations or run.warmup_s < loop.warmup_time_s:
        n, s = warm_up(fn, LoopConfig(warmup_iterations=chunk, warmup_time_s=0.0), device=device)
        run.warmup_iterations += n
        local_s += s
        run.warmup_s = agree_max([local_s], sync_device)[0]
        per_iteration = run.warmup_s / run.warmup_iterations
        # the next chunk fills the remaining warm-up time (computed from agreed numbers: same on every rank)
        chunk = max(1, math.ceil((loop.warmup_time_s - run.warmup_s) / max(per_iteration, 1e-9)))


def next_block_iterations(loop: LoopConfig, run: AgreedRun) -> int:
    """Calls in the next block, from agreed numbers only (the same on every rank; every rank has run the same
    count). Sized by :func:`block_iterations` from the slowest rank's time per iteration: its measured blocks so
    far, else its warm-up; with neither (no warm-up iterations) the block is one call, whose time is then the
    estimate — a warm-up of nothing once estimated 0 s per call and sized a block of 10 million. Cut to what
    ``max_iterations`` leaves, so the last block stops at the cap."""
    done = len(run.samples_s)
    if done:
        n = block_iterations(loop, run.measured_s / done)
    elif run.warmup_iterations:
        n = block_iterations(loop, run.warmup_s / run.warmup_iterations)
    else:
        n = 1
    return capped_iterations(loop, n, done=done)


def agreed_steady_state(fn: Callable[[], object], loop: LoopConfig, *, device: str, run: AgreedRun,
                        on_block: Callable[[AgreedRun], None] | None = None) -> None:
    """Blocks of the same count on every rank until the stopping rule holds for the slowest rank."""
    sync_device = "cpu" if not device.startswith("cuda") else device
    while not lane_done(len(run.samples_s), run.measured_s, loop):
        block = time_block(fn, device=device, iterations=next_block_iterations(loop, run))
        run.samples_s.extend(block.samples_s)
        run.block_walls_s.append(block.wall_s)
        run.agreed_walls_s.append(agree_max([block.wall_s], sync_device)[0])
        if on_block is not None:
            on_block(run)


def agreed_loop(fn: Callable[[], object], loop: LoopConfig, *, device: str) -> AgreedRun:
    """Warm-up then steady state, both agreed across ranks."""
    run = AgreedRun()
    agreed_warm_up(fn, loop, device=device, run=run)
    agreed_steady_state(fn, loop, device=device, run=run)
    return run
