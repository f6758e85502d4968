"""Published serving figures: NVIDIA NIM (TensorRT-LLM) latencies, TensorRT-LLM's throughput overview, vLLM on
MI300X (Oracle Cloud's Llama 3.1 405B latencies and throughputs, AMD's ROCm performance page)."""

from __future__ import annotations

from typing import Any

from accelkit.models import get_preset
from validation_runs.schema import ServingPoint, Source

SOURCES = [
    Source(key="nim", organisation="NVIDIA", title="NVIDIA NIM LLM benchmarking (TensorRT-LLM engine, AIPerf client)",
           url="https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance", date="2025",
           where="Llama-3.3-70b-instruct, Version 1.8.0, 2 x H100 80G, fp8 TP2: '5000 Input Tokens / 500 Output Tokens' "
                 "and '500 Input Tokens / 2000 Output Tokens' tables (Concurrency, TTFT (ms), ITL (ms))"),
    Source(key="trtllm-perf", organisation="NVIDIA", title="TensorRT-LLM performance overview (v1.0 tables)",
           url="https://github.com/NVIDIA/TensorRT-LLM/blob/00f37686/docs/source/performance/perf-overview.md",
           date="2025 (v1.0)",
           where="docs/source/performance/perf-overview.md @00f37686: 'Total Output Throughput (tokens/sec)' under "
                 "maximum load (trtllm-bench throughput, PyTorch backend, requests of exactly ISL/OSL tokens), tables "
                 "'Llama 3.1 8B' (H200 TP1, H100 TP1), 'Llama 3.3 70B' (H200 TP1, H100 TP2), 'Llama 3.1 405B' "
                 "(H200 TP8, H100 TP8), FP8 checkpoints nvidia/*-Instruct-FP8; kv_cache_free_gpu_mem_fraction 0.90 "
                 "by default, 0.95 'in many cases'; the KV-cache dtype is not settled (perf-benchmarking.md @ac643b66 "
                 "says FP8 for these checkpoints, trtllm-bench's code keeps the checkpoint's own)"),
    Source(key="oci-mi300x", organisation="Oracle Cloud Infrastructure",
           title="Serving Llama 3.1 405B model with AMD MI300X GPUs (vLLM)",
           url="https://blogs.oracle.com/cloud-infrastructure/serving-llama-31-405b-model-with-amd-mi300x-gpus",
           date="2024",
           where="'Latency measurements' (vLLM benchmark_latency.py, input 128, output 128: Batch Size, Average latency "
                 "in seconds) and 'Throughput measurements' (benchmark_throughput.py: Output throughput in TPS) on "
                 "BM.GPU.MI300X.8, Llama 3.1 405B FP8, all eight GPUs"),
    Source(key="amd-rocm-vllm", organisation="AMD", title="AMD Instinct performance results: vLLM inference",
           url="https://www.amd.com/en/developer/resources/rocm-hub/dev-ai/performance-results.html",
           date="2025-10-06",
           where="as stored (zh-cn copy): 'Latency Measurements', Docker rocm/vllm:rocm7.0.0_vllm_0.10.2_20251006, "
                 "8x MI300X (192GB HBM3 750W): Llama 3.1 70B (amd/Llama-3.1-70B-Instruct-FP8-KV), FP8, TP 8, input "
                 "128, output 2048, Batch Size 1, 2, 4"),
]


def _nim(prompt: int, out: int, conc: int, metric: str, ms: float) -> ServingPoint:
    short = metric.split("_")[0]
    return ServingPoint(
        id=f"nim-llama3.3-70b-fp8-tp2-{prompt}in{out}out-c{conc}-{short}", source="nim",
        where=f"{prompt} Input Tokens / {out} Output Tokens, Concurrency {conc}: {short.upper()} {ms} ms",
        model=get_preset("llama-3.1-70b").replace(name="llama-3.3-70b"), hardware="2 x H100 80G",
        device="H100-SXM5-80GB", tp=2, engine="NIM 1.8.0 (TensorRT-LLM)", weights="fp8", kv_cache_dtype=None,
        prompt_len=prompt, output_len=out, batch=conc, max_batch=None, memory_fraction=None, memory_rule="none",
        metric=metric, value=ms / 1e3, text=f"{ms} ms",  # type: ignore[arg-type]
        unknown={"kv_cache_dtype": ("auto", "fp8")},
        notes=("the fp8 profile's KV-cache dtype is not published: evaluated bf16 and fp8",
               "TTFT at concurrency 1 is one prompt's prefill; ITL averages decode steps and the interleaved prefills "
               "of arriving requests (rows past saturation, where TTFT grows with queueing, are not used)"))


NIM = [_nim(5000, 500, 1, "ttft_s", 406.77), _nim(5000, 500, 1, "itl_s", 18.58), _nim(5000, 500, 5, "itl_s", 21.83),
       _nim(5000, 500, 25, "itl_s", 38.75), _nim(5000, 500, 50, "itl_s", 59.73), _nim(500, 2000, 1, "ttft_s", 47.77),
       _nim(500, 2000, 1, "itl_s", 18.91)]

_ISL_OSL = [(128, 128), (128, 2048), (128, 4096), (500, 2000), (1000, 1000), (1000, 2000), (2048, 128), (2048, 2048),
            (5000, 500), (20000, 2000)]
#: model preset, table, {(device, tp): the column's ten figures in _ISL_OSL order}
_TRTLLM: list[tuple[str, str, dict[tuple[str, int], tuple[float, ...]]]] = [
    ("llama-3.1-8b", "Llama 3.1 8B", {
        ("H200-SXM-141GB", 1): (27911, 26221, 18027, 20770, 17744, 16828, 3538, 12194, 3902, 1804),
        ("H100-SXM5-80GB", 1): (28312, 22714, 14325, 17660, 15220, 13899, 3450, 9305, 3459, 1351)}),
    ("llama-3.1-70b", "Llama 3.3 70B", {
        ("H200-SXM-141GB", 1): (3803, 4336, 2872, 3666, 2909, 2994, 442, 2003, 566, 283),
        ("H100-SXM5-80GB", 2): (6378, 6651, 4199, 5222, 4205, 4146, 762, 3082, 898, 437)}),
    ("llama-3.1-405b", "Llama 3.1 405B", {
        ("H200-SXM-141GB", 8): (3814, 5348, 4741, 4724, 3330, 3722, 456, 2948, 650, 505),
        ("H100-SXM5-80GB", 8): (3627, 4340, 3116, 3994, 2919, 2895, 453, 2296, 610, 345)}),
]
_TRT_UNKNOWN: dict[str, tuple[Any, ...]] = {"max_batch": (512, 2048), "memory_fraction": (0.90, 0.95),
                                             "kv_cache_dtype": ("auto", "fp8")}


#: the KV cache of these rows: the two TensorRT-LLM sources read disagree, so it is a band
_TRT_KV = ("KV-cache dtype not settled by the sources: evaluated bf16 (the checkpoint default, 'auto') and fp8. "
           "TensorRT-LLM's benchmarking page (docs/source/performance/perf-benchmarking.md @ac643b66, 'Quantization "
           "in the PyTorch Flow') says trtllm-bench reads the checkpoint's hf_quant_config.json and, for an FP8 "
           "checkpoint whose kv_cache_quant_algo is null ('Set to FP8 via benchmark') or FP8 ('Matches the "
           "checkpoint'), runs an FP8 KV cache, quoting the nvidia/Llama-3.1-*-Instruct-FP8 checkpoints' null. "
           "trtllm-bench's code (tensorrt_llm/bench/benchmark/utils/general.py, every stored version around v1.0) "
           "starts kv_cache_dtype at 'auto' (the YAML's kv_cache_config.dtype, absent in the published "
           "llm_options.yml) and runs the FP8 rule only when it is None, so the run keeps the checkpoint's own "
           "kv_cache_quant_algo, which no source read gives per checkpoint (docs/validation.md, TensorRT-LLM's "
           "tables). The harness drops a dtype whose KV reads alone, at full HBM bandwidth, cannot give a published "
           "figure of the same checkpoint (plan_validation_eval.kv_ruled_out)")


def _trtllm() -> list[ServingPoint]:
    points = []
    for preset, table, columns in _TRTLLM:
        model = get_preset(preset)
        if table == "Llama 3.3 70B":
            model = model.replace(name="llama-3.3-70b")
        for (device, tp), values in columns.items():
            gpu = device.split("-")[0]
            for (isl, osl), tps in zip(_ISL_OSL, values, strict=True):
                points.append(ServingPoint(
                    id=f"trtllm-{model.name}-fp8-{gpu.lower()}-tp{tp}-{isl}in{osl}out", source="trtllm-perf",
                    where=f"'{table}' table, column '{gpu} TP{tp} (FP8)', row ISL/OSL {isl}/{osl}: {tps:,} tokens/sec",
                    model=model, hardware=f"{gpu} SXM (DGX {gpu})", device=device, tp=tp,
                    engine="TensorRT-LLM v1.0 PyTorch backend (trtllm-bench throughput)", weights="fp8",
                    kv_cache_dtype=None, prompt_len=isl, output_len=osl, batch=None, max_batch=None,
                    memory_fraction=None, memory_rule="trtllm", metric="output_tokens_per_s", value=float(tps),
                    text=f"{tps:,} Total Output Throughput (tokens/sec)", unknown=_TRT_UNKNOWN,
                    notes=(_TRT_KV, "trtllm-bench's batch cap (its own heuristic; the LLM API default is 2048) and "
                           "the memory fraction (0.90 or 0.95) are not published per row: evaluated over their "
                           "plausible values")))
    return points


_OCI_LATENCY = [(1, 3.530), (2, 3.583), (4, 3.734), (8, 3.974), (16, 4.375), (32, 5.130), (64, 6.919), (128, 10.340),
                (256, 17.750)]
_OCI_NOTES = ("vLLM's defaults where the blog states no override: max_num_seqs 256, gpu_memory_utilization 0.9; the "
              "KV-cache dtype is not published: evaluated bf16 and fp8",)


def _oci(metric: str, isl: int, osl: int, batch: int | None, value: float, where: str, text: str) -> ServingPoint:
    tag = f"b{batch}" if batch else "max"
    return ServingPoint(
        id=f"oci-mi300x-llama3.1-405b-fp8-tp8-{isl}in{osl}out-{tag}", source="oci-mi300x", where=where,
        model=get_preset("llama-3.1-405b"), hardware="BM.GPU.MI300X.8 (8 × MI300X 192 GB)", device="MI300X", tp=8,
        engine="vLLM (ROCm)", weights="fp8", kv_cache_dtype=None, prompt_len=isl, output_len=osl, batch=batch,
        max_batch=256, memory_fraction=0.9, memory_rule="vllm", metric=metric, value=value, text=text,  # type: ignore[arg-type]
        unknown={"kv_cache_dtype": ("auto", "fp8")}, notes=_OCI_NOTES)


OCI = [_oci("batch_latency_s", 128, 128, b, s, f"Latency measurements: Batch Size {b}: Average latency {s} s",
            f"{s} s average latency") for b, s in _OCI_LATENCY]
OCI += [_oci("output_tokens_per_s", 128, osl, None, tps, f"Throughput measurements: {name}, input 128, output {osl}: "
             f"{tps} TPS", f"{tps} output TPS")
        for name, osl, tps in (("Typical chatbot online scenario", 128, 1993), ("Generation heavy use case", 2048, 2794))]

AMD = [ServingPoint(
    id=f"amd-vllm-llama3.1-70b-fp8kv-tp8-128in2048out-b{b}", source="amd-rocm-vllm",
    where=f"Latency Measurements: Llama 3.1 70B FP8 TP 8, Batch Size {b}, Input 128, Output 2048: {s} s",
    model=get_preset("llama-3.1-70b"), hardware="8x AMD MI300X (192GB HBM3 750W)", device="MI300X", tp=8,
    engine="vLLM 0.10.2 (rocm/vllm:rocm7.0.0_vllm_0.10.2_20251006)", weights="fp8", kv_cache_dtype="fp8",
    prompt_len=128, output_len=2048, batch=b, max_batch=None, memory_fraction=None, memory_rule="none",
    metric="batch_latency_s", value=s, text=f"{s} s",
    notes=("amd/Llama-3.1-70B-Instruct-FP8-KV: fp8 weights and fp8 KV cache; the latency of a batch of B requests "
           "(vLLM's latency benchmark): prefill + 2048 decode steps",))
    for b, s in ((1, 15.882), (2, 17.934), (4, 18.487))]

POINTS = [*NIM, *_trtllm(), *OCI, *AMD]
