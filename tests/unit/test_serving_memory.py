"""KV sizing in one place (accelkit/core/serving_memory.py): bytes per token with the quantized caches' scales,
the engine's budget rule, blocks, the smallest budget — and the planner's kv_cache_capacity built on them.
Pure Python: the engine's allocation is checked against these in tests/integration/test_kv_sizing_agreement.py."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from accelkit.core import Cluster, Recipe, Workload
from accelkit.core.serving_memory import (
    CPU_KV_BUDGET_BYTES,
    ENGINE_DTYPE_SCHEMES,
    kv_budget_bytes,
    kv_bytes_per_token,
    kv_cache_num_blocks,
    min_kv_cache_bytes,
    weight_bytes_per_param,
)
from accelkit.core.units import GiB
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import PlanOptions, plan

LLAMA_70B = {"num_layers": 80, "num_kv_heads": 8, "head_dim": 128}


def test_bytes_per_token_auto_is_the_model_dtype():
    # 2 · 80 layers · 8 KV heads · 128 · 2 bytes = 320 KiB per token for Llama 3.1 70B in bf16
    assert kv_bytes_per_token(**LLAMA_70B, kv_cache_dtype="auto", dtype_bytes=2) == 327_680
    assert kv_bytes_per_token(**LLAMA_70B, kv_cache_dtype="auto", dtype_bytes=4) == 655_360


@pytest.mark.parametrize("kind", ["fp8", "int8"])
def test_bytes_per_token_quantized_counts_a_float16_scale_per_token_and_head(kind):
    # 1-byte codes + one 2-byte scale per token, KV head and tensor: 2 · 80 · 8 · (128 + 2), not 2 · 80 · 8 · 128
    got = kv_bytes_per_token(**LLAMA_70B, kv_cache_dtype=kind, dtype_bytes=2)
    assert got == 2 * 80 * 8 * 130 == 166_400
    # the model dtype does not enter: codes are 1 byte whatever the weights are
    assert kv_bytes_per_token(**LLAMA_70B, kv_cache_dtype=kind, dtype_bytes=4) == got
    # (D + 2) / 2D of bf16: 0.52 at head_dim 64, 0.508 at 128
    half = {"num_layers": 2, "num_kv_heads": 1, "head_dim": 64}
    assert kv_bytes_per_token(**half, kv_cache_dtype=kind, dtype_bytes=2) / kv_bytes_per_token(
        **half, kv_cache_dtype="auto", dtype_bytes=2) == pytest.approx(66 / 128)
    # vLLM's and TensorRT-LLM's layout: one scale per layer tensor, none per token — 1 byte per element
    assert kv_bytes_per_token(**LLAMA_70B, kv_cache_dtype=kind, dtype_bytes=2, kv_scales="per-tensor") == 2 * 80 * 8 * 128
    with pytest.raises(ValueError, match=r"kv_scales='per-block' is not valid; expected one of per-token-head, "):
        kv_bytes_per_token(**LLAMA_70B, kv_cache_dtype=kind, dtype_bytes=2, kv_scales="per-block")  # type: ignore[arg-type]


@pytest.mark.parametrize(("field", "value"), [("num_kv_heads", 0), ("head_dim", 0), ("dtype_bytes", 0),
                                              ("num_layers", -1), ("head_dim", 1.5), ("num_kv_heads", True)])
def test_bytes_per_token_refuses_bad_shapes_naming_the_field(field, value):
    args = {**LLAMA_70B, "kv_cache_dtype": "auto", "dtype_bytes": 2, field: value}
    with pytest.raises(ValueError, match=rf"^{field}={value!r} is not valid"):
        kv_bytes_per_token(**args)


def test_bytes_per_token_refuses_an_unknown_kv_dtype():
    with pytest.raises(ValueError, match=r"kv_cache_dtype='fp4' is not valid; expected one of auto, fp8, int8"):
        kv_bytes_per_token(**LLAMA_70B, kv_cache_dtype="fp4", dtype_bytes=2)  # type: ignore[arg-type]


def test_budget_rule_is_the_engines():
    # an explicit budget wins everywhere
    assert kv_budget_bytes(kv_cache_memory_bytes=123, device_free_bytes=10 * GiB, gpu_memory_utilization=0.9) == 123
    assert kv_budget_bytes(kv_cache_memory_bytes=123, device_free_bytes=None, gpu_memory_utilization=0.9) == 123
    # a GPU: the fraction of what the weights left free; a CPU: 1 GiB
    assert kv_budget_bytes(kv_cache_memory_bytes=None, device_free_bytes=10 * GiB, gpu_memory_utilization=0.5) == 5 * GiB
    assert kv_budget_bytes(kv_cache_memory_bytes=None, device_free_bytes=None, gpu_memory_utilization=0.5) \
        == CPU_KV_BUDGET_BYTES == GiB
    # weights that leave nothing free leave no budget (the engine then refuses: fewer tokens than one context)
    assert kv_budget_bytes(kv_cache_memory_bytes=None, device_free_bytes=-5, gpu_memory_utilization=0.9) == 0
    with pytest.raises(ValueError, match=r"gpu_memory_utilization=1.5 is not valid"):
        kv_budget_bytes(kv_cache_memory_bytes=None, device_free_bytes=GiB, gpu_memory_utilization=1.5)


def test_blocks_keep_one_scratch_block_out():
    # 10 whole blocks of 16 tokens × 100 bytes in the budget, one of them the scratch block
    assert kv_cache_num_blocks(budget_bytes=10 * 1600 + 1599, bytes_per_token=100, block_size=16) == 9
    assert kv_cache_num_blocks(budget_bytes=1600, bytes_per_token=100, block_size=16) == 0
    assert kv_cache_num_blocks(budget_bytes=0, bytes_per_token=100, block_size=16) == 0
    with pytest.raises(ValueError, match="bytes_per_token=0"):
        kv_cache_num_blocks(budget_bytes=1600, bytes_per_token=0, block_size=16)


@given(max_model_len=st.integers(2, 1 << 20), block_size=st.integers(1, 256), per_token=st.integers(1, 1 << 20))
def test_the_smallest_budget_holds_one_context_and_one_byte_less_does_not(max_model_len, block_size, per_token):
    least = min_kv_cache_bytes(max_model_len=max_model_len, block_size=block_size, bytes_per_token=per_token)
    assert kv_cache_num_blocks(budget_bytes=least, bytes_per_token=per_token, block_size=block_size) * block_size \
        >= max_model_len
    assert kv_cache_num_blocks(budget_bytes=least - 1, bytes_per_token=per_token, block_size=block_size) \
        * block_size < max_model_len


def test_model_spec_bytes_per_token_is_the_same_function():
    spec = get_preset("llama-3.1-70b")
    assert spec.kv_bytes_per_token(2) == 327_680
    assert spec.kv_bytes_per_token(2, "fp8") == spec.kv_bytes_per_token(4, "int8") == 166_400
    assert get_preset("bert-base").kv_bytes_per_token(2, "fp8") == 0


def _capacity(kv="auto", hardware="h100", precision="bf16", **options):
    w = Workload(model=get_preset("llama-3.1-8b"), task="infer", prompt_len=1000, output_len=24,
                 recipe=Recipe(precision=precision, kv_cache_dtype=kv))
    est = plan(w, Cluster(device=get_device(hardware), num_devices=1), PlanOptions(**options))
    return est.details["kv_cache_capacity"], est.details


@pytest.mark.parametrize(("kv", "per_token"), [("auto", 2 * 32 * 8 * 128 * 2), ("fp8", 2 * 32 * 8 * 130),
                                               ("int8", 2 * 32 * 8 * 130)])
def test_plan_reports_the_kv_tokens_an_explicit_budget_holds(kv, per_token):
    cap, doc = _capacity(kv, kv_cache_memory_bytes=10 * GiB, block_size=32)
    blocks = 10 * GiB // (per_token * 32) - 1
    assert cap == {"bytes_per_token": per_token, "budget_bytes": 10 * GiB, "budget_source": "kv_cache_memory_bytes",
                   "block_size": 32, "num_blocks": blocks, "num_tokens": blocks * 32,
                   "num_seqs_at_context": blocks // 32}  # 1024-token sequences: 32 blocks of 32
    assert any(a.startswith("kv_cache_capacity: ") for a in doc["assumptions"])


def test_plan_kv_budget_on_a_gpu_is_utilization_of_what_the_weights_leave():
    cap, doc = _capacity(gpu_memory_utilization=0.5)
    device = get_device("h100")
    free = device.memory_bytes - doc["memory_per_device_bytes"]["weights"] - PlanOptions().overhead_bytes
    assert cap["budget_source"] == "gpu_memory_utilization"
    assert cap["budget_bytes"] == pytest.approx(0.5 * free, abs=1)  # the planner's weights are rounded in the doc
    default, _ = _capacity()
    assert default["budget_bytes"] == pytest.approx(0.9 * free, abs=1)


def test_plan_kv_budget_on_a_cpu_is_the_engines_1_gib():
    from accelkit.core import DeviceSpec

    cpu = DeviceSpec(name="cpu: test", vendor="cpu", memory_bytes=64 * GiB, memory_bandwidth_bytes_per_s=1e11,
                     peak_flops={"fp32": 1e12})
    w = Workload(model=get_preset("tiny-llama"), task="infer", prompt_len=100, output_len=28,
                 recipe=Recipe(precision="fp32"))
    cap = plan(w, Cluster(device=cpu, num_devices=1), PlanOptions(use_calibration=False)).details["kv_cache_capacity"]
    assert cap["budget_source"] == "cpu_default" and cap["budget_bytes"] == GiB


def test_planned_kv_cache_memory_counts_the_scales():
    # the plan's memory_per_device kv_cache entry: (128 + 2) bytes per head and token under fp8, not 128 — unless
    # the plan models vLLM's per-tensor scales
    docs = {kv + scales: _capacity(kv, kv_cache_memory_bytes=GiB, kv_cache_scales=scales)[1]
            for kv in ("auto", "fp8") for scales in ("per-token-head", "per-tensor")}
    per_seq = {k: d["memory_per_device_bytes"]["kv_cache"] / d["batch"] for k, d in docs.items()}
    assert per_seq["autoper-tensor"] == per_seq["autoper-token-head"]  # a model-dtype cache has no scales
    assert per_seq["fp8per-token-head"] / per_seq["autoper-token-head"] == pytest.approx(130 / 256, rel=1e-9)
    assert per_seq["fp8per-tensor"] / per_seq["autoper-token-head"] == pytest.approx(128 / 256, rel=1e-9)
    assert docs["fp8per-tensor"]["kv_cache_capacity"]["bytes_per_token"] == 2 * 32 * 8 * 128


def test_weight_bytes_per_param_is_one_table_for_the_planner_and_the_preflight():
    assert [weight_bytes_per_param(ENGINE_DTYPE_SCHEMES[d]) for d in ("float32", "bfloat16", "float16")] == [4, 2, 2]
    assert weight_bytes_per_param("int4-weight") == 0.5 + 4 / 128  # a bf16 scale and zero point per group of 128
    with pytest.raises(ValueError, match=r"weight scheme 'int3' is not valid; expected one of fp32, "):
        weight_bytes_per_param("int3")
    spec = get_preset("llama-3.1-8b")
    for quantization in (None, "int4-weight", "fp8-weight"):
        w = Workload(model=spec, task="infer", recipe=Recipe(precision="bf16", quantization=quantization))
        weights = plan(w, Cluster(device=get_device("h100"), num_devices=1)).details["memory_per_device_bytes"]["weights"]
        # (the embedding and the untied LM head stay 16-bit under weight quantization, as the engines hold them)
        ends = spec.num_embedding_params() + spec.vocab_size * spec.hidden_size + spec.hidden_size
        wb = weight_bytes_per_param(quantization or "bf16")
        assert weights == round((spec.num_params() - ends) * wb + ends * max(wb, 2))
