"""torchtitan's op-level selective activation checkpointing (issue 32 item: the runs that used it): every compute
op's output is saved except every second matmul of a block, which backward recomputes with the pointwise ops."""

import pytest

from accelkit.core import Cluster, Recipe, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import Layout, PlanOptions, plan
from accelkit.plan import flops as F
from accelkit.plan.memory import layer_activation_bytes

M = get_preset("llama-3.1-8b")


def test_every_second_matmul_of_a_block_is_recomputed():
    # Llama's block runs q, k, v, o, gate, up, down: the policy keeps q, v, gate, down and recomputes k, o, up
    h, kv, f = 4096, 1024, 14336
    assert F.op_recompute_share(M) == pytest.approx((h * kv + h * h + h * f) / (2 * h * h + 2 * h * kv + 3 * h * f))


def test_op_policy_keeps_the_block_input_the_saved_matmuls_and_attention():
    kw = dict(tokens=4096, seq=4096, e=2, kernels="eager", attention="flash", dropout=False)
    op = layer_activation_bytes(M, recompute="selective", selective="op", **kw)
    # x (h), q (h), v (kv), attention output (h) + fp32 logsumexp per head, gate (ffn), down (h)
    assert op == 4096 * (2 * (4096 + 4096 + 1024 + 4096 + 14336 + 4096) + 4 * 32)
    assert layer_activation_bytes(M, recompute="full", **kw) < op < layer_activation_bytes(M, recompute="none", **kw)
    # Megatron's selective recompute keeps everything a flash kernel keeps
    assert layer_activation_bytes(M, recompute="selective", **kw) == layer_activation_bytes(M, recompute="none", **kw)


def test_op_policy_costs_a_share_of_the_matmuls_and_saves_memory():
    w = Workload(model=M, task="train", seq_len=4096, recipe=Recipe(precision="bf16"))
    cluster, lay = Cluster(device=get_device("h100"), num_devices=8), Layout(dp=8, tp=1, pp=1, zero=3, grad_accum=2,
                                                                             recompute="selective")
    megatron = plan(w, cluster, PlanOptions(use_calibration=False), layout=lay).details
    op = plan(w, cluster, PlanOptions(use_calibration=False, selective_recompute="op"), layout=lay).details
    assert op["memory_per_device_bytes"]["activations"] < megatron["memory_per_device_bytes"]["activations"]
    assert op["time_breakdown_s"]["compute"] > megatron["time_breakdown_s"]["compute"]
    assert op["step_time_s"] > megatron["step_time_s"]
    assert any("op-level" in a for a in op["assumptions"])


def test_flash_attention_1_runs_at_half_flash_attention_2():
    # FA2 paper (arXiv 2307.08691 §4.1): FA2 around 2× faster than FlashAttention; the FlashAttention repository's
    # 2022 GPT-3 table ran FA1 and was not expressible before
    from accelkit.plan.context import make_context
    from accelkit.plan.time import attention_flop_s

    w = Workload(model=M, task="train", seq_len=2048, recipe=Recipe(precision="bf16"))
    cluster = Cluster(device=get_device("a100"), num_devices=8)
    fa2 = make_context(w, cluster, PlanOptions(use_calibration=False, attention="flash2"))
    fa1 = make_context(w, cluster, PlanOptions(use_calibration=False, attention="flash1"))
    assert attention_flop_s(fa2, 2048, causal=True) / attention_flop_s(fa1, 2048, causal=True) == pytest.approx(2.0)
    assert any("FlashAttention-1" in a for a in fa1.assumptions)
