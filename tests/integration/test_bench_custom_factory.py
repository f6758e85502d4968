"""`bench custom --module`: what the bench does with the user's factory and its module, in-process on real tiny
models — a factory that returns one module-level model on every call is never changed (counting FLOPs moved it to
the meta device and every variant failed), no second copy of the model is kept alive beside a variant's, and a
module that fails as it is imported is the user's error (exit 2), not an accelkit internal error."""

from __future__ import annotations

import weakref
from typing import ClassVar

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn

torch.manual_seed(0)
#: one model and one input for every call of the factories below (what a notebook-style module does)
SHARED = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 8))
SHARED_X = torch.randn(4, 16)
SHARED_STATE = {k: v.clone() for k, v in SHARED.state_dict().items()}


def shared():
    return SHARED, SHARED_X


def shared_train():
    return SHARED, SHARED_X, lambda out: out.square().mean()


class Counted(nn.Module):
    """A Linear that records the most instances alive during a forward on a real device."""

    live: ClassVar[weakref.WeakSet] = weakref.WeakSet()
    most: ClassVar[int] = 0

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 8)
        Counted.live.add(self)

    def forward(self, x):
        if x.device.type != "meta":
            Counted.most = max(Counted.most, len(Counted.live))
        return self.linear(x)


def counted():
    return Counted(), torch.randn(4, 16)


def run(factory: str, precisions: list[str]):
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    workload = make_workload("custom", {"module": f"{__name__}:{factory}"})
    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=3, min_time_s=0)
    bench = BenchConfig(device="cpu", loop=loop, predict=False, auto_probe=False, save=False, accuracy=True)
    return run_benchmark(workload, [Variant(precision=p) for p in precisions], bench)


@pytest.mark.parametrize(("factory", "flops_per_item"), [
    ("shared", 2 * (16 * 32 + 32 * 8)),
    # forward, the weights' gradients, and the input gradient of the second Linear only (the input needs none)
    ("shared_train", 2 * 2 * (16 * 32 + 32 * 8) + 2 * 32 * 8),
])
def test_a_factory_returning_one_module_level_model_is_measured_and_never_changed(factory, flops_per_item):
    """Counting FLOPs ran ``model.to("meta")`` on the factory's own object: its weights were gone, and every variant
    failed ("Cannot copy out of meta tensor"). Each variant now works on a copy, FLOPs on a meta copy — the training
    steps too leave the module's model as it was."""
    result = run(factory, ["fp32", "bf16"])
    assert result.failed == []
    fp32, bf16 = result.variants
    assert fp32.mfu.flops_per_item == bf16.mfu.flops_per_item == flops_per_item
    assert "meta device" in fp32.mfu.flops_source
    assert bf16.accuracy.cosine > 0.99  # against fp32's output on the same weights
    for name, value in SHARED.state_dict().items():
        assert value.device.type == "cpu" and torch.equal(value, SHARED_STATE[name]), name


def test_no_second_copy_of_the_users_model_is_kept_alive_during_a_variant():
    """Finding out whether the step trains called the factory once and kept its model for the whole run: two models
    alive in every measured forward (a 256 MiB one measured with 512 MiB held). Only the flags are kept."""
    Counted.most = 0
    result = run("counted", ["fp32"])
    assert result.failed == [] and result.variants[0].phases.measured_iterations >= 3
    assert Counted.most == 1


@pytest.mark.parametrize(("source", "error", "line"), [
    ("def make(:\n    pass\n", "SyntaxError: invalid syntax", 1),
    ("import torch\nx = undefined_name\n", "NameError: name 'undefined_name' is not defined", 2),
    ("\nraise RuntimeError('boom at import')\n", "RuntimeError: boom at import", 2),
])
def test_a_module_that_fails_as_it_is_imported_is_a_usage_error(cli, tmp_path, monkeypatch, source, error, line):
    """A SyntaxError, NameError or exception in the user's module was 'internal error … a bug in accelkit', exit 1:
    only ImportError was caught. It is one line naming the module's file and line, exit 2."""
    name = f"broken_{error.split(':')[0].lower()}"
    (tmp_path / f"{name}.py").write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    proc = cli("bench", "custom", "--module", f"{name}:make", "--no-save", "--no-progress")
    text = " ".join(proc.stderr.split())
    assert proc.returncode == 2, proc.stderr
    assert "internal error" not in text
    assert f"--module '{name}:make': importing {name} raised {error}" in text
    assert f"{tmp_path / name}.py, line {line})" in text
