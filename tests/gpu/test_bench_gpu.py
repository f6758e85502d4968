"""GPU parts of the bench harness: CUDA-event timing on the named device, MFU against the datasheet and the probe,
tf32/bf16 variants, fp8 inference over an fp32 checkpoint with biases and fp8 training (tensorwise, rowwise) through
torchao on SM89+/SM90+, the reference pass within the variants' memory, NVML energy and CUDA memory counters.
Skipped without a CUDA device (with the reason); `scripts/gpu_check.sh` runs them on a GPU machine (≈ 90 s)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"),
]

LOOP = {"warmup_iterations": 5, "warmup_time_s": 0.5, "min_iterations": 20, "min_time_s": 2.0}
LLAMA_1B = Path(__file__).resolve().parents[2] / "benchmarks" / "configs" / "llama-1b-shape.json"
CATALOG_GPUS = {"H100-SXM5-80GB", "H200-SXM-141GB", "A100-SXM4-80GB", "B200-SXM-180GB"}


@pytest.fixture(scope="module")
def gpu_probe_db(tmp_path_factory) -> Path:
    """One quick `hw probe` of this GPU (every dtype it runs), shared by the tests: MFU's second peak."""
    from tests.conftest import accelkit

    home = tmp_path_factory.mktemp("gpu-probe-home")
    dtypes = "fp32,tf32,bf16,fp16" + (",fp8" if _sm() >= (8, 9) else "")
    proc = accelkit("hw", "probe", "--quick", "--device", "cuda:0", "--dtype", dtypes, env={"ACCELKIT_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    return home / "results.db"


@pytest.fixture(autouse=True)
def _probed(gpu_probe_db, _isolated_home):
    _isolated_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(gpu_probe_db, _isolated_home / "results.db")


def _run(workload: str, config: dict, precisions: list[str], *, scalings=("tensorwise",), device="cuda:0", **bench):
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import matrix
    from accelkit.bench.workloads import make_workload
    from accelkit.results import ResultStore
    from accelkit.timing import LoopConfig

    with ResultStore() as store:
        return run_benchmark(make_workload(workload, config), matrix(precisions, fp8_scalings=scalings),
                             BenchConfig(device=device, loop=LoopConfig(**LOOP), **bench), store=store)


def _sm() -> tuple[int, int]:
    if not torch.cuda.is_available():
        return (0, 0)
    props = torch.cuda.get_device_properties(0)
    return props.major, props.minor


def test_cuda_events_mfu_against_datasheet_and_probe_memory_and_energy():
    run = _run("bert", {"size": "base", "batch_size": 32, "seq_len": 128}, ["fp32", "tf32", "bf16"])
    assert [v.name for v in run.variants] == ["fp32", "tf32", "bf16"], (run.refused, run.failed)
    for v in run.variants:
        assert v.timer == "cuda events" and v.latency_s.n >= 20 and v.throughput.value > 0
        assert v.memory_bytes.peak > 0 and v.memory_bytes.reserved_peak >= v.memory_bytes.step_peak_increase
        if run.hardware in CATALOG_GPUS:
            assert v.mfu.peak_source.startswith("catalog:") and 0 < v.mfu.value < 1
            assert v.mfu.datasheet.value == v.mfu.value
            assert v.mfu.probe.source.startswith("measured: `accelkit hw probe`"), v.mfu.probe.source
            assert v.mfu.probe.value > v.mfu.value * 0.9  # the probe reaches less than the datasheet
        # NVML total-energy counter (Volta+): a number with its scope, or null with the reason
        if v.energy_j_per_item is None:
            pytest.fail(f"NVML energy unavailable: {v.energy.reason}")
        assert v.energy_j_per_item > 0 and v.energy.scope.startswith("GPU board")
    bf16 = run.variants[2]
    assert bf16.accuracy.cosine > 0.99 and bf16.accuracy.rows == 2
    assert run.peak_memory_bytes and run.peak_memory_scope.startswith("CUDA")


@pytest.mark.skipif(_sm() < (8, 9), reason="fp8 needs SM89+ (Ada, Hopper, Blackwell)")
def test_fp8_inference_on_an_fp32_checkpoint_with_biases():
    """The first H200 run raised 'Bias must be BFloat16 or Half, but got Float' here."""
    run = _run("bert", {"size": "base", "batch_size": 32, "seq_len": 128}, ["bf16", "fp8"])
    assert [v.name for v in run.variants] == ["bf16", "fp8"], (run.refused, run.failed)
    fp8 = run.variants[1]
    assert fp8.accuracy.sqnr_db > 15 and fp8.mfu.peak_source.startswith("catalog:")
    assert fp8.recipe.quantization == "fp8-dynamic" and fp8.recipe.precision == "bf16"


@pytest.mark.skipif(_sm() < (8, 9), reason="fp8 training needs SM89+ (rowwise: SM90+)")
def test_fp8_training_tensorwise_and_rowwise_against_bf16():
    """The first H200 run died in Float8Linear with 'attempting to run aten.to.dtype'."""
    scalings = ("tensorwise", "rowwise") if _sm() >= (9, 0) else ("tensorwise",)
    run = _run("llm-train", {"model": "tiny-llama", "batch_size": 4, "seq_len": 256}, ["bf16", "fp8"],
               scalings=scalings)
    expected = ["bf16", "fp8", *(["fp8-rowwise"] if "rowwise" in scalings else [])]
    assert [v.name for v in run.variants] == expected, (run.refused, run.failed)
    bf16 = run.variants[0]
    for v in run.variants[1:]:
        assert v.loss_first_steps and all(x is not None for x in v.loss_first_steps)
        assert v.loss_first_steps[0] == pytest.approx(bf16.loss_first_steps[0], rel=0.05)  # same model, same batch
        assert v.loss_first_steps[-1] < v.loss_first_steps[0]  # it trains
    assert run.verdicts and run.verdicts[0].startswith("train step:")


def test_the_reference_pass_stays_within_the_variants_memory():
    """The whole run (fp32 reference: FLOPs on the meta device, drift on 2 rows) peaks within 1.2× of its one
    variant; the first H200 run's reference of a 1B model at b8 × 2048 went out of memory before any variant."""
    run = _run("llm-train", {"model": str(LLAMA_1B), "batch_size": 2, "seq_len": 1024}, ["bf16"], predict=False)
    (v,) = run.variants
    assert "meta device" in v.mfu.flops_source and v.accuracy.rows == 2
    assert run.peak_memory_bytes <= 1.2 * v.memory_bytes.peak, (run.peak_memory_bytes, v.memory_bytes.peak)


def test_the_named_device_is_timed_and_synchronized():
    """`--device cuda:N`: the events go on that device's stream (the last GPU here; cuda:0 stays current)."""
    from accelkit.timing import time_block

    last = f"cuda:{torch.cuda.device_count() - 1}"
    torch.cuda.set_device(0)
    a = torch.randn(4096, 4096, device=last)
    block = time_block(lambda: a @ a, device=last, iterations=10)
    assert all(s > 0 for s in block.samples_s) and sum(block.samples_s) <= block.wall_s * 1.05
    run = _run("bert", {"size": "tiny", "batch_size": 8, "seq_len": 64}, ["bf16"], device=last)
    assert run.device == last and run.variants[0].timer == "cuda events"


@pytest.mark.skipif(_sm() >= (8, 9), reason="checks the refusal on a pre-SM89 GPU")
def test_fp8_refused_before_sm89():
    run = _run("bert", {"size": "tiny", "seq_len": 32}, ["fp32", "fp8"])
    assert run.refused and run.refused[0].name == "fp8" and "SM89" in run.refused[0].reason


def test_llm_decode_on_gpu():
    run = _run("llm", {"model": "tiny-llama", "batch_size": 8, "prompt_len": 128, "output_len": 32}, ["bf16"])
    steps = {v.step: v for v in run.variants}
    assert steps["decode"].timer == "cuda events" and steps["decode"].throughput.value > 0
    assert steps["prefill"].latency_name == "TTFT"
    assert steps["decode"].predicted is None or steps["decode"].predicted.unit == "tokens/s"
