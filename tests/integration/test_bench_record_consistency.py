"""What a bench entry says agrees with itself, on real tiny runs: one after another (--no-interleave) the ratio,
its spread and the verdict come from one statistic (the ratio was the total throughputs', the verdict the median
blocks': 'faster' at 0.62× [1.20–1.20]); a model with no matmul/conv/attention says its MFU does not apply instead of
'flops_per_item 0.0, not counted'; and when every variant fails the CLI does not say 'the others were measured and
stored'."""

from __future__ import annotations

import torch
from torch import nn

from accelkit.bench.metrics import Totals, compare
from accelkit.results import ResultStore

MODULE = "tests.integration.test_bench_record_consistency"


def make_mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8)), torch.randn(4, 32)


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(256))

    def forward(self, x):
        return (x * self.w).relu()


def make_elementwise():
    return Scale(), torch.randn(8, 256)


class CannotBeMoved(nn.Linear):
    def to(self, *args, **kwargs):
        raise RuntimeError("this model cannot be moved")


def make_unmovable_train():
    """A model whose .to(device) raises: every variant fails at load."""
    return CannotBeMoved(8, 8), torch.randn(4, 8), lambda out: out.sum()


def _run(factory: str, precisions: list[str], *, store: ResultStore | None = None, **config):
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=40, min_time_s=0)
    workload = make_workload("custom", {"module": f"{MODULE}:{factory}"})
    bench = BenchConfig(device="cpu", loop=loop, predict=False, auto_probe=False, save=store is not None,
                        accuracy=False, **config)
    return run_benchmark(workload, [Variant(precision=p) for p in precisions], bench, store=store)


def test_one_after_another_the_ratio_is_the_statistic_the_verdict_rests_on(tmp_path):
    with ResultStore(tmp_path / "r.db") as store:
        run = _run("make_mlp", ["fp32", "bf16"], store=store, interleave=False)
        rates = {s.id: s.result.samples["block_items_per_s"] for s in store.query(kind="bench")}
    base, variant = run.variants
    assert not variant.comparison.interleaved and variant.comparison.baseline == base.name == "fp32"
    def totals(e):  # the figures printed beside the ratio (both variants run the same batch)
        return Totals(e.throughput.value, e.latency_s.median, 1)

    expected = compare("fp32", rates[base.result_id], rates[variant.result_id], interleaved=False,
                       base_totals=totals(base), totals=totals(variant))
    cmp = variant.comparison
    # the old code put the total throughputs' ratio here, beside the medians' spread and verdict
    assert (cmp.ratio, cmp.p25, cmp.p75, cmp.verdict) == (expected.ratio, expected.p25, expected.p75, expected.verdict)
    assert cmp.p25 <= cmp.ratio <= cmp.p75


def test_a_model_with_no_model_flops_says_mfu_does_not_apply():
    from accelkit.bench.record import ZERO_FLOPS

    (entry,) = _run("make_elementwise", ["fp32"]).variants
    assert entry.mfu.value is None and entry.mfu.flops_per_item == 0.0
    assert entry.mfu.flops_source.startswith(ZERO_FLOPS)
    assert ZERO_FLOPS == "0 model FLOPs counted (no matmul/conv/attention): MFU not applicable"


def test_when_every_variant_fails_the_cli_does_not_say_the_others_were_stored(cli):
    proc = cli("bench", "custom", "--module", f"{MODULE}:make_unmovable_train", "--no-save", "--quick",
               "--no-probe", "--no-predict")
    assert proc.returncode == 1, proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 1 variant(s) failed: fp32 (load)") and "this model cannot be moved" in proc.stderr
    assert last.endswith("their errors are above; no variant was measured"), last


def test_what_the_failure_line_says_of_the_variants_that_ran(tmp_path):
    from accelkit.cli.bench import _the_others

    assert _the_others([_run("make_mlp", ["fp32"])]) == "the other 1 was measured, none stored (--no-save)"
    with ResultStore(tmp_path / "r.db") as store:
        stored = _run("make_mlp", ["fp32", "bf16"], store=store)
    assert _the_others([stored]) == "the other 2 were measured and stored"
