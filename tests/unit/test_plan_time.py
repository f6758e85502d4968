"""Step time and MFU against published runs (calibration.md, "Achieved efficiency")."""

import pytest

from accelkit.core import Cluster, Recipe, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.models.presets import gpt3_175b
from accelkit.plan import PlanOptions, comm, plan

# Korthikanti et al. 2022, Table 3 configurations (GPT, seq 2048, vocab 51200, A100-SXM4-80GB) and the
# Table 5 MFU with sequence parallel + selective recompute (calibration.md, Achieved efficiency row 4).
KORTHIKANTI = [
    # name, heads, hidden, layers, tp, pp, GPUs, global batch, micro-batch, published MFU
    ("22B", 64, 6144, 48, 8, 1, 8, 4, 4, 0.415),
    ("175B", 96, 12288, 96, 8, 8, 64, 64, 1, 0.514),
    ("530B", 128, 20480, 105, 8, 35, 280, 280, 1, 0.560),
    ("1T", 160, 25600, 128, 8, 64, 512, 512, 1, 0.563),
]


def _published_step_s(heads, h, layers, gpus, batch, mfu):
    """Table 5's iteration time, recovered from its MFU: Megatron model FLOPs / (MFU · GPUs · 312 TFLOP/s).
    (Gives 1.10 / 13.75 / 37.86 / 71.45 s — the paper prints 1.10 / 13.75 / 37.83 / 71.49 s.)"""
    s, v = 2048, 51200
    model_flops = 72 * batch * s * layers * h * h * (1 + s / (6 * h) + v / (12 * layers * h))
    return model_flops / (mfu * gpus * 312e12)


@pytest.mark.parametrize("row", KORTHIKANTI, ids=[r[0] for r in KORTHIKANTI])
def test_korthikanti_table5_step_time_within_20pct(row):
    name, heads, h, layers, tp, pp, gpus, batch, mb, mfu = row
    model = gpt3_175b().replace(name=f"gpt-{name}", num_heads=heads, hidden_size=h, num_layers=layers,
                                ffn_hidden_size=4 * h, vocab_size=51200)
    recipe = Recipe(precision="bf16", tp=tp, pp=pp, dp=gpus // (tp * pp), micro_batch=mb, grad_accum=batch // mb,
                    recompute="selective", sequence_parallel=True)
    workload = Workload(model=model, task="train", recipe=recipe, seq_len=2048, batch_size=batch)
    # Megatron in 2022: fused LayerNorm kernels, unfused (non-flash) attention
    est = plan(workload, Cluster(device=get_device("A100-SXM4-80GB"), num_devices=gpus),
               PlanOptions(attention="math", kernels="fused", use_calibration=False))
    published = _published_step_s(heads, h, layers, gpus, batch, mfu)
    assert est.details["step_time_s"] == pytest.approx(published, rel=0.20)
    assert est.details["fits"] is True


def _llama3_405b(dp, accum):
    # Llama 3 paper Table 4: TP 8, PP 16, seq 8192, 16 M tokens per batch, bf16 on H100; FSDP shards
    # optimizer states and gradients (ZeRO-2); 400 Gb/s RoCE per GPU = the default 50 GB/s scale-out
    recipe = Recipe(precision="bf16", tp=8, pp=16, dp=dp, zero=2, micro_batch=1, grad_accum=accum,
                    sequence_parallel=True)
    workload = Workload(model=get_preset("llama-3.1-405b"), task="train", recipe=recipe, seq_len=8192,
                        batch_size=dp * accum)
    return plan(workload, Cluster(device=get_device("H100-SXM5-80GB"), num_devices=8 * 16 * dp),
                PlanOptions(use_calibration=False))


def test_llama3_405b_mfu_8k_gpus():
    # calibration.md, Achieved efficiency row 3: MFU 0.43 at 8K GPUs (Llama 3 paper, Table 4)
    assert _llama3_405b(dp=64, accum=32).mfu == pytest.approx(0.43, abs=0.1)


def test_llama3_405b_mfu_16k_gpus_within_published_range():
    # 16K GPUs, batch 16 per DP rank: published 0.41. The planner models the plain 1F1B schedule, whose
    # bubble (15/31) is larger than that of Llama 3's interleaved schedule, so it lands lower; the issue's
    # criterion is "within 0.1 of the published 0.38–0.43".
    mfu = _llama3_405b(dp=128, accum=16).mfu
    assert 0.38 - 0.1 <= mfu <= 0.43 + 0.1


def test_ring_collectives():
    # 2(n−1)/n·S/B and (n−1)/n·S/B, no latency
    assert comm.all_reduce_s(8e9, 8, 100e9, 0.0) == pytest.approx(2 * 7 / 8 * 8e9 / 100e9)
    assert comm.reduce_scatter_s(8e9, 8, 100e9, 0.0) == pytest.approx(7 / 8 * 8e9 / 100e9)
    assert comm.all_reduce_s(8e9, 1, 100e9, 1e-5) == 0


def test_mesh_fabric_group_bandwidth():
    # hardware.csv: MI300X xGMI mesh, 64 GB/s per peer: a group of 2 gets 64, of 8 gets 448 (7 × 64)
    mi = get_device("mi300x")
    assert comm.group_bandwidth(Cluster(device=mi, num_devices=8), 2)[0] == 64e9
    assert comm.group_bandwidth(Cluster(device=mi, num_devices=8), 8)[0] == 448e9
    h100 = Cluster(device=get_device("h100"), num_devices=16)
    assert comm.group_bandwidth(h100, 2)[0] == 450e9  # switched NVLink: full link for any group
    assert comm.group_bandwidth(h100, 16)[1] == "scale-out"


def test_decode_is_bandwidth_bound_and_fp8_kv_helps_at_long_context():
    base = dict(model=get_preset("llama-3.1-8b"), task="infer", prompt_len=32768, output_len=256, batch_size=16)
    cluster = Cluster(device=get_device("h100"), num_devices=1)
    auto = plan(Workload(recipe=Recipe(precision="bf16"), **base), cluster).details
    fp8 = plan(Workload(recipe=Recipe(precision="bf16", kv_cache_dtype="fp8"), **base), cluster).details
    small = plan(Workload(model=base["model"], task="infer", prompt_len=128, output_len=512, batch_size=1,
                          recipe=Recipe(precision="bf16")), cluster).details
    assert small["bottleneck"] == "memory"  # batch-1 decode reads every weight per token
    assert fp8["max_batch"] >= 2 * auto["max_batch"] - 1  # calibration.md Serving row 3: 2x KV capacity
    assert fp8["decode_time_per_token_s"] < auto["decode_time_per_token_s"]
    assert fp8["memory_per_device_bytes"]["kv_cache"] == auto["memory_per_device_bytes"]["kv_cache"] // 2
