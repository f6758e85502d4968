"""The timing loop: warm-up thresholds, the stopping rule, interleaved rounds (pure Python callables)."""

from accelkit.timing import LoopConfig, block_iterations, interleaved_blocks, time_block, time_loop, warm_up


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
    assert block_iterations(LoopConfig(min_iterations=10, min_time_s=1.0, max_iterations=4), 0.001) == 4


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
