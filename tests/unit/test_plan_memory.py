"""Memory formulas against published anchors (the ZeRO paper; Korthikanti et al. 2022, "Reducing Activation
Recomputation in Large Transformer Models"; the standard KV-cache size)."""

import pytest

from accelkit.core import Cluster, Recipe, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.models.presets import gpt3_175b
from accelkit.plan import plan
from accelkit.plan.memory import kv_cache_bytes, layer_activation_bytes, model_state_bytes


@pytest.mark.parametrize("zero,expected_gb", [(0, 120), (1, 31.4), (2, 16.6), (3, 1.88)])
def test_zero_paper_figure_1(zero, expected_gb):
    # Rajbhandari et al. 2020 (ZeRO), Figure 1 — 7.5B params, 64 devices, K = 12
    states = model_state_bytes(7.5e9, precision="fp16", optimizer="adam", zero=zero, dp=64)
    total = states["weights"] + states["gradients"] + states["optimizer"]
    assert total / 1e9 == pytest.approx(expected_gb, rel=0.01)


def test_offload_moves_optimizer_states_to_host():
    states = model_state_bytes(1e9, precision="bf16", optimizer="adam", zero=0, dp=1, offload=True)
    assert states["optimizer"] == 0 and states["optimizer_offloaded"] == 12e9


def _gpt(h=12288, a=96):
    return gpt3_175b().replace(hidden_size=h, num_heads=a, ffn_hidden_size=4 * h)


def test_korthikanti_eq1_no_parallelism():
    # Korthikanti et al. 2022, Eq. 1: s·b·h·(34 + 5·a·s/h) bytes per layer, 16-bit, no recompute
    m, s, b = _gpt(), 2048, 1
    got = layer_activation_bytes(m, tokens=s * b, seq=s, e=2, kernels="fused", attention="math")
    want = s * b * m.hidden_size * (34 + 5 * m.num_heads * s / m.hidden_size)
    assert got == pytest.approx(want, rel=0.01)


def test_korthikanti_table2_tp_sp_selective():
    # Korthikanti et al. 2022, Table 2: 34·s·b·h/t with tensor + sequence parallel and selective recompute
    m, s, b, t = _gpt(), 2048, 1, 8
    got = layer_activation_bytes(m, tokens=s * b, seq=s, e=2, tp=t, sequence_parallel=True, recompute="selective",
                                 kernels="fused", attention="math")
    assert got == pytest.approx(34 * s * b * m.hidden_size / t, rel=0.01)


def test_korthikanti_full_recompute_keeps_layer_input():
    # Korthikanti et al. 2022, Table 2 (full recompute): 2·s·b·h bytes per layer with full recompute
    m, s, b = _gpt(), 2048, 4
    got = layer_activation_bytes(m, tokens=s * b, seq=s, e=2, recompute="full")
    assert got == 2 * s * b * m.hidden_size


def test_kv_cache_formula_and_tp_floor():
    # the KV cache: 2·L·kv_heads·head_dim·seq·batch·bytes; per rank max(kv/t, 1) heads
    m = get_preset("llama-3.1-70b")  # 80 layers, 8 KV heads of 128
    assert kv_cache_bytes(m, batch=3, seq=1000, bytes_per_element=2) == 2 * 80 * 8 * 128 * 1000 * 3 * 2
    assert kv_cache_bytes(m, batch=1, seq=1000, bytes_per_element=2, tp=4) == 2 * 80 * 2 * 128 * 1000 * 2
    assert kv_cache_bytes(m, batch=1, seq=1000, bytes_per_element=2, tp=16) == 2 * 80 * 1 * 128 * 1000 * 2


def test_layout_that_does_not_fit_is_reported_not_raised():
    w = Workload(model=get_preset("llama-3.1-70b"), task="train", seq_len=4096,
                 recipe=Recipe(precision="bf16", dp=1, tp=8, grad_accum=8))
    est = plan(w, Cluster(device=get_device("h100"), num_devices=8))
    d = est.details
    assert d["fits"] is False
    assert d["overflow"]["over_by_bytes"] > 0
    assert d["overflow"]["largest"][0] == "optimizer"  # 70.6B × 12 B / 8 ranks ≫ 80 GB
    assert d["memory_per_device_bytes"]["total"] > d["memory_capacity_bytes"]
