"""A sweep point whose bench Ctrl-C stopped before its variant finished is not run, not "ok" with nothing: the
bench keeps what finished and returns an interrupted document, which for a one-variant point holds nothing, and
``run_point`` counted it as a finished point with no results (a distributed point already raised)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")


class CountingLinear(torch.nn.Module):
    """A real Linear that counts its calls, and calls ``on_call(n)`` before the n-th computes."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)
        self.calls = 0

    def on_call(self, n: int) -> None:
        pass

    def forward(self, x):
        self.calls += 1
        self.on_call(self.calls)
        return self.linear(x)


class InterruptedOnItsFifthCall(CountingLinear):
    """Its fifth call raises KeyboardInterrupt, as Ctrl-C does in the middle of a measurement."""

    def on_call(self, n: int) -> None:
        if n == 5:
            raise KeyboardInterrupt


def make_interrupted():
    torch.manual_seed(0)
    return InterruptedOnItsFifthCall(), torch.randn(2, 8)


def test_a_bench_point_stopped_before_its_variant_finished_raises_the_interrupt(_isolated_home):
    from accelkit.sweep import SweepSpec, run_point

    spec = SweepSpec(name="s", workloads={"custom": {"module": f"{__name__}:make_interrupted"}},
                     loop={"warmup_iterations": 1, "warmup_time_s": 0, "min_iterations": 50, "min_time_s": 0},
                     bench={"device": "cpu", "accuracy": False, "auto_probe": False, "predict": False})
    point = {"index": 0, "kind": "bench", "workload": "custom", "config": spec.workloads["custom"],
             "precision": "fp32", "batch_size": None, "layout": {}, "rate": None}
    with pytest.raises(KeyboardInterrupt):
        run_point(point, spec.to_dict(), "run0")
