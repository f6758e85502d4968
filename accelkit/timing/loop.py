"""The timing loop every measurement in accelkit goes through (docs/methodology.md, "Warm-up and stopping").

Warm-up runs on the exact measured shapes until both a minimum count and a minimum time have passed;
the steady state runs until ``iterations >= min_iterations`` and ``elapsed >= min_time_s`` (or a hard
``max_iterations``). On CPU each iteration is timed with ``perf_counter_ns``; on CUDA with a pair of
device events per iteration, recorded on the current stream of the measured device (``cuda:N`` is honoured, not
the current device), and a single synchronize of that device at the end of a block, so timing adds no host
stalls inside a block.

Two ways to run the steady state, both built from the same :func:`time_block`:

- :func:`time_loop` — one function, one block that ends when the stopping rule is met (the probe);
- :func:`interleaved_blocks` — several functions (variants) in rounds of blocks, A B A B …, each block
  long enough to be timed well and short enough that slow drifts (thermal, other tenants) hit every
  variant alike. Counters that need a synchronize (memory, energy) are read once per block.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from accelkit.core.spec import Spec, spec_field

#: every measured iteration keeps its time (a Python float in a list, ~32 bytes): 10 million are ~320 MB per lane, and
#: more than a loop asks for in practice (a loop of 10 million 1 µs steps already runs 10 s). Bounds the counts.
MAX_ITERATIONS = 10_000_000
#: a loop phase of more than a day is a typo (and an infinite one never ends)
MAX_TIME_S = 86_400.0
#: interleaved rounds fill ``min_time_s`` in about this many blocks per variant
TARGET_BLOCKS = 10


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopConfig(Spec):
    """Warm-up and stopping rule for one timed loop."""

    warmup_iterations: int = spec_field(10, min=0, max=MAX_ITERATIONS, doc="Minimum warm-up iterations (discarded).")
    warmup_time_s: float = spec_field(2.0, min=0.0, max=MAX_TIME_S, doc="Minimum warm-up wall time in seconds.")
    min_iterations: int = spec_field(10, min=1, max=MAX_ITERATIONS, doc="Measure at least this many iterations …")
    min_time_s: float = spec_field(10.0, min=0.0, max=MAX_TIME_S, doc="… and for at least this long (seconds).")
    max_iterations: int | None = spec_field(
        None, min=1, max=MAX_ITERATIONS, doc="Hard cap on measured iterations; None = none.")

    @classmethod
    def quick(cls) -> LoopConfig:
        """Short loops for smoke runs (``--quick``); percentiles will be flagged as unbacked."""
        return cls(warmup_iterations=3, warmup_time_s=0.2, min_iterations=5, min_time_s=1.0)


@dataclass(frozen=True, slots=True)
class LoopResult:
    """Per-iteration seconds of the steady state, plus the warm-up it took."""

    samples_s: list[float]
    warmup_iterations: int
    warmup_s: float
    timer: str


@dataclass(frozen=True, slots=True)
class Block:
    """One timed block: per-iteration seconds and the host wall time of the whole block (after its sync)."""

    samples_s: list[float]
    wall_s: float


def timer_name(device: str) -> str:
    return "cuda events" if device.startswith("cuda") else "perf_counter_ns"


def _cuda_sync_fn(device: str) -> Callable[[], None] | None:
    """A synchronize of ``device`` itself (``cuda:1`` waits for cuda:1, not the current device), or None on CPU."""
    if not device.startswith("cuda"):
        return None
    import torch

    target = torch.device(device)
    return lambda: torch.cuda.synchronize(target)


def _cuda_stream(device: str) -> Any:
    """The current stream of ``device``: the events of a block are recorded there, where its kernels run."""
    import torch

    return torch.cuda.current_stream(torch.device(device))


def warm_up(fn: Callable[[], object], config: LoopConfig, *, device: str = "cpu") -> tuple[int, float]:
    """Run ``fn`` until both warm-up thresholds are met; returns (iterations, seconds)."""
    sync = _cuda_sync_fn(device)
    start = time.perf_counter()
    warm = 0
    while warm < config.warmup_iterations or time.perf_counter() - start < config.warmup_time_s:
        fn()
        warm += 1
        if sync is not None and warm % 8 == 0:
            sync()  # keep the host from running far ahead of the device during warm-up
    if sync is not None:
        sync()
    return warm, time.perf_counter() - start


def time_block(
    fn: Callable[[], object], *, device: str = "cpu", iterations: int | None = None, until: LoopConfig | None = None,
    max_s: float | None = None,
) -> Block:
    """Time ``iterations`` calls of ``fn`` (or until ``until``'s stopping rule holds) as one block. ``max_s`` also
    ends a block of ``iterations`` once it has run that long (host clock; at least one call is timed)."""
    if (iterations is None) == (until is None):
        raise ValueError("time_block needs exactly one of iterations= or until=")

    def done(count: int, elapsed_s: float) -> bool:
        if iterations is not None:
            return count >= iterations or (max_s is not None and elapsed_s >= max_s)
        return _done(count, elapsed_s, until)  # type: ignore[arg-type]

    sync = _cuda_sync_fn(device)
    if sync is None:
        samples: list[float] = []
        start_ns = time.perf_counter_ns()
        while True:
            t0 = time.perf_counter_ns()
            fn()
            t1 = time.perf_counter_ns()
            samples.append((t1 - t0) * 1e-9)
            if done(len(samples), (t1 - start_ns) * 1e-9):
                return Block(samples, (time.perf_counter_ns() - start_ns) * 1e-9)

    import torch

    stream = _cuda_stream(device)
    events: list[tuple[Any, Any]] = []
    host_start = time.perf_counter()
    while True:
        begin = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
        begin.record(stream)
        fn()
        end.record(stream)
        events.append((begin, end))
        # the host's clock only decides when to stop issuing work; the samples come from the events
        if done(len(events), time.perf_counter() - host_start):
            break
    sync()  # the one synchronize of the block
    wall_s = time.perf_counter() - host_start
    return Block([b.elapsed_time(e) * 1e-3 for b, e in events], wall_s)


def time_loop(fn: Callable[[], object], config: LoopConfig, *, device: str = "cpu") -> LoopResult:
    """Run ``fn`` through warm-up and steady state; return the raw per-iteration times."""
    warm, warmup_s = warm_up(fn, config, device=device)
    block = time_block(fn, device=device, until=config)
    return LoopResult(block.samples_s, warm, warmup_s, timer_name(device))


def block_iterations(config: LoopConfig, seconds_per_iteration: float, *, target_blocks: int = TARGET_BLOCKS) -> int:
    """Iterations per block so that about ``target_blocks`` rounds fill ``min_time_s`` (at least 1, at most
    ``MAX_ITERATIONS`` and ``max_iterations / target_blocks`` rounded up: the cap, too, is spread over about
    ``target_blocks`` blocks, a pair per round to compare). The estimate can be far off (a warm-up of no iterations
    measures nothing), so an interleaved block also ends by time: :func:`block_time_limit`."""
    by_time = config.min_time_s / target_blocks / max(seconds_per_iteration, 1e-9)
    by_count = config.min_iterations / target_blocks
    n = min(max(1, math.ceil(max(by_time, by_count))), MAX_ITERATIONS)
    return n if config.max_iterations is None else min(n, math.ceil(config.max_iterations / target_blocks))


def block_time_limit(config: LoopConfig, *, target_blocks: int = TARGET_BLOCKS) -> float | None:
    """The longest an interleaved block runs: twice its target of ``min_time_s / target_blocks``, so that a block
    sized from a per-iteration estimate that is too low by any factor still ends, and the rounds still pair
    (``--warmup 0`` once sized a 0.5 s run as one block of 15,000 iterations that took 38 s). None when
    ``min_time_s`` is 0 (blocks are then sized by count alone, with no time to overshoot)."""
    return 2 * config.min_time_s / target_blocks if config.min_time_s > 0 else None


def capped_iterations(config: LoopConfig, n: int, *, done: int) -> int:
    """A block of ``n`` calls cut to what ``max_iterations`` leaves after ``done`` (so the last block stops at the
    cap; 0 once it is reached)."""
    return n if config.max_iterations is None else min(n, config.max_iterations - done)


def lane_done(count: int, measured_s: float, config: LoopConfig) -> bool:
    """The stopping rule for one variant of an interleaved run."""
    return _done(count, measured_s, config)


def interleaved_blocks(
    fns: Sequence[Callable[[], object]],
    config: LoopConfig,
    *,
    device: str = "cpu",
    iterations: Sequence[int],
    before: Callable[[int], None] | None = None,
    on_error: Callable[[int, Exception], None] | None = None,
) -> Iterator[tuple[int, Block]]:
    """Rounds of blocks over ``fns`` (A B A B …) until every one meets the stopping rule; yields
    ``(index, block)`` after each block. A lane's first block is ``iterations[index]`` calls (sized from its
    warm-up), each later one sized by :func:`block_iterations` from that lane's measured blocks so far (with a
    ``min_time_s``; a block is ended early by :func:`block_time_limit`). A function that met ``min_iterations`` and ``min_time_s`` stays in the rounds
    while others still run (more pairs to compare); one that reached ``max_iterations`` leaves them — its
    last block cut to the count remaining — so the cap holds for every function, not only the slowest.
    ``before(index)`` runs just before a block (start counters);
    the consumer reads them when the block is yielded (the block has synchronized by then).
    ``on_error(index, exc)``: a function that raises is reported there and dropped from the rounds, the
    others go on (without it the exception propagates). It is called outside the ``except`` block, with the
    exception's traceback dropped and this loop's reference to the function gone: the traceback's frames held what
    the function held (a bench variant's model), which the callback may want to free."""
    counts = [0] * len(fns)
    measured = [0.0] * len(fns)
    sizes = list(iterations)
    dropped: set[int] = set()
    max_s = block_time_limit(config)

    def finished(i: int) -> bool:
        return i in dropped or lane_done(counts[i], measured[i], config)

    while not all(finished(i) for i in range(len(fns))):
        for i in range(len(fns)):  # (not enumerate: its reused result tuple kept the last function alive)
            n = capped_iterations(config, sizes[i], done=counts[i])
            if i in dropped or n <= 0:
                continue
            fn = fns[i]
            if before is not None:
                before(i)
            error: Exception | None = None
            try:
                block = time_block(fn, device=device, iterations=n, max_s=max_s)
            except Exception as exc:
                if on_error is None:
                    raise
                error = exc.with_traceback(None)
            if error is not None and on_error is not None:
                dropped.add(i)
                del fn
                on_error(i, error)
                continue
            counts[i] += len(block.samples_s)
            measured[i] += block.wall_s
            if config.min_time_s > 0 and counts[i]:
                # the next block is sized from this lane's measured blocks, not its warm-up: one stalled warm-up
                # call (--warmup 1, or a --warmup 0 first call that compiled) sized a 0.1 ms step's blocks at one
                # call, the lane needed thousands of rounds to fill --min-time, and every other lane ran a full
                # block each round meanwhile (--min-time 0.2 measured its sibling for 2.5 s). Without a
                # --min-time, blocks are sized by count alone and no estimate enters.
                sizes[i] = block_iterations(config, measured[i] / counts[i])
            yield i, block


def _done(count: int, elapsed_s: float, config: LoopConfig) -> bool:
    if config.max_iterations is not None and count >= config.max_iterations:
        return True
    return count >= config.min_iterations and elapsed_s >= config.min_time_s
