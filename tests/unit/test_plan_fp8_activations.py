"""FP8 activation memory as Transformer Engine keeps it (issue 32): `--fp8-activations te` keeps the GEMM inputs TE's
modules quantize, 1 byte an element, where torchao.float8 (the default, bf16) keeps the bf16 tensors."""

import pytest

from accelkit.core import Cluster, Recipe, UserError, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import Layout, PlanOptions, plan
from accelkit.plan.memory import layer_activation_bytes

H100 = get_device("h100")
TOKENS = 8192


def _delta_per_token(model, tp: int) -> float:
    """By hand, bytes a layer keeps per token with TE minus bf16 (e = 2): the two norm outputs 2 + 2 B → 1 + 2 B
    (QKV input column-wise, fc1 input both copies; 2 + 1 under sequence parallelism), an FP8 copy of the attention
    output for the projection (+1 B), the fc2 input 2 B → 1 B (the fc1 output stays bf16)."""
    h, q, f = model.hidden_size, model.num_heads * model.head_size, model.ffn_hidden_size
    return (3 - 4) * h + q / tp + (1 - 2) * f / tp


@pytest.mark.parametrize("name", ["llama-3.1-8b", "llama-3.1-70b", "gpt3-175b"])
@pytest.mark.parametrize("tp, sp", [(1, False), (2, False), (2, True), (8, True)])
def test_layer_bytes_by_hand(name, tp, sp):
    model = get_preset(name)
    kw = dict(tokens=TOKENS, seq=TOKENS, e=2, tp=tp, sequence_parallel=sp, kernels="fused", attention="flash",
              dropout=False)
    bf16 = layer_activation_bytes(model, **kw)
    te = layer_activation_bytes(model, fp8_te=True, **kw)
    h = model.hidden_size
    norms = (3 - 4) * h / (tp if sp else 1)  # the norm outputs are split by sequence parallelism, the rest by tp
    q, f = model.num_heads * model.head_size, model.ffn_hidden_size
    assert te - bf16 == pytest.approx(TOKENS * (norms + q / tp - f / tp), rel=1e-12)
    if not sp:
        assert te - bf16 == pytest.approx(TOKENS * _delta_per_token(model, tp), rel=1e-12)
    assert te < bf16


def _workload(precision: str = "fp8") -> Workload:
    return Workload(model=get_preset("llama-3.1-8b"), task="train", seq_len=TOKENS, recipe=Recipe(precision=precision))


def _plan(fp8_activations: str, *, recompute: str = "none") -> dict:
    options = PlanOptions(use_calibration=False, kernels="fused", attention="flash", dropout=False,
                          fp8_activations=fp8_activations)
    lay = Layout(dp=8, tp=1, pp=1, zero=1, micro_batch=1, grad_accum=8, recompute=recompute)
    return plan(_workload(), Cluster(device=H100, num_devices=8), options, layout=lay).details


def test_the_plan_keeps_less_per_layer_and_runs_the_same_step():
    bf16, te = _plan("bf16"), _plan("te")
    model = get_preset("llama-3.1-8b")
    saved = bf16["memory_per_device_bytes"]["activations"] - te["memory_per_device_bytes"]["activations"]
    assert saved == pytest.approx(-model.num_layers * TOKENS * _delta_per_token(model, 1), rel=1e-9)
    assert te["step_time_s"] == bf16["step_time_s"]  # memory only: the GEMMs run in FP8 either way


def test_full_recompute_rebuilds_one_te_layer():
    # the layer inputs are bf16 residuals either way; the one layer rebuilt in backward keeps TE's FP8 inputs
    bf16, te = _plan("bf16", recompute="full"), _plan("te", recompute="full")
    model = get_preset("llama-3.1-8b")
    saved = bf16["memory_per_device_bytes"]["activations"] - te["memory_per_device_bytes"]["activations"]
    assert saved == pytest.approx(-TOKENS * _delta_per_token(model, 1), rel=1e-9)


@pytest.mark.parametrize("precision, kernels, msg", [
    ("bf16", "fused", "--precision bf16 keeps no FP8 activations"),
    ("fp8", "eager", "add --kernels fused"),
])
def test_refused_where_te_does_not_run(precision, kernels, msg):
    options = PlanOptions(use_calibration=False, kernels=kernels, fp8_activations="te")
    with pytest.raises(UserError, match="^--fp8-activations te") as err:
        plan(_workload(precision), Cluster(device=H100, num_devices=8), options,
             layout=Layout(dp=8, tp=1, pp=1, zero=1, micro_batch=1, grad_accum=8))
    assert msg in str(err.value)
