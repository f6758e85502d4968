"""A recipe that refuses the model as it is applied (--recompute on a model without repeated blocks, int8 where no
Linear qualifies) is a refusal — one `refused` line and entry, the other variants measured, exit 0 — not `FAILED
fp32+recompute (load): RecipeRefused: …` and exit 1; `tune` lists it as refused, not failed. When it leaves nothing
to run, the run is the usage error every refused run is (exit 2)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
nn = torch.nn


def mlp_train():  # no nn.ModuleList of blocks: recompute has nothing to checkpoint
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), torch.randn(2, 8), lambda out: out.mean()


def conv_only():  # no nn.Linear: dynamic int8 has nothing to convert
    return nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU()), torch.randn(1, 3, 8, 8)


def _run(factory: str, matrix: dict):
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import Matrix
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=1, min_time_s=0)
    config = BenchConfig(device="cpu", loop=loop, predict=False, auto_probe=False, save=False, accuracy=False)
    return run_benchmark(make_workload("custom", {"module": f"{__name__}:{factory}"}), Matrix(**matrix).variants(),
                         config)


def test_a_recipe_refused_while_loading_is_a_refusal_not_a_failure():
    result = _run("mlp_train", {"recompute": True})
    assert [v.name for v in result.variants] == ["fp32"]
    assert result.failed == []
    assert [r.name for r in result.refused] == ["fp32+recompute"]
    assert "found no repeated blocks" in result.refused[0].reason


def test_every_variant_refused_while_loading_is_nothing_to_run():
    from accelkit.core import UserError

    with pytest.raises(UserError, match=r"nothing to run: every variant was refused \(int8: .*nn.Linear"):
        _run("conv_only", {"precisions": ("int8",)})
