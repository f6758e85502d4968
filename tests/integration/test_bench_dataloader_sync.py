"""`bench dataloader --step-time` with num_workers=0: the batch is loaded in the training process between steps, so
its load time is added to every step whatever the step time; the verdict says so instead of "not input-bound"."""

from __future__ import annotations

import re

import pytest

STEP_S = 1.0  # far longer than a batch (2 samples × ≥5 ms): the overlapped comparison would say "not input-bound"


def test_synchronous_loading_says_what_it_adds_to_every_step() -> None:
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    workload = make_workload("dataloader", {"dataset": "tests.integration.slow_dataset:make", "batch_size": 2,
                                            "num_workers": [0], "step_time_s": STEP_S})
    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=5, min_time_s=0, max_iterations=5)
    run = run_benchmark(workload, [], BenchConfig(device="cpu", loop=loop, save=False))
    (entry,) = run.variants
    bound = entry.input_bound
    assert bound is not None and bound.batch_time_s >= 0.01, bound
    assert "not input-bound" not in bound.verdict and bound.verdict.startswith("synchronous (num_workers=0)")
    assert bound.headroom is None  # nothing overlaps the load: no headroom to speak of
    added = re.search(r"adds ([\d.]+) ms to every step \((\d+)% of step \+ load\)", bound.verdict)
    assert added is not None, bound.verdict
    assert float(added.group(1)) == pytest.approx(bound.batch_time_s * 1e3, rel=1e-2)
    assert int(added.group(2)) == round(100 * bound.batch_time_s / (STEP_S + bound.batch_time_s))


def test_workers_still_compare_the_batch_time_with_the_step() -> None:
    from accelkit.bench.workloads import make_workload

    workload = make_workload("dataloader", {"num_workers": [0, 2], "step_time_s": 0.01})
    two = next(v for v in workload.variants([]) if v.settings["num_workers"] == 2)
    assert workload.input_bound(0.002, two) == {"step_time_s": 0.01, "batch_time_s": 0.002,
                                                "headroom": pytest.approx(5.0), "verdict": "not input-bound"}
    assert workload.input_bound(0.02, two)["verdict"].startswith("input-bound")  # type: ignore[index]
    zero = next(v for v in workload.variants([]) if v.settings["num_workers"] == 0)
    assert workload.input_bound(0.002, zero)["verdict"] == (  # type: ignore[index]
        "synchronous (num_workers=0): loading adds 2 ms to every step (17% of step + load); "
        "workers would overlap it with the step")
