"""The measuring session (``accelkit.bench.session``) in-process on real tiny torch models: how blocks are sized,
capped and paired, which reference each variant's drift is taken against, and what an overflowing output records."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")


class Sleepy(torch.nn.Module):
    """A real Linear that also sleeps 2 ms per call, so that a block's length in calls says how long it ran."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        time.sleep(0.002)
        return self.linear(x)


def make_sleepy():
    torch.manual_seed(0)
    return Sleepy(), torch.randn(2, 8)


class SlowUnderAutocast(Sleepy):
    """2 ms a call in fp32, 20 ms under CPU autocast (bf16): one lane is done long before the other."""

    def forward(self, x):
        time.sleep(0.02 if torch.is_autocast_enabled("cpu") else 0.002)
        return self.linear(x)


def make_slow_under_autocast():
    torch.manual_seed(0)
    return SlowUnderAutocast(), torch.randn(2, 8)


class DataDependent(torch.nn.Module):
    """Branches on a value (Python control flow on data), which the meta device cannot run: FLOPs are counted on a
    real device."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(32, 16)

    def forward(self, x):
        if float(x.abs().sum()) < 0:  # never true; the meta device cannot read a value
            x = -x
        return self.linear(x)


def make_data_dependent():
    torch.manual_seed(0)
    return DataDependent(), torch.randn(4, 32)


class OverflowsInHalf(torch.nn.Module):
    """Fine in fp32; its output overflows fp16's 65504 (inf)."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(64, 8)

    def forward(self, x):
        return self.linear(x * 1e5)


def make_overflowing():
    torch.manual_seed(0)
    return OverflowsInHalf(), torch.randn(4, 64)


class Fp32Fails(torch.nn.Module):
    """Runs only under CPU autocast (bf16): the fp32 variant fails in its first call, before producing its output."""

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(8, 4)

    def forward(self, x):
        if not torch.is_autocast_enabled("cpu"):
            raise RuntimeError("no fp32 kernel for this op")
        return self.linear(x)


def make_fp32_fails():
    torch.manual_seed(0)
    return Fp32Fails(), torch.randn(2, 8)


class Fp32FailsCountingFlops(DataDependent):
    """The meta device cannot run it (a data-dependent branch); in fp32 it fails from its third call on — the first
    call and the drift output pass, the fp32 variant's FLOPs count (the next call) fails."""

    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        if self.calls > 2 and not torch.is_autocast_enabled("cpu"):
            raise RuntimeError("fails on its third fp32 call")
        return super().forward(x)


def make_fp32_fails_counting_flops():
    torch.manual_seed(0)
    return Fp32FailsCountingFlops(), torch.randn(4, 32)


def run(factory: str, precisions: list[str], loop, **config):
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload

    workload = make_workload("custom", {"module": f"tests.integration.test_bench_session:{factory}"})
    bench = BenchConfig(device="cpu", loop=loop, predict=False, auto_probe=False, save=False, **config)
    return run_benchmark(workload, [Variant(precision=p) for p in precisions], bench)


def short_loop():
    """One warm-up call, at least three measured, no minimum time."""
    from accelkit.timing import LoopConfig

    return LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=3, min_time_s=0)


def test_no_warm_up_still_sizes_blocks_to_fill_min_time_in_rounds():
    """--warmup 0 --warmup-time 0 measured no warm-up iteration, so the per-iteration estimate was the ~µs of an
    empty loop and a 0.5 s run became one block of 15,000 calls (38 s). The first call is the estimate now: blocks
    of about a tenth of --min-time (2 ms calls, 0.2 s → ~10 calls a block, ~10 blocks)."""
    from accelkit.timing import LoopConfig

    # 50 calls: ≥ 5 blocks of ≤ 20 by count alone, however long a loaded machine makes the sleeps
    loop = LoopConfig(warmup_iterations=0, warmup_time_s=0, min_iterations=50, min_time_s=0.2)
    entry = run("make_sleepy", ["fp32"], loop, accuracy=False).variants[0]
    assert entry.phases.warmup_iterations == 0
    # sized from the first call (~10 calls a block), not one block of thousands — counts, not seconds: a busy
    # machine's longer sleeps give fewer blocks, never bigger ones
    assert entry.phases.blocks >= 5 and entry.phases.measured_iterations / entry.phases.blocks <= 20
    assert entry.phases.measured_iterations < 400  # 0.2 s of 2 ms calls, not thousands


def test_max_iterations_caps_every_interleaved_variant():
    """`--precision fp32,bf16 --max-iterations 20` measured fp32 140 times: the rounds went on timing it until the
    slower bf16 was done. Every variant now stops at the cap."""
    from accelkit.timing import LoopConfig

    loop = LoopConfig(warmup_iterations=2, warmup_time_s=0, min_iterations=5, min_time_s=0.2, max_iterations=20)
    run_ = run("make_slow_under_autocast", ["fp32", "bf16"], loop, accuracy=False)
    entries = {v.name: v for v in run_.variants}
    assert entries["bf16"].comparison.interleaved
    assert entries["fp32"].phases.measured_iterations == 20
    assert 5 <= entries["bf16"].phases.measured_iterations <= 20
    # the cap spread over rounds: blocks of at most a tenth of it (2 calls); bf16's 5 calls take ≥ 3 such blocks
    assert entries["fp32"].phases.blocks >= 10 and entries["bf16"].comparison.pairs >= 3


@pytest.mark.parametrize("interleave", [True, False])
def test_variants_listed_before_fp32_get_drift_and_flops(interleave):
    """`--precision bf16,fp32` gave bf16 no accuracy drift ("no fp32 reference output (the workload has none)"):
    the separate reference was skipped because an fp32 variant ran, whose output came after bf16 had loaded. Run
    one after another, bf16 was also stored before the fp32 variant counted the FLOPs the meta device could not."""
    loop = short_loop()
    entries = {v.name: v for v in run("make_data_dependent", ["bf16", "fp32"], loop, accuracy=True,
                                      interleave=interleave).variants}
    bf16, fp32 = entries["bf16"], entries["fp32"]
    assert bf16.accuracy.note is None and bf16.accuracy.rows == fp32.accuracy.rows == 4  # the whole custom batch
    assert bf16.accuracy.sqnr_db is not None and bf16.accuracy.cosine > 0.99  # bf16 rounding, measured
    assert fp32.accuracy.identical  # the same fp32 model from the same seed
    assert bf16.mfu.flops_per_item == fp32.mfu.flops_per_item == 2 * 32 * 16  # one Linear per row


def test_an_overflowing_variant_is_measured_and_fails_its_accuracy_gate():
    """fp16 whose output overflows was recorded as FAILED in its first call ('max_abs_error is NaN') and its timing
    thrown away. It is measured now, with an accuracy note, and tune's gate reads it as failed."""
    from accelkit.tune.search import _gate

    loop = short_loop()
    result = run("make_overflowing", ["fp32", "fp16"], loop, accuracy=True)
    assert result.failed == []
    fp16 = next(v for v in result.variants if v.name == "fp16")
    assert fp16.phases.measured_iterations >= 3 and fp16.throughput.value > 0  # the timing is kept
    assert "inf/NaN" in fp16.accuracy.note
    gate = _gate(fp16.accuracy.to_dict(), 0.01)
    assert gate["passed"] is False


@pytest.mark.parametrize("interleave", [True, False])
def test_a_failed_fp32_reference_is_named_in_the_others_accuracy_note(interleave):
    """`--precision fp32,bf16` whose fp32 variant failed before producing its output gave bf16 the false note
    'no fp32 reference output (the workload has none)'. The note now says the reference failed, and why."""
    loop = short_loop()
    result = run("make_fp32_fails", ["fp32", "bf16"], loop, accuracy=True, interleave=interleave)
    assert [(f.name, f.phase) for f in result.failed] == [("fp32", "first call")]
    (bf16,) = result.variants
    assert bf16.name == "bf16" and bf16.phases.measured_iterations >= 3  # measured all the same
    note = bf16.accuracy.note
    assert "the workload has none" not in note
    assert "the reference variant fp32 failed in its first call: RuntimeError: no fp32 kernel for this op" in note


@pytest.mark.parametrize("interleave", [True, False])
def test_flops_the_failed_fp32_variant_was_to_count_are_said_not_counted(interleave):
    """The meta device cannot run this model, so the fp32 variant listed first was to count the FLOPs; it failed in
    its first call, yet the run said 'FLOPs counted on cpu, not on the meta device' (the note was written before the
    variant ran). It now says they were not counted and why."""
    loop = short_loop()
    result = run("make_fp32_fails", ["fp32", "bf16"], loop, accuracy=True, interleave=interleave)
    assert not any(n.startswith("FLOPs counted") for n in result.notes), result.notes
    (note,) = [n for n in result.notes if n.startswith("FLOPs")]
    assert note.startswith("FLOPs not counted: the meta device could not run the model (RuntimeError: no fp32 kernel")
    assert "the reference variant fp32 failed in its first call" in note
    (bf16,) = result.variants
    assert bf16.mfu.flops_per_item is None and bf16.mfu.flops_source == "not counted"


def test_flops_an_fp32_variant_failed_to_count_after_its_output_name_its_failure():
    """The fp32 variant produced its drift output, then failed counting the FLOPs the meta device could not: the
    note blamed an interrupt ('the run was interrupted before it counted them') — its failure was kept only when
    it had no output. It now names the failure."""
    result = run("make_fp32_fails_counting_flops", ["fp32", "bf16"], short_loop(), accuracy=True, interleave=False)
    assert [f.name for f in result.failed] == ["fp32"] and not result.interrupted
    (note,) = [n for n in result.notes if n.startswith("FLOPs")]
    assert "interrupted" not in note, note
    assert "the reference variant fp32 failed in its first call: RuntimeError: fails on its third fp32 call" in note
    (bf16,) = result.variants
    assert bf16.accuracy.note is None and bf16.accuracy.cosine > 0.99  # its drift output came first: bf16 has drift


def test_flops_the_fp32_variant_counted_are_said_counted_by_it():
    loop = short_loop()
    result = run("make_data_dependent", ["fp32", "bf16"], loop, accuracy=False)
    (note,) = [n for n in result.notes if n.startswith("FLOPs")]
    assert note.startswith("FLOPs counted on cpu by the fp32 variant, not on the meta device (")
    assert all(v.mfu.flops_per_item == 2 * 32 * 16 for v in result.variants)
