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


def test_fused_swiglu_keeps_three_ffn_tensors_not_eagers_four():
    # Megatron's fused SwiGLUFunction saves its [gate|up] input (2f) and fc2 its input (f); HF's eager silu-then-mul
    # keeps gate, up, silu(gate) and the product (4f). --kernels fused once counted eager's 4 (+21% per layer here).
    m, s, tp = get_preset("llama-3.1-70b"), 8192, 8
    h, f, q, kv, a = m.hidden_size, m.ffn_hidden_size, m.num_heads * m.head_size, m.kv_heads * m.head_size, m.num_heads
    got = layer_activation_bytes(m, tokens=s, seq=s, e=2, tp=tp, sequence_parallel=True, kernels="fused")
    norms = 2 * (2 * 2 * h + 4)  # per norm its input and output (the q/k/v or fc1 input) + the fp32 rstd
    attn = 2 * (q / tp + 2 * kv / tp) + 2 * q / tp + 4 * a / tp  # q, k, v, the output, fp32 logsumexp
    assert got == pytest.approx(s * (norms / tp + attn + 3 * 2 * f / tp))
    eager = layer_activation_bytes(m, tokens=s, seq=s, e=2, tp=tp, sequence_parallel=True, kernels="eager")
    # eager: the fourth ffn tensor, and RMSNorm's fp32 upcast of each norm input (the kernel table's eager norm)
    assert eager - got == pytest.approx(s * (2 * f / tp + 2 * 4 * h / tp))
    # a MoE layer: the same per routed copy (k of them), plus what routing keeps (test_plan_torch measures it)
    mx = get_preset("mixtral-8x7b")
    fused, hf = (layer_activation_bytes(mx, tokens=s, seq=s, e=2, kernels=k) for k in ("fused", "eager"))
    assert hf - fused == pytest.approx(s * (2 * mx.experts_per_token * mx.ffn_hidden_size + 2 * 4 * mx.hidden_size))
    # and the plan says which it counted
    from accelkit.plan import PlanOptions, make_context

    w = Workload(model=m, task="train", seq_len=s, recipe=Recipe(precision="bf16"))
    ctx = make_context(w, Cluster(device=get_device("h100"), num_devices=8), PlanOptions(kernels="fused"))
    assert "fused SwiGLU kernel keeps its [gate|up] input and fc2 its input, 3 ffn-sized" in "\n".join(ctx.assumptions)


def test_kv_cache_formula_and_tp_floor():
    # the KV cache: 2·L·kv_heads·head_dim·seq·batch·bytes; per rank max(kv/t, 1) heads
    m = get_preset("llama-3.1-70b")  # 80 layers, 8 KV heads of 128
    assert kv_cache_bytes(m, batch=3, seq=1000, kv_cache_dtype="auto", dtype_bytes=2) == 2 * 80 * 8 * 128 * 1000 * 3 * 2
    assert kv_cache_bytes(m, batch=1, seq=1000, kv_cache_dtype="auto", dtype_bytes=2, tp=4) == 2 * 80 * 2 * 128 * 1000 * 2
    assert kv_cache_bytes(m, batch=1, seq=1000, kv_cache_dtype="auto", dtype_bytes=2, tp=16) == 2 * 80 * 1 * 128 * 1000 * 2
    # fp8/int8: the engine's 1-byte codes and a float16 scale per token and KV head — (128 + 2) bytes, not 128
    for kv in ("fp8", "int8"):
        assert kv_cache_bytes(m, batch=3, seq=1000, kv_cache_dtype=kv, dtype_bytes=2) == 2 * 80 * 8 * 130 * 1000 * 3


def test_layout_that_does_not_fit_is_reported_not_raised():
    w = Workload(model=get_preset("llama-3.1-70b"), task="train", seq_len=4096,
                 recipe=Recipe(precision="bf16", dp=1, tp=8, grad_accum=8))
    est = plan(w, Cluster(device=get_device("h100"), num_devices=8))
    d = est.details
    assert d["fits"] is False
    assert d["overflow"]["over_by_bytes"] > 0
    assert d["overflow"]["largest"][0] == "optimizer"  # 70.6B × 12 B / 8 ranks ≫ 80 GB
    assert d["memory_per_device_bytes"]["total"] > d["memory_capacity_bytes"]


def test_moe_expert_states_shard_over_the_expert_data_parallel_group():
    # ZeRO paper K = 12 (calibration.md, Memory anchors: "mixed-precision Adam ... K=12"). With ep 8 of dp 8 every
    # rank holds one expert alone: its optimizer states are not sharded again (expert-DP group dp/ep = 1); the dense
    # part is sharded over all 8. Before the fix both were ÷ 8: 10.12 GiB instead of ≈65.2.
    from accelkit.plan import make_context

    w = Workload(model=get_preset("mixtral-8x7b"), task="train", seq_len=4096,
                 recipe=Recipe(precision="bf16", dp=8, ep=8, zero=1, micro_batch=1, grad_accum=1, recompute="full"))
    cluster = Cluster(device=get_device("h100"), num_devices=8)
    ctx = make_context(w, cluster)
    layers = w.model.num_layers
    dense = layers * ctx.layer_params + ctx.embedding_params + ctx.head_params
    experts = layers * ctx.layer_expert_params
    got = plan(w, cluster).details["memory_per_device_bytes"]["optimizer"]
    assert got == pytest.approx(12 * dense / 8 + 12 * (experts / 8) / 1, rel=1e-6)
    assert got / 2**30 == pytest.approx(65.2, rel=0.01)


def test_model_state_bytes_shards_experts_over_their_own_group():
    dense, experts = 1e9, 4e9
    for zero, (w, g, o) in {0: (1, 1, 1), 1: (1, 1, 0), 2: (1, 0, 0), 3: (0, 0, 0)}.items():
        s = model_state_bytes(dense, precision="bf16", optimizer="adam", zero=zero, dp=8, expert_params=experts,
                              expert_dp=2)
        unsharded, sharded = dense + experts, dense / 8 + experts / 2
        assert s["weights"] == pytest.approx(2 * (unsharded if w else sharded))
        assert s["gradients"] == pytest.approx(2 * (unsharded if g else sharded))
        assert s["optimizer"] == pytest.approx(12 * (unsharded if o else sharded))


@pytest.mark.parametrize("vp,factor", [(1, 1.0), (2, 1 + 3 / 8), (4, 1 + 3 / 16)])
def test_interleaved_pipeline_holds_more_activations(vp, factor):
    # Korthikanti et al. 2022 §4.2.3: interleaving (Narayanan et al. 2021) multiplies the first stage's activations
    # by 1 + (p−1)/(p·m), m = vp; here p = 4. Before the fix every vp kept 15.17 GiB.
    from accelkit.plan import Layout

    w = Workload(model=get_preset("llama-3.1-70b"), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))
    cluster = Cluster(device=get_device("h100"), num_devices=32)
    lay = dict(dp=1, tp=8, pp=4, zero=0, micro_batch=1, grad_accum=32, recompute="none", sequence_parallel=True)
    base = plan(w, cluster, layout=Layout(**lay)).details["memory_per_device_bytes"]["activations"]
    got = plan(w, cluster, layout=Layout(**lay, vp=vp)).details["memory_per_device_bytes"]["activations"]
    from accelkit.plan.evaluate import inflight_micro_batches, interleaved_peak_bytes
    from accelkit.plan.memory import head_activation_bytes

    # the layers scale by the factor; the embedding's token ids and RoPE tables sit in the first chunk, which the
    # schedule leaves holding more micro-batches than the average chunk (8 of 11 at vp 2, 8 of 19 at vp 4)
    first = head_activation_bytes(w.model, tokens=4096, seq=4096, e=2, tp=8, sequence_parallel=True)["first"]
    in_first_chunk = interleaved_peak_bytes(4, vp, 32, 0, [1.0] + [0.0] * (vp - 1)) if vp > 1 else 4
    assert got - in_first_chunk * first == pytest.approx(factor * (base - 4 * first), rel=1e-9)

    assert inflight_micro_batches(4, vp, 32) == pytest.approx(4 * factor)
    assert inflight_micro_batches(4, vp, 3) == 3  # never more than the micro-batches there are


def test_no_dropout_also_drops_the_embedding_dropout_mask():
    """--no-dropout reached the layers' dropout masks but not the embedding dropout's (head_activation_bytes was not
    given it): bert-base kept a 1-byte mask per hidden element of every token."""
    from accelkit.core import Cluster, Workload
    from accelkit.models import resolve_model
    from accelkit.plan import PlanOptions, plan, resolve_hardware
    from accelkit.plan.memory import layer_activation_bytes

    model = resolve_model("bert-base")
    workload = Workload(model=model, task="train", seq_len=512, batch_size=8, recipe=Recipe(micro_batch=8))
    cluster = Cluster(device=resolve_hardware("h100"), num_devices=1)
    acts = {d: plan(workload, cluster, PlanOptions(dropout=d)).details["memory_per_device_bytes"]["activations"]
            for d in (True, False)}
    tokens = 8 * 512
    per_layer = {d: layer_activation_bytes(model, tokens=tokens, seq=512, e=2, dropout=d) for d in (True, False)}
    layers = model.num_layers * (per_layer[True] - per_layer[False])
    assert acts[True] - acts[False] == layers + tokens * model.hidden_size


def test_autocast_over_fp32_params_keeps_4_byte_weights_and_gradients_and_no_master_copy():
    """A training bench keeps fp32 parameters under bf16 autocast (measured 4/4/8 B per parameter per rank), but the
    prediction read 2/2/12 — the totals agreed only by coincidence, and differed at ZeRO 2."""
    from accelkit.bench.predict import predict_variant
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload

    mixed = model_state_bytes(1000, precision="bf16", optimizer="adam", zero=0, dp=1)
    amp = model_state_bytes(1000, precision="bf16", optimizer="adam", zero=0, dp=1, fp32_params=True)
    assert (mixed["weights"], mixed["gradients"], mixed["optimizer"]) == (2000, 2000, 12000)
    assert (amp["weights"], amp["gradients"], amp["optimizer"]) == (4000, 4000, 8000)
    bench = make_workload("llm-train", {"model": "tiny-llama", "batch_size": 2, "seq_len": 32})
    params = bench.model_spec.num_params()
    for precision, per_param in (("bf16", 4), ("fp8", 4), ("fp32", 4)):
        estimate, why = predict_variant(bench, Variant(precision=precision), "cuda", "h100", dp=2, zero=2)
        assert estimate is not None, why
        states = estimate.details["memory_per_device_bytes"]
        assert states["weights"] == per_param * params, precision
        assert states["gradients"] == per_param * params / 2, precision  # ZeRO 2 shards them over dp 2
        assert states["optimizer"] == 8 * params / 2, precision


@pytest.mark.parametrize("attention", ["flash", "math"])
def test_selective_recompute_with_flash_attention_says_it_equals_none(attention):
    # selective recompute drops the s² score terms that only unfused attention stores: under flash it plans exactly what
    # none plans. Before, that was silent.
    from accelkit.plan import Layout, PlanOptions

    w = Workload(model=get_preset("llama-3.1-8b"), task="train", seq_len=8192, recipe=Recipe(precision="bf16"))
    cluster, options = Cluster(device=get_device("h100"), num_devices=8), PlanOptions(attention=attention)
    docs = {rc: plan(w, cluster, options, layout=Layout(dp=8, tp=1, pp=1, zero=1, grad_accum=8, recompute=rc)).details
            for rc in ("none", "selective")}
    note = [a for a in docs["selective"]["assumptions"] if a.startswith("selective recompute")]
    same = docs["selective"]["memory_per_device_bytes"] == docs["none"]["memory_per_device_bytes"]
    assert same == (attention == "flash")
    assert len(note) == (1 if attention == "flash" else 0)
    assert all("--recompute none" in n for n in note)
    assert not any(a.startswith("selective recompute") for a in docs["none"]["assumptions"])


def test_bf16_optimizer_states_take_6_bytes_per_parameter():
    # Apex DistributedFusedAdam(dtype=bfloat16), NeMo's `optim.dtype: bf16`: m, v and its weight copy in bf16
    from accelkit.plan.memory import optimizer_bytes_per_param

    assert optimizer_bytes_per_param("adam", "bf16") == 12
    assert optimizer_bytes_per_param("adam", "bf16", "bf16") == 6
    assert optimizer_bytes_per_param("sgd", "bf16", "bf16") == 4
    fp32 = model_state_bytes(1e9, precision="bf16", optimizer="adam", zero=1, dp=2)
    bf16 = model_state_bytes(1e9, precision="bf16", optimizer="adam", zero=1, dp=2, optimizer_states="bf16")
    assert (fp32["optimizer"], bf16["optimizer"]) == (6e9, 3e9)
    assert bf16["weights"] == fp32["weights"] and bf16["gradients"] == fp32["gradients"]


@pytest.mark.parametrize("kernels,per_element", [("eager", 4 + 2), ("fused", 2)])
@pytest.mark.parametrize("tp", [1, 8])
def test_qwen3_per_head_q_k_norms_keep_their_tensors(kernels, per_element, tp):
    # found in review: Qwen3's q_norm/k_norm (an RMSNorm over head_dim on every q and k head) kept nothing in the
    # plan — 15-17% of a layer's saved bytes (tests/integration/test_plan_torch.py measures them with
    # saved_tensors_hooks): eager keeps the fp32 upcast and the normalised bf16 output, fused its bf16 input, both an
    # fp32 rsqrt per head and token
    from accelkit.plan.kernels import layer_traffic

    m, s = get_preset("qwen3-8b"), 4096  # 32 heads and 8 KV heads of 128
    plain = m.replace(qk_norm=False)
    kw = dict(tokens=s, seq=s, e=2, tp=tp, kernels=kernels, sequence_parallel=tp > 1)
    got = layer_activation_bytes(m, **kw) - layer_activation_bytes(plain, **kw)
    heads = 32 / tp + 8 / tp
    assert got == pytest.approx(s * heads * (per_element * 128 + 4))
    # full recompute keeps the layer input only, as before
    assert layer_activation_bytes(m, recompute="full", **kw) == layer_activation_bytes(plain, recompute="full", **kw)
    # and the norms' traffic is timed: one more RMSNorm over q and over k
    stack_norm = {"eager": (3 * 2 + 24 + 2, 6), "fused": (2 * 2, 1)}[kernels]
    with_norms, without = (layer_traffic(x, e=2, stack=kernels, dropout=False) for x in (m, plain))
    assert with_norms.sharded_bytes - without.sharded_bytes == stack_norm[0] * (32 + 8) * 128
    assert with_norms.forward_kernels - without.forward_kernels == 2 * stack_norm[1]


def test_qwen3_8b_layout_the_review_found_over_capacity_no_longer_fits():
    # found in review: qwen3-8b on 8 × H100 at seq 8192 — the search's best layout (dp 8, ZeRO 3, no recompute)
    # planned 73.5 GiB and fits, while with the q/k-norm tensors it holds 82.0 GiB of the 79.65
    from accelkit.plan import Layout

    w = Workload(model=get_preset("qwen3-8b"), task="train", seq_len=8192, recipe=Recipe(precision="bf16"))
    d = plan(w, Cluster(device=get_device("h100"), num_devices=8),
             layout=Layout(dp=8, tp=1, pp=1, zero=3, micro_batch=1, grad_accum=64)).details
    assert not d["fits"]
    assert d["memory_per_device_bytes"]["total"] / 2**30 == pytest.approx(82.0, abs=0.1)


@pytest.mark.parametrize("zero,per_param", [(0, 2 + 4 + 12), (1, 2 + 4 + 12 / 8), (2, 2 + (4 + 12) / 8),
                                            (3, (4 + 4 + 8) / 8)])
def test_grad_reduce_fp32_keeps_fp32_gradients_in_memory(zero, per_param):
    # found in review: --grad-reduce-fp32 reduced a 4 B/element gradient buffer while memory kept 2 B gradients.
    # Megatron's fp32 main grads with the distributed optimizer: 6 + 12/d B per parameter; ZeRO 3 is FSDP2 with
    # reduce_dtype fp32, whose fp32 parameter shards are the master weights: 4/d + 4/d + m, v 8/d, the same 16/d
    # as bf16 weights, bf16 gradients and a 12/d optimizer
    params = 1e9
    states = model_state_bytes(params, precision="bf16", optimizer="adam", zero=zero, dp=8, grad_fp32=True)
    assert states["gradients"] == (4 if zero < 2 else 0.5) * params
    assert states["weights"] + states["gradients"] + states["optimizer"] == pytest.approx(per_param * params)
    plain = model_state_bytes(params, precision="bf16", optimizer="adam", zero=zero, dp=8)
    if zero == 3:  # the totals agree: only where the master copy sits differs
        assert sum(states.values()) == pytest.approx(sum(plain.values()))
    # nothing changes where the gradients are already fp32
    for kw in ({"precision": "fp32"}, {"precision": "bf16", "fp32_params": True}):
        assert model_state_bytes(params, optimizer="adam", zero=zero, dp=8, grad_fp32=True, **kw) == \
            model_state_bytes(params, optimizer="adam", zero=zero, dp=8, **kw)


def test_grad_reduce_fp32_plan_holds_the_buffer_it_reduces():
    # the review's case: llama-3-8b on 8 × H100, dp 8, ZeRO 1 — the reduction moves 29.92 GiB of fp32 gradients
    # per step while the memory counted 14.96 GiB of them
    from accelkit.plan import Layout, PlanOptions

    w = Workload(model=get_preset("llama-3-8b"), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))
    cluster = Cluster(device=get_device("h100"), num_devices=8)
    lay = Layout(dp=8, tp=1, pp=1, zero=1, micro_batch=1, grad_accum=128)
    d = plan(w, cluster, PlanOptions(grad_reduce_fp32=True), layout=lay).details
    assert d["memory_per_device_bytes"]["gradients"] == d["grad_reduction"]["buffer_bytes"]
    assert d["grad_reduction"]["gradient_element_bytes"] == 4
    assert not d["fits"]  # 84.7 GiB of the 79.65
    assert any("gradients in fp32, as they are reduced" in a for a in d["assumptions"])
    base = plan(w, cluster, layout=lay).details
    assert base["memory_per_device_bytes"]["gradients"] == base["grad_reduction"]["buffer_bytes"]  # 2 B both
