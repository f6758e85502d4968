"""fold_bn folds a BatchNorm into a conv only where the conv's output goes to it and nowhere else (the data flow of
the parent's forward, traced with torch.fx), and folds a BatchNorm without affine parameters.

Pairs came from registration order: a BatchNorm applied to conv(x) + x was folded into the conv (max abs error 3.1 on
outputs up to 9.2), and ``BatchNorm2d(affine=False)`` raised TypeError on its None weight."""

import pytest
import torch
from torch import nn

from accelkit.core import Recipe
from accelkit.recipes import RecipeRefused, apply


def _statistics(model: nn.Module) -> nn.Module:
    """Non-trivial running statistics and affine parameters, so that a wrong fold shows in the output."""
    torch.manual_seed(0)
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            if m.weight is not None:
                m.weight.data.uniform_(0.5, 2)
                m.bias.data.uniform_(-1, 1)
    return model.eval()


class NoAffine(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8, affine=False)

    def forward(self, x, double: bool = False):  # a branch on an argument with a default: traced at the default
        y = self.bn(self.conv(x))
        return y * 2 if double else y


class ResidualThenNorm(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)

    def forward(self, x):
        return self.bn(self.conv(x) + x)


class ConvUsedTwice(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + y


class Mixed(nn.Module):
    """A foldable stem (a Sequential), then a block whose norm takes a sum: only the stem folds."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block = ResidualThenNorm()

    def forward(self, x):
        return self.block(self.stem(x))


def _folded(model: nn.Module, x: torch.Tensor) -> tuple[nn.Module, list[str], torch.Tensor]:
    with torch.no_grad():
        ref = model(x)
    notes: list[str] = []
    out = apply(model, Recipe(fold_bn=True), notes=notes)
    return out, notes, ref


def test_a_batchnorm_without_affine_parameters_folds():
    model, notes, ref = _folded(_statistics(NoAffine()), x := torch.randn(2, 3, 8, 8))
    assert notes == ["folded 1 Conv-BN pairs"] and isinstance(model.bn, nn.Identity)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("make", [ResidualThenNorm, ConvUsedTwice])
def test_a_norm_that_does_not_take_the_convs_output_alone_is_refused_and_the_model_untouched(make):
    model = _statistics(make())
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(RecipeRefused, match=r"fold_bn=True found no Conv2d whose output goes only to a BatchNorm2d"):
        apply(model, Recipe(fold_bn=True))
    assert isinstance(model.bn, nn.BatchNorm2d)
    assert all(torch.equal(v, before[k]) for k, v in model.state_dict().items())


def test_only_the_pairs_the_data_flow_proves_are_folded():
    model, notes, ref = _folded(_statistics(Mixed()), x := torch.randn(2, 8, 8, 8))
    assert notes == ["folded 1 Conv-BN pairs"]
    assert isinstance(model.stem[1], nn.Identity) and isinstance(model.block.bn, nn.BatchNorm2d)
    with torch.no_grad():
        torch.testing.assert_close(model(x), ref, rtol=1e-5, atol=1e-5)
