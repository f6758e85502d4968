"""Frozen weights (LoRA) in the training model (issue 32 item: NeMo's LoRA rows): no weight gradients, optimizer
states or gradient reduction, and backward without the weight-gradient GEMMs."""

import pytest

from accelkit.core import Cluster, Recipe, UserError, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import Layout, PlanOptions, plan, search
from accelkit.plan import flops as F

W = Workload(model=get_preset("llama-3.1-8b"), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))
H100x8 = Cluster(device=get_device("h100"), num_devices=8)
LAY = Layout(dp=8, tp=1, pp=1, zero=1, micro_batch=1, grad_accum=4)


def _plan(frozen: bool) -> dict:
    return plan(W, H100x8, PlanOptions(use_calibration=False, frozen_weights=frozen), layout=LAY).details


def test_frozen_weights_keep_no_gradients_or_optimizer_states_and_reduce_nothing():
    full, lora = _plan(False), _plan(True)
    mem_full, mem_lora = full["memory_per_device_bytes"], lora["memory_per_device_bytes"]
    assert mem_lora["weights"] == mem_full["weights"] and mem_lora["activations"] == mem_full["activations"]
    assert mem_full["gradients"] > 0 and mem_full["optimizer"] > 0
    assert mem_lora["gradients"] == 0 and mem_lora["optimizer"] == 0
    assert full["grad_reduction"] is not None and lora["grad_reduction"] is None


def test_frozen_weights_skip_the_weight_gradient_gemms():
    full, lora = _plan(False), _plan(True)
    # 3 matmul passes become 2, attention (no weights) is unchanged: the compute drops by less than a third, and by
    # more than a quarter for an 8B at 4K tokens, where the matmuls are most of it
    drop = 1 - lora["time_breakdown_s"]["compute"] / full["time_breakdown_s"]["compute"]
    assert 0.25 < drop < 1 / 3
    tokens = 8 * 4 * 4096
    matmul_fwd = 2.0 * tokens * (W.model.num_layers * F.layer_matmul_params(W.model) + F.head_matmul_params(W.model))
    assert lora["flops_per_step"] == pytest.approx(full["flops_per_step"] - matmul_fwd)
    assert lora["step_time_s"] < full["step_time_s"]


def test_frozen_weights_refuse_zero_3_and_the_search_keeps_zero_0():
    options = PlanOptions(use_calibration=False, frozen_weights=True)
    with pytest.raises(UserError, match=r"^--frozen-weights with --zero 3 is not modelled"):
        plan(W, H100x8, options, layout=LAY._replace(zero=3))
    with pytest.raises(UserError, match=r"^--frozen-weights with --zero 3"):
        search(W, H100x8, options=options, fixed={"zero": 3}, global_batch=32)
    assert {c.layout.zero for c in search(W, H100x8, options=options, global_batch=32)} == {0}
