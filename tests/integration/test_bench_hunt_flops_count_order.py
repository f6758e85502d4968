"""A training workload the meta device cannot count is counted on the fp32 variant itself — after its warm-up.
Counted before (between its first call and its warm-up), the count's training steps moved fp32's weights ahead of
every other recipe's, so its first steps' losses fell further than those of a recipe with the very same numerics
(full recompute), and `accelkit tune`'s training gate refused that recipe ("it does not train as fp32 does")."""

from __future__ import annotations

import torch
from torch import nn

MODULE = "tests.integration.test_bench_hunt_flops_count_order"


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x):
        return torch.relu(self.linear(x)) + x


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Block(), Block()])
        self.head = nn.Linear(16, 4)

    def forward(self, x):
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def make_train():
    """An MLP of repeated blocks (recompute has blocks to checkpoint) whose loss closes over labels on the CPU: on
    the meta device the loss cannot be computed, so the run counts its FLOPs on the fp32 variant."""
    torch.manual_seed(0)
    model = Net()
    labels = torch.randint(0, 4, (8,))
    return model, torch.randn(8, 16), lambda out: nn.functional.cross_entropy(out, labels)


def test_fp32_counted_on_itself_trains_its_first_steps_as_a_recipe_of_the_same_numerics():
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    loop = LoopConfig(warmup_iterations=2, warmup_time_s=0, min_iterations=3, min_time_s=0)
    workload = make_workload("custom", {"module": f"{MODULE}:make_train"})
    bench = BenchConfig(device="cpu", loop=loop, predict=False, auto_probe=False, save=False, accuracy=False,
                        interleave=False)
    run = run_benchmark(workload, [Variant(), Variant(recompute=True)], bench)
    fp32, recompute = run.variants
    assert any(note.startswith("FLOPs counted on cpu by the fp32 variant") for note in run.notes), run.notes
    assert fp32.loss_first_steps is not None and len(fp32.loss_first_steps) >= 3
    assert fp32.loss_first_steps == recompute.loss_first_steps  # (bit-identical steps from the same weights)
    assert fp32.mfu.flops_per_item and fp32.mfu.flops_per_item == recompute.mfu.flops_per_item  # (counted once)
