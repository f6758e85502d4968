"""FLOPs formulas against their published forms (Narayanan et al. 2021, Megatron-LM at scale; Chowdhery et al.
2022, PaLM, appendix B)."""

import pytest

from accelkit.core import Cluster, Recipe, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.models.presets import gpt3_175b
from accelkit.plan import Layout, PlanOptions, make_context
from accelkit.plan import flops as F
from accelkit.plan.evaluate import evaluate_train


@pytest.mark.parametrize("b,s", [(1, 2048), (64, 2048), (8, 4096)])
def test_megatron_formula(b, s):
    # Narayanan et al. 2021, without recomputation (their Eq. 3 is the 96· form with it): 72·B·s·L·h²·(1 + s/(6h) + V/(12·L·h)) for a GPT without biases counted
    m = gpt3_175b().replace(vocab_size=51200)
    h, L, V = m.hidden_size, m.num_layers, m.vocab_size
    want = 72 * b * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert F.training_flops(m, batch=b, seq=s) == pytest.approx(want, rel=1e-9)


def test_palm_formula_plus_lm_head():
    # PaLM (Chowdhery et al. 2022), appendix B: 6N + 12·L·H·Q·T per token, N without embeddings; we also count the LM head
    m, s = get_preset("llama-3.1-8b"), 8192
    n_matmul = m.num_layers * F.layer_matmul_params(m) + F.head_matmul_params(m)
    want = 6 * n_matmul + 12 * m.num_layers * m.num_heads * m.head_size * s
    assert F.training_flops(m, batch=1, seq=s) / s == pytest.approx(want, rel=1e-12)  # per token


def test_decode_flops_per_token():
    # forward per generated token: 2·N_matmul + attention over the context (QKᵀ and A·V: 4·L·H·Q·T)
    m, ctx = get_preset("llama-3.1-8b"), 1000
    n_matmul = m.num_layers * F.layer_matmul_params(m) + F.head_matmul_params(m)
    assert F.decode_flops(m, batch=1, context=ctx) == 2 * n_matmul + 4 * m.num_layers * m.num_heads * m.head_size * ctx


def test_moe_counts_active_experts_only():
    m = get_preset("mixtral-8x7b")
    dense_like = m.replace(kind="decoder", family="mistral", num_experts=None, experts_per_token=None)
    expert = 3 * m.hidden_size * m.ffn_hidden_size
    assert F.layer_matmul_params(m) == F.layer_matmul_params(dense_like) + expert + m.hidden_size * 8


def test_full_recompute_adds_hardware_flops_not_model_flops():
    # the planner's training step: full recompute re-runs each block's forward in backward (3 → 4 forward passes of
    # matmul time), while the model FLOPs — MFU's numerator — stay those of the model
    w = Workload(model=gpt3_175b(), task="train", seq_len=2048, recipe=Recipe(precision="bf16"))
    ctx = make_context(w, Cluster(device=get_device("h100"), num_devices=64), PlanOptions(use_calibration=False))
    none, full = (evaluate_train(ctx, Layout(dp=1, tp=8, pp=8, micro_batch=1, grad_accum=8, recompute=r))
                  for r in ("none", "full"))
    assert full.flops_per_step == none.flops_per_step
    assert full.time_breakdown["compute"] > none.time_breakdown["compute"] * 1.2
    assert full.mfu < none.mfu
