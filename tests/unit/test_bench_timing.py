"""The timing loop: warm-up thresholds, the stopping rule, interleaved rounds (pure Python callables)."""

from accelkit.timing import LoopConfig, block_iterations, interleaved_blocks, time_block, time_loop, warm_up
from accelkit.timing.loop import MAX_ITERATIONS


def test_warm_up_meets_both_thresholds():
    calls = []
    n, seconds = warm_up(lambda: calls.append(1), LoopConfig(warmup_iterations=7, warmup_time_s=0.0))
    assert n == 7 == len(calls) and seconds >= 0


def test_time_block_by_count_and_by_rule():
    assert len(time_block(lambda: None, iterations=5).samples_s) == 5
    block = time_block(lambda: None, until=LoopConfig(min_iterations=3, min_time_s=0.01))
    assert len(block.samples_s) >= 3 and block.wall_s >= 0.01


def test_time_loop_keeps_raw_samples_and_timer():
    result = time_loop(lambda: None, LoopConfig(warmup_iterations=2, warmup_time_s=0, min_iterations=4, min_time_s=0))
    assert result.timer == "perf_counter_ns" and len(result.samples_s) == 4 and result.warmup_iterations == 2


def test_max_iterations_caps():
    result = time_loop(lambda: None, LoopConfig(warmup_iterations=0, warmup_time_s=0, min_iterations=100,
                                                min_time_s=100, max_iterations=3))
    assert len(result.samples_s) == 3


def test_interleaved_rounds_alternate_until_every_lane_is_done():
    order = []
    loop = LoopConfig(min_iterations=6, min_time_s=0.0)
    blocks = list(interleaved_blocks([lambda: order.append("a"), lambda: order.append("b")], loop,
                                     iterations=[2, 3], before=lambda i: order.append(f"start{i}")))
    assert [i for i, _ in blocks][:4] == [0, 1, 0, 1]  # A B A B …
    assert order[:4] == ["start0", "a", "a", "start1"]
    per_lane = {0: 0, 1: 0}
    for i, block in blocks:
        per_lane[i] += len(block.samples_s)
    assert per_lane[0] >= 6 and per_lane[1] >= 6
    assert len([i for i, _ in blocks if i == 0]) == len([i for i, _ in blocks if i == 1])  # whole rounds


def test_block_iterations_target_about_ten_rounds():
    loop = LoopConfig(min_iterations=10, min_time_s=1.0)
    assert block_iterations(loop, 0.01) == 10  # 0.1 s blocks
    assert block_iterations(loop, 5.0) == 1  # never zero
    assert block_iterations(LoopConfig(min_iterations=10, min_time_s=1.0, max_iterations=40), 0.001) == 4  # a tenth of the cap
    assert block_iterations(LoopConfig(min_iterations=10, min_time_s=1.0, max_iterations=4), 0.001) == 1
    assert block_iterations(LoopConfig(min_iterations=1, min_time_s=0.5), 0.0) == MAX_ITERATIONS  # was 50 million


def test_a_block_sized_from_a_far_too_low_estimate_still_ends_by_time():
    """--warmup 0 gave a per-iteration estimate of ~3 µs, and a 0.5 s run became one block of 15,000 calls that
    took 38 s. A block now also ends at twice its target time (here 2 × 0.05 s / 10 = 10 ms of 1 ms calls)."""
    import time

    calls = [0]

    def step():
        calls[0] += 1
        time.sleep(0.001)

    # 30 calls in blocks that end at 10 ms (≤ 10 calls of ≥ 1 ms): ≥ 3 blocks, however long one stall lasts
    loop = LoopConfig(min_iterations=30, min_time_s=0.05)
    blocks = list(interleaved_blocks([step], loop, iterations=[2000]))  # the estimate asked for 2,000 calls a block
    assert len(blocks) >= 2 and calls[0] < 500  # rounds that fill --min-time, not one block of 2,000


def test_interrupt_inside_a_finalizer_is_kept_off_stderr(monkeypatch):
    """Ctrl-C that lands in a __del__ is swallowed by Python; the flag still says so, and it never reaches
    the unraisable hook (which would print Python's "Exception ignored in" traceback)."""
    import os
    import signal
    import sys
    import time
    from types import SimpleNamespace

    from accelkit.bench.runner import _catch_sigint

    reached: list[type] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda info: reached.append(info.exc_type))
    session = SimpleNamespace(interrupt_requested=False)
    restore = _catch_sigint(session)  # type: ignore[arg-type]
    try:
        class Finalizer:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(0.2)  # the handler runs here, inside __del__

        Finalizer()  # collected at once (refcount): __del__ runs now
    finally:
        restore()
    assert session.interrupt_requested
    assert reached == []


def test_a_lane_that_raises_is_dropped_and_the_others_go_on():
    calls = {"ok": 0, "bad": 0}

    def bad():
        calls["bad"] += 1
        if calls["bad"] > 3:
            raise RuntimeError("Bias must be BFloat16 or Half, but got Float")

    errors = []
    loop = LoopConfig(min_iterations=8, min_time_s=0.0)
    blocks = list(interleaved_blocks([lambda: calls.__setitem__("ok", calls["ok"] + 1), bad], loop, iterations=[2, 2],
                                     on_error=lambda i, exc: errors.append((i, str(exc)))))
    assert errors == [(1, "Bias must be BFloat16 or Half, but got Float")]
    assert sum(len(b.samples_s) for i, b in blocks if i == 0) >= 8  # the healthy lane met the rule


def test_cuda_timing_uses_the_named_device_not_the_current_one(monkeypatch):
    """`--device cuda:1`: events are recorded on cuda:1's stream and cuda:1 is synchronized (fakes stand in
    for torch.cuda, so this runs without a GPU; tests/gpu checks it for real)."""
    torch = __import__("pytest").importorskip("torch")
    log = []

    class FakeStream:
        def __init__(self, device):
            self.device = device

    class FakeEvent:
        def __init__(self, enable_timing=False):
            self.stream = None

        def record(self, stream=None):
            log.append(("record", None if stream is None else str(stream.device)))

        def elapsed_time(self, other):
            return 1.0

    monkeypatch.setattr(torch.cuda, "Event", FakeEvent)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: FakeStream(device))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: log.append(("sync", str(device))))
    block = time_block(lambda: None, device="cuda:1", iterations=3)
    assert block.samples_s == [1e-3] * 3
    assert log.count(("record", "cuda:1")) == 6 and ("sync", "cuda:1") in log
    assert all(entry[1] == "cuda:1" for entry in log), log
    log.clear()
    warm_up(lambda: None, LoopConfig(warmup_iterations=8, warmup_time_s=0.0), device="cuda:1")
    assert log and all(entry == ("sync", "cuda:1") for entry in log)


def test_max_iterations_is_a_hard_cap_for_every_interleaved_lane():
    """The rounds went on timing a lane already at --max-iterations while a slower one was not done, and added
    whole blocks past the cap: max_iterations 20 measured [200, 10]. A lane at its cap leaves the rounds, its
    last block cut to the count remaining."""
    calls = [0, 0]
    loop = LoopConfig(min_iterations=100, min_time_s=0.0, max_iterations=20)  # only the cap ends a lane
    fns = [lambda: calls.__setitem__(0, calls[0] + 1), lambda: calls.__setitem__(1, calls[1] + 1)]
    blocks = list(interleaved_blocks(fns, loop, iterations=[7, 1]))
    assert calls == [20, 20]  # not [140, 20]: lane 0 was not timed again once at 20
    assert [len(b.samples_s) for i, b in blocks if i == 0] == [7, 7, 6]  # its last block cut to the cap
    assert [i for i, _ in blocks[:6]] == [0, 1, 0, 1, 0, 1] and [i for i, _ in blocks[6:]] == [1] * 17
