"""A variant that raises is recorded as failed with its error, its measured siblings are kept (and stored), the
command exits 1; a suite goes on to its next workload. The reference pass never changes what a variant measures."""

from __future__ import annotations

import json

import pytest

from tests.conftest import accelkit
from tests.integration.test_bench_cli import FAST, stored_bench

torch = pytest.importorskip("torch")


class FragileUnderBf16(torch.nn.Module):
    """Raises what torchao's fp8 GEMM raised on the H200, whenever it runs under CPU bf16 autocast."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(32, 8)

    def forward(self, x):
        if torch.is_autocast_enabled("cpu"):
            raise RuntimeError("Bias must be BFloat16 or Half, but got Float")
        return self.linear(x)


def make_fragile():
    return FragileUnderBf16(), torch.randn(4, 32)


def test_a_failing_variant_is_recorded_and_its_siblings_kept(probed):
    proc = accelkit("bench", "custom", "--module", "tests.integration.test_bench_failures:make_fragile",
                    "--precision", "fp32,bf16,int8", "--device", "cpu", *FAST, "--json")
    assert proc.returncode == 1, proc.stderr  # some variant failed
    assert "Traceback" not in proc.stderr
    assert "FAILED bf16 (first call): RuntimeError: Bias must be BFloat16 or Half, but got Float" in proc.stderr
    doc = json.loads(proc.stdout)
    assert [v["name"] for v in doc["variants"]] == ["fp32", "int8"]
    assert doc["failed"] == [{"name": "bf16", "phase": "first call",
                              "error": "RuntimeError: Bias must be BFloat16 or Half, but got Float"}]
    assert sorted(r.result.details["name"] for r in stored_bench(probed)) == ["fp32", "int8"]


def test_a_suite_goes_on_after_a_workload_fails(monkeypatch, probed):
    from accelkit.bench import suite as suites
    from accelkit.bench.runner import BenchConfig
    from accelkit.results import ResultStore
    from accelkit.timing import LoopConfig

    def fragile_suite():
        return suites.Suite("fragile", "one workload fails, the next runs", (
            suites.SuiteItem("fragile", "custom", {"module": "tests.integration.test_bench_failures:make_fragile"},
                             cpu_precisions=("bf16",)),
            suites.SuiteItem("no-such-model", "llm", {"model": "/no/such/config.json"}),
            suites.SuiteItem("bert-tiny", "bert", {"size": "tiny", "batch_size": 2, "seq_len": 16},
                             cpu_precisions=("fp32",)),
        ), LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=3, min_time_s=0))

    monkeypatch.setitem(suites.SUITES, "fragile", fragile_suite)
    with ResultStore() as store:
        run = suites.run_suite("fragile", BenchConfig(device="cpu"), store=store)
    assert run.any_failed
    fragile, bert = run.runs
    assert fragile.variants == [] and fragile.failed[0].name == "bf16"
    assert [v.name for v in bert.variants] == ["fp32"]  # the suite went on
    assert run.skipped and run.skipped[0]["key"] == "no-such-model"


def test_the_reference_pass_never_changes_a_variants_numbers():
    """bf16 alone (so an fp32 reference is built first) vs bf16 with no reference at all: same FLOPs, same
    losses over the first steps, bit for bit."""
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    loop = LoopConfig(warmup_iterations=4, warmup_time_s=0, min_iterations=2, min_time_s=0)
    runs = []
    for accuracy in (True, False):
        workload = make_workload("llm-train", {"model": "tiny-llama", "batch_size": 2, "seq_len": 32})
        config = BenchConfig(device="cpu", loop=loop, accuracy=accuracy, predict=False, auto_probe=False, save=False)
        runs.append(run_benchmark(workload, [Variant(precision="bf16")], config).variants[0])
    with_ref, without = runs
    assert with_ref.accuracy.rows == 2 and without.accuracy.cosine is None  # the reference ran only in the first
    assert with_ref.loss_first_steps == without.loss_first_steps and len(with_ref.loss_first_steps) == 5
    assert with_ref.mfu.flops_per_item == without.mfu.flops_per_item > 0
