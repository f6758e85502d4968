"""The planner's gradient compression (issue 17): the gradient tensors it reasons about are the real modules'
tensors, its PowerSGD split is torch's own rule, the bytes it predicts are the buffers the hooks hand over, and
`--compare-compression` shows a gain over a slow scale-out network and none inside one NVLink node."""

import collections

import pytest

from accelkit.core import Cluster, Recipe, UserError, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import Layout, PlanOptions, plan
from accelkit.plan.compression import compare_compression
from accelkit.plan.grad_comm import powersgd_split
from accelkit.plan.grad_shapes import model_grads
from accelkit.plan.search import search

H100 = get_device("h100")
NO_CAL = PlanOptions(use_calibration=False)
TINY = ("tiny-llama", "tiny-qwen2", "tiny-mistral", "tiny-mixtral", "tiny-gpt", "tiny-bert", "tiny-vit", "tiny-resnet")


def _views(grads):
    counts = collections.Counter()
    for g in grads:
        counts[(g.rows, g.cols)] += g.copies
    return counts


@pytest.mark.parametrize("name", TINY)
def test_gradient_tensors_are_the_built_modules_tensors(name):
    from accelkit.models.build import build_model

    spec = get_preset(name)
    module = build_model(spec, device="meta")
    real = collections.Counter((p.shape[0], p.numel() // p.shape[0]) for p in module.parameters())
    assert _views(model_grads(spec).all(spec.num_layers)) == real
    assert sum(real[k] * k[0] * k[1] for k in real) == spec.num_params()


@pytest.mark.parametrize(
    "biases", [{"qkv_bias": True, "out_bias": True}, {"mlp_bias": True}, {"qkv_bias": True, "out_bias": True, "mlp_bias": True}],
    ids=["attention_bias", "mlp_bias", "both"],
)
def test_llama_attention_and_mlp_biases_are_gradient_tensors(biases):
    """Llama's attention_bias gives o_proj a bias too, its mlp_bias gate/up/down ones: each is a 1-D gradient."""
    from accelkit.models.build import build_model

    spec = get_preset("tiny-llama").replace(**biases)
    module = build_model(spec, device="meta")
    real = collections.Counter((p.shape[0], p.numel() // p.shape[0]) for p in module.parameters())
    assert sum(n for (_, cols), n in real.items() if cols == 1) > 2 * spec.num_layers + 1  # more than the norms
    assert _views(model_grads(spec).all(spec.num_layers)) == real
    assert sum(g.numel for g in model_grads(spec).all(spec.num_layers)) == spec.num_params()


@pytest.mark.parametrize("rank", [1, 4, 16])
@pytest.mark.parametrize("name", ["tiny-llama", "tiny-mixtral", "tiny-gpt", "tiny-resnet"])
def test_powersgd_split_is_torchs_should_compress(name, rank):
    from torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import _should_compress

    from accelkit.models.build import build_model

    spec = get_preset(name)
    p_q = uncompressed = 0
    for p in build_model(spec, device="meta").parameters():
        n, m = p.shape[0], p.numel() // p.shape[0]
        r = min(n, m, rank)
        if _should_compress(n, m, r, 2.0)[0]:
            p_q += (n + m) * r
        else:
            uncompressed += n * m
    split = powersgd_split(model_grads(spec).all(spec.num_layers), rank, 2.0)
    assert (split.p_elements + split.q_elements, split.uncompressed_elements) == (p_q, uncompressed)


def _tiny_plan(compression, *, precision="fp32", dp=2, zero=0, model="tiny-llama", **psgd):
    recipe = Recipe(precision=precision, dp=dp, zero=zero, micro_batch=2, grad_compression=compression, **psgd)
    w = Workload(model=get_preset(model), task="train", seq_len=32, recipe=recipe)
    return plan(w, Cluster(device=H100, num_devices=dp), PlanOptions(use_calibration=False, grad_reduce_fp32=True))


def test_tiny_llama_bytes_per_step_per_rank():
    # 139,584 fp32 gradients; PowerSGD r4 sends P+Q of the 16 matrices and the 5 norm vectors as they are
    assert _tiny_plan("none").details["grad_reduction"]["buffer_bytes_per_step"] == 139_584 * 4
    assert _tiny_plan("bf16").details["grad_reduction"]["buffer_bytes_per_step"] == 139_584 * 2
    psgd = _tiny_plan("powersgd").details["grad_reduction"]
    assert psgd["buffer_bytes_per_step"] == 13_120 * 4 and psgd["ratio"] <= 0.25
    assert psgd["powersgd"] == {"compressed_tensors": 16, "uncompressed_tensors": 5, "p_elements": 8_192,
                                "q_elements": 4_608, "uncompressed_elements": 320}
    assert len(psgd["collectives"]) == 3  # uncompressed, P, Q


def test_fsdp_reduce_dtype_halves_the_reduce_scatter():
    none = _tiny_plan("none", zero=3).details["grad_reduction"]
    bf16 = _tiny_plan("bf16", zero=3).details["grad_reduction"]
    assert none["collective"] == bf16["collective"] == "reduce-scatter"
    assert bf16["buffer_bytes"] * 2 == none["buffer_bytes"]


def test_bf16_gradients_gain_nothing_from_bf16_compression():
    w = Workload(model=get_preset("llama-3.1-8b"), task="train", seq_len=4096,
                 recipe=Recipe(precision="bf16", dp=8, grad_compression="bf16"))
    doc = plan(w, Cluster(device=H100, num_devices=8), NO_CAL).details
    assert doc["grad_reduction"]["ratio"] == 1.0 and "already reduce in 2 bytes" in doc["grad_reduction"]["note"]
    assert any("--grad-reduce-fp32" in a for a in doc["assumptions"])


def test_powersgd_is_refused_on_zero_layouts_and_not_searched():
    with pytest.raises(ValueError, match="DDP communication hook"):
        Recipe(grad_compression="powersgd", zero=3)
    w = Workload(model=get_preset("tiny-llama"), task="train", seq_len=32,
                 recipe=Recipe(precision="fp32", dp=4, grad_compression="powersgd"))
    with pytest.raises(UserError, match="--zero 0"):
        plan(w, Cluster(device=H100, num_devices=4), NO_CAL, layout=Layout(dp=4, tp=1, pp=1, zero=2))
    found = search(w, Cluster(device=H100, num_devices=4), options=NO_CAL, global_batch=8)
    assert {c.layout.zero for c in found} == {0}


def test_error_feedback_memory_and_compute_are_planned():
    plain = _tiny_plan("none").details
    ef = _tiny_plan("powersgd").details
    no_ef = _tiny_plan("powersgd", powersgd_error_feedback=False, powersgd_warm_start=False,
                       powersgd_start_iter=1).details
    # error feedback keeps an fp32 copy of every gradient
    assert ef["memory_per_device_bytes"]["other"] - plain["memory_per_device_bytes"]["other"] == 139_584 * 4
    assert no_ef["memory_per_device_bytes"]["other"] == plain["memory_per_device_bytes"]["other"]
    # the tiny model's compression is bound by launching its kernels; an 8B model's by moving its bytes
    assert ef["grad_reduction"]["compress_s"] == pytest.approx(240 * 5e-6, rel=0.5)
    big = {ef: _tiny_plan("powersgd", model="llama-3.1-8b", powersgd_error_feedback=ef, powersgd_warm_start=ef,
                          powersgd_start_iter=2 if ef else 1).details["grad_reduction"]["compress_s"]
           for ef in (True, False)}
    assert big[True] > 2 * big[False] > 0
    assert _tiny_plan("none").details["grad_reduction"]["compress_s"] == 0


# ---- when it pays (acceptance 3) ------------------------------------------------------------------------------
def _llama70b(num_devices, layout, gbps):
    w = Workload(model=get_preset("llama-3.1-70b"), task="train", seq_len=8192,
                 recipe=Recipe(precision="bf16"))
    cluster = Cluster(device=H100, num_devices=num_devices, scaleout_bandwidth_bytes_per_s=gbps * 1e9 / 8)
    options = PlanOptions(use_calibration=False, grad_reduce_fp32=True)  # torchtitan/DDP-AMP/Megatron: fp32 grads
    return compare_compression(w, cluster, layout, options)


def _row(doc, name):
    return next(r for r in doc["rows"] if r["compression"].startswith(name))


def test_bf16_compression_shortens_the_step_over_a_100gbps_network():
    # 64 H100 in 8 nodes, tp 8 inside the node, the dp 8 reduce-scatter crosses 100 Gb/s NICs
    doc = _llama70b(64, Layout(dp=8, tp=8, pp=1, zero=1, micro_batch=1, grad_accum=16, recompute="full"), 100)
    assert doc["num_nodes"] == 8
    bf16 = _row(doc, "bf16")
    assert bf16["bytes_vs_none"] == pytest.approx(0.5)
    assert bf16["step_vs_none"] < 0.97, doc  # measurably shorter
    assert "bf16 pays" in doc["verdict"] or "fp16 pays" in doc["verdict"]
    assert "refused" in _row(doc, "powersgd")  # zero 1 reduce-scatters: PowerSGD cannot apply


def test_no_gain_inside_one_nvlink_node():
    doc = _llama70b(8, Layout(dp=8, tp=1, pp=1, zero=3, micro_batch=1, grad_accum=16, recompute="full"), 100)
    assert doc["num_nodes"] == 1
    assert abs(_row(doc, "bf16")["step_vs_none"] - 1) < 0.01, doc
    assert "no compression shortens the step" in doc["verdict"]


def test_moe_gradient_reduction_doc_reports_the_expert_group_apart():
    # dp 4, ep 2: the dense gradients are reduced over 4 ranks, the experts' (already ÷ 2) over the 2 that hold them
    from accelkit.plan.context import make_context
    from accelkit.plan.layout import Layout
    from accelkit.plan.stages import stage_param_split

    recipe = Recipe(precision="fp32", dp=4, ep=2, micro_batch=2)
    w = Workload(model=get_preset("tiny-mixtral"), task="train", seq_len=32, recipe=recipe)
    cluster, options = Cluster(device=H100, num_devices=4), PlanOptions(use_calibration=False, grad_reduce_fp32=True)
    red = plan(w, cluster, options).details["grad_reduction"]
    dense, expert = stage_param_split(make_context(w, cluster, options), Layout(dp=4, tp=1, pp=1, ep=2))
    assert expert > 0 and red["group_size"] == 4 and red["expert_group"]["group_size"] == 2
    assert red["buffer_bytes_per_step"] == round(dense * 4)
    assert red["expert_group"]["buffer_bytes_per_step"] == round(expert * 4)
    dense_only = _tiny_plan("none", dp=4).details["grad_reduction"]
    assert "expert_group" not in dense_only and dense_only["group_size"] == 4


def test_a_powersgd_layout_splits_its_gradient_tensors_once(monkeypatch):
    # before: one plan walked the rank's gradient tensors 5 times (PowerSGD's split, tensor by tensor) for a MoE layout:
    # for the step's total, its dense and its expert group, and again for both groups in the plan document
    import accelkit.plan.grad_comm as grad_comm
    from accelkit.plan.api import grad_reduction_doc
    from accelkit.plan.context import make_context

    walks = []
    real = grad_comm.local_grads
    monkeypatch.setattr(grad_comm, "local_grads", lambda ctx, layout: walks.append(layout) or real(ctx, layout))
    recipe = Recipe(precision="fp32", dp=4, ep=2, micro_batch=2, grad_compression="powersgd")
    w = Workload(model=get_preset("tiny-mixtral"), task="train", seq_len=32, recipe=recipe)
    cluster, options = Cluster(device=H100, num_devices=4), PlanOptions(use_calibration=False, grad_reduce_fp32=True)
    red = plan(w, cluster, options).details["grad_reduction"]
    assert len(walks) == 1
    assert red["powersgd"]["compressed_tensors"] > 0 and red["expert_group"]["powersgd"]["compressed_tensors"] > 0
    # the document from the step's split is the one a fresh split gives
    assert red == grad_reduction_doc(make_context(w, cluster, options), Layout(dp=4, tp=1, pp=1, ep=2, micro_batch=2))
    assert len(walks) == 2


def test_a_prefill_only_plan_says_it_counts_prompt_tokens():
    w = Workload(model=get_preset("tiny-llama"), task="infer", prompt_len=64, output_len=0, batch_size=4,
                 recipe=Recipe(precision="bf16"))
    est = plan(w, Cluster(device=H100, num_devices=1), PlanOptions(use_calibration=False))
    assert est.throughput_unit == "prompt tokens/s" and est.details["tokens_counted"] == "prompt"
    decode = plan(w.replace(output_len=8), Cluster(device=H100, num_devices=1), PlanOptions(use_calibration=False))
    assert decode.throughput_unit == "output tokens/s" and decode.details["tokens_counted"] == "output"
