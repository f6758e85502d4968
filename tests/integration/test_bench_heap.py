"""The bench's collection between variants (``accelkit.bench.reference.free``) on real tiny models held in reference
cycles (which only a collection frees): each variant's model is gone before the next one runs; what survives a
collection with no variant loaded is frozen for the rest of the run (``gc.freeze``: later collections walk only
what came after, not the whole heap again — 0.3–0.6 s each on a 2-core VM once torch.compile was imported) and
handed back when the run ends; a variant that fails while another is loaded freezes nothing; and nothing frozen is
left at the interpreter's exit (nanobind, Triton's bindings, reports what it leaves alive as leaks)."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
import weakref
from collections.abc import Iterator
from typing import ClassVar

import pytest

from tests.conftest import REPO

torch = pytest.importorskip("torch")
nn = torch.nn


class Cyclic(nn.Module):
    """A Linear in a reference cycle with itself. Each forward on a real device records how many of the models that
    ran one are alive (a variant's; the factory's first model only runs on the meta device) and whether the heap is
    frozen; with ``fail_fp16``, under fp16 autocast it raises (a variant that fails in its first call); with
    ``fail_fp32_after`` N, without autocast it raises on its (N+1)-th call (a variant that fails while measured)."""

    ran: ClassVar[weakref.WeakSet] = weakref.WeakSet()
    most: ClassVar[int] = 0
    frozen: ClassVar[list[int]] = []
    fail_fp16: ClassVar[bool] = False
    fail_fp32_after: ClassVar[int | None] = None
    after_failure: ClassVar[list[int]] = []  # models alive at each forward after fp32 failed
    failed: ClassVar[bool] = False

    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 8)
        self.cycle = [self]
        self.calls = 0

    def forward(self, x):
        if x.device.type != "meta":
            if Cyclic.fail_fp16 and torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == torch.float16:
                raise RuntimeError("no fp16 here")
            self.calls += 1
            if Cyclic.fail_fp32_after is not None and not torch.is_autocast_enabled("cpu") \
                    and self.calls > Cyclic.fail_fp32_after:
                Cyclic.failed = True
                raise RuntimeError("fp32 fails while measured")
            Cyclic.ran.add(self)
            Cyclic.most = max(Cyclic.most, len(Cyclic.ran))
            if Cyclic.failed:
                Cyclic.after_failure.append(len(Cyclic.ran))
            Cyclic.frozen.append(gc.get_freeze_count())
        return self.linear(x)


def cyclic():
    return Cyclic(), torch.randn(4, 16)


def run(precisions: list[str], *, interleave: bool, fail_fp16: bool = False, fail_fp32_after: int | None = None):
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    Cyclic.most, Cyclic.frozen, Cyclic.fail_fp16, Cyclic.fail_fp32_after = 0, [], fail_fp16, fail_fp32_after
    Cyclic.after_failure, Cyclic.failed = [], False
    workload = make_workload("custom", {"module": f"{__name__}:cyclic"})
    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=3, min_time_s=0)
    bench = BenchConfig(device="cpu", loop=loop, interleave=interleave, predict=False, auto_probe=False, save=False)
    return run_benchmark(workload, [Variant(precision=p) for p in precisions], bench)


@pytest.fixture
def unfrozen() -> Iterator[None]:
    """The heap as a user's process has it: not frozen (the suite freezes it at each module's start, and a run
    leaves a heap someone else froze as it is); frozen again afterwards, as it was."""
    was_frozen = gc.get_freeze_count() > 0
    gc.unfreeze()
    yield
    if was_frozen:
        gc.collect()
        gc.freeze()


def test_one_after_another_each_model_is_freed_before_the_next_and_the_rest_frozen_meanwhile(unfrozen):
    result = run(["fp32", "bf16", "fp16"], interleave=False)
    assert result.failed == [] and len(result.variants) == 3
    assert Cyclic.most == 1  # no forward ran beside the model of a variant before it
    runs = len(Cyclic.frozen) // 3
    first, later = Cyclic.frozen[:runs], Cyclic.frozen[runs:]
    assert not any(first) and all(later), Cyclic.frozen  # frozen after the first variant's collection, not before
    assert gc.get_freeze_count() == 0  # handed back when the run ended
    assert len(Cyclic.ran) == 0  # and every model freed by the run's own collections (none here yet)


def test_a_variant_failing_beside_a_loaded_one_freezes_nothing(unfrozen):
    """Interleaved, fp32 is loaded when fp16 fails in its first call: the collection that frees fp16 must not freeze
    fp32's model (a frozen cycle is never collected: fp32 would outlive the run)."""
    result = run(["fp32", "fp16", "bf16"], interleave=True, fail_fp16=True)
    assert [f.name for f in result.failed] == ["fp16"] and len(result.variants) == 2
    assert not any(Cyclic.frozen)
    assert gc.get_freeze_count() == 0
    assert len(Cyclic.ran) == 0  # fp32's and bf16's models: freed by the collection at the end of the run


def test_a_variant_failing_while_measured_is_freed_before_the_next(unfrozen):
    """fp32 fails after its warm-up, one after another: its model must be gone before bf16 runs — neither kept by its
    lanes nor by the exception's traceback, and not frozen by the collection that should have freed it (a frozen
    cycle outlives the run: on a GPU, memory held beside every later variant)."""
    result = run(["fp32", "bf16", "fp16"], interleave=False, fail_fp32_after=3)
    assert [(f.name, f.phase) for f in result.failed] == [("fp32", "measure")] and len(result.variants) == 2
    assert Cyclic.most == 1  # no forward ran beside the failed model
    assert gc.get_freeze_count() == 0 and len(Cyclic.ran) == 0


def test_an_interleaved_variant_failing_while_measured_is_freed_at_once(unfrozen):
    """Interleaved (as `tune` runs), fp32 fails in a measuring round: the rounds go on with bf16 and fp16 alone,
    so from the next forward on two models are alive, not three — the exception's traceback and the rounds' own
    reference to the step (an enumerate's reused result tuple held it) kept it until the run's end."""
    result = run(["fp32", "bf16", "fp16"], interleave=True, fail_fp32_after=3)
    assert [(f.name, f.phase) for f in result.failed] == [("fp32", "measure")] and len(result.variants) == 2
    assert Cyclic.after_failure and max(Cyclic.after_failure) == 2, Cyclic.after_failure
    assert gc.get_freeze_count() == 0 and len(Cyclic.ran) == 0


def test_a_run_leaves_nothing_frozen_at_exit(tmp_path):
    """Triton's bindings (nanobind) print 'nanobind: leaked N instances!' at exit for every object of theirs the
    collector cannot see — frozen ones among them."""
    pytest.importorskip("triton._C.libtriton")
    script = textwrap.dedent("""
        import gc
        import triton._C.libtriton  # noqa: F401
        from tests.integration.test_bench_heap import Cyclic, run
        result = run(["fp32", "bf16"], interleave=False)
        assert result.failed == [] and any(Cyclic.frozen), Cyclic.frozen  # the run did freeze the heap
        print("ran")
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={"ACCELKIT_HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0 and proc.stdout.strip() == "ran", proc.stderr[-3000:]
    assert "leaked" not in proc.stderr, proc.stderr[-3000:]
