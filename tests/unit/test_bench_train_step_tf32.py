"""The bench's training step runs forward, backward and the optimizer step under the variant's TF32 setting. TF32
was scoped to the forward (autocast's scope), so precision='tf32' ran backward — about 2/3 of a step's matmul
FLOPs — in full fp32, and an 'fp32' step's backward convolutions ran with cuDNN's TF32 default (on)."""

from typing import ClassVar

import pytest
import torch

from accelkit.bench.variants import Variant
from accelkit.bench.workloads.base import train_step


def _flags():
    # (matmul TF32, float32 matmul precision, cuDNN TF32); the legacy flags only: torch ≥ 2.9 raises from
    # get_float32_matmul_precision() once both of its APIs have been used, so the fixture never mixes them
    return (torch.backends.cuda.matmul.allow_tf32, torch.get_float32_matmul_precision(),
            torch.backends.cudnn.allow_tf32)


class _Probe(torch.autograd.Function):
    """Identity that records the TF32 flags when forward and backward run."""

    seen: ClassVar[dict[str, tuple]] = {}

    @staticmethod
    def forward(ctx, x):
        _Probe.seen["forward"] = _flags()
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        _Probe.seen["backward"] = _flags()
        return grad


class _ProbedSGD(torch.optim.SGD):
    def step(self, closure=None):
        _Probe.seen["optimizer"] = _flags()
        return super().step(closure)


@pytest.fixture
def caller_flags():
    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32)
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = False, True  # torch's defaults
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize(("precision", "expected"), [
    ("tf32", (True, "high", True)),
    ("fp32", (False, "highest", False)),  # an honest fp32 baseline: cuDNN's TF32 off too
])
def test_train_step_holds_the_tf32_setting_through_backward_and_the_optimizer(caller_flags, precision, expected):
    # the model is on the CPU; "cuda" only selects the CUDA math mode, whose flags are plain Python state
    lin = torch.nn.Linear(8, 8)
    x = torch.randn(4, 8, requires_grad=True)
    _Probe.seen.clear()
    step = train_step(lin, _ProbedSGD(lin.parameters(), lr=0.1), lambda: lin(_Probe.apply(x)).sum(),
                      Variant(precision=precision), "cuda")
    step()
    assert _Probe.seen == {"forward": expected, "backward": expected, "optimizer": expected}
    assert _flags() == (False, "highest", True)  # restored


def test_train_step_on_a_cpu_leaves_the_flags_alone(caller_flags):
    lin = torch.nn.Linear(8, 8)
    _Probe.seen.clear()
    train_step(lin, _ProbedSGD(lin.parameters(), lr=0.1), lambda: lin(_Probe.apply(torch.randn(2, 8))).sum(),
               Variant(precision="fp32"), "cpu")()
    assert set(_Probe.seen.values()) == {(False, "highest", True)}
