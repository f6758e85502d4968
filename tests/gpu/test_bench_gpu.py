"""GPU parts of the bench harness: CUDA-event timing with the catalog peak, tf32/bf16 variants, fp8 through
torchao on SM89+, NVML energy and CUDA memory counters. Skipped without a CUDA device (with the reason);
`scripts/gpu_check.sh` runs them on a GPU machine."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"),
]

LOOP = {"warmup_iterations": 5, "warmup_time_s": 0.5, "min_iterations": 20, "min_time_s": 2.0}


def _run(workload: str, config: dict, precisions: list[str]):
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import matrix
    from accelkit.bench.workloads import make_workload
    from accelkit.results import ResultStore
    from accelkit.timing import LoopConfig

    with ResultStore() as store:
        return run_benchmark(make_workload(workload, config), matrix(precisions),
                             BenchConfig(device="cuda:0", loop=LoopConfig(**LOOP)), store=store)


def _sm() -> tuple[int, int]:
    if not torch.cuda.is_available():
        return (0, 0)
    props = torch.cuda.get_device_properties(0)
    return props.major, props.minor


def test_cuda_events_catalog_peak_memory_and_energy():
    run = _run("bert", {"size": "base", "batch_size": 32, "seq_len": 128}, ["fp32", "tf32", "bf16"])
    names = [v["name"] for v in run.variants]
    assert names[0] == "fp32" and "bf16" in names
    for v in run.variants:
        assert v["timer"] == "cuda events"
        assert v["latency_s"]["n"] >= 20 and v["throughput"]["value"] > 0
        assert v["memory_bytes"]["peak"] > 0 and v["memory_bytes"]["reserved_peak"] >= v["memory_bytes"]["step_peak_increase"]
        if run.hardware in {"H100-SXM5-80GB", "H200-SXM-141GB", "A100-SXM4-80GB", "B200-SXM-180GB"}:
            assert v["mfu"]["peak_source"].startswith("catalog:") and 0 < v["mfu"]["value"] < 1
        # NVML total-energy counter (Volta+): a number with its scope, or null with the reason
        if v["energy_j_per_item"] is None:
            pytest.fail(f"NVML energy unavailable: {v['energy']['reason']}")
        assert v["energy_j_per_item"] > 0 and v["energy"]["scope"].startswith("GPU board")
    bf16 = next(v for v in run.variants if v["name"] == "bf16")
    assert bf16["accuracy"]["cosine"] > 0.99


@pytest.mark.skipif(_sm() < (8, 9), reason="fp8 needs SM89+ (Ada, Hopper, Blackwell)")
def test_fp8_inference_and_training_through_torchao():
    infer = _run("bert", {"size": "base", "batch_size": 32, "seq_len": 128}, ["bf16", "fp8"])
    assert [v["name"] for v in infer.variants] == ["bf16", "fp8"], infer.refused
    fp8 = infer.variants[1]
    assert fp8["accuracy"]["sqnr_db"] > 15 and fp8["mfu"]["peak_source"].startswith("catalog:")
    train = _run("llm-train", {"model": "tiny-llama", "batch_size": 4, "seq_len": 256}, ["bf16", "fp8"])
    assert [v["name"] for v in train.variants] == ["bf16", "fp8"], train.refused


@pytest.mark.skipif(_sm() >= (8, 9), reason="checks the refusal on a pre-SM89 GPU")
def test_fp8_refused_before_sm89():
    run = _run("bert", {"size": "tiny", "seq_len": 32}, ["fp32", "fp8"])
    assert run.refused and run.refused[0]["name"] == "fp8" and "SM89" in run.refused[0]["reason"]


def test_llm_decode_on_gpu():
    run = _run("llm", {"model": "tiny-llama", "batch_size": 8, "prompt_len": 128, "output_len": 32}, ["bf16"])
    steps = {v["step"]: v for v in run.variants}
    assert steps["decode"]["timer"] == "cuda events" and steps["decode"]["throughput"]["value"] > 0
    assert steps["prefill"]["latency_name"] == "TTFT"
