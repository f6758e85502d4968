"""Layout search, hardware comparison, bad input and calibration."""

import pytest

from accelkit.core import Cluster, Measurement, Recipe, UnknownNameError, UserError, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import Layout, PlanOptions, compare, make_context, plan, search
from accelkit.plan.evaluate import evaluate_train
from accelkit.plan.search import enumerate_layouts

TRAIN_70B = Workload(model=get_preset("llama-3.1-70b"), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))


def test_search_enumerates_over_1000_valid_layouts():
    model = TRAIN_70B.model
    ctx = make_context(TRAIN_70B, Cluster(device=get_device("h100"), num_devices=64), PlanOptions(attention="math"))
    layouts = list(enumerate_layouts(ctx, 64, {}, 1024))
    assert len(layouts) >= 1000
    for lay in layouts:
        assert lay.dp * lay.tp * lay.pp == 64
        assert model.num_heads % lay.tp == 0 and lay.tp <= 8  # tp inside the NVLink domain
        assert model.num_layers % lay.pp == 0
        assert lay.dp * lay.micro_batch * lay.grad_accum == 1024
        assert not (lay.sequence_parallel and lay.tp == 1)


def test_search_ranks_fitting_layouts_by_step_time():
    found = search(TRAIN_70B, Cluster(device=get_device("h100"), num_devices=64), global_batch=512)
    fitting = [c for c in found if c.fits]
    assert fitting and found[0].fits
    times = [c.step_time_s for c in fitting]
    assert times == sorted(times)


def test_compare_ordering_facts_llama_70b_training():
    # issue 3: MI300X and H200 need fewer devices than H100 to fit (memory); B200 fastest per device. The memory
    # answer is the min-devices basis since issue 29 (the default compares at one device count)
    rows = {ctx.device.name: c for c, ctx in compare(TRAIN_70B, ["h100", "h200", "mi300x", "b200"],
                                                     basis="min-devices")}
    devices = {name: c.layout.num_devices for name, c in rows.items()}
    assert devices["MI300X"] < devices["H100-SXM5-80GB"]
    assert devices["H200-SXM-141GB"] < devices["H100-SXM5-80GB"]
    per_device = {name: c.tokens_per_s / c.layout.num_devices for name, c in rows.items()}
    assert max(per_device, key=per_device.get) == "B200-SXM-180GB"
    assert all(c.fits for c in rows.values())


def test_minimum_devices_meets_target_throughput():
    w = Workload(model=get_preset("llama-3.1-8b"), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))
    cluster = Cluster(device=get_device("h100"))
    smallest = search(w, cluster, minimize_devices=True, top=1)[0]
    target = 4 * smallest.tokens_per_s
    faster = search(w, cluster, options=PlanOptions(target_tokens_per_s=target), minimize_devices=True, top=1)[0]
    assert faster.layout.num_devices > smallest.layout.num_devices and faster.tokens_per_s >= target


def test_inference_search_respects_latency_bound():
    w = Workload(model=get_preset("llama-3.1-70b"), task="infer", prompt_len=2048, output_len=256,
                 recipe=Recipe(precision="bf16"))
    cluster = Cluster(device=get_device("h100"), num_devices=8)
    best = search(w, cluster, options=PlanOptions(max_decode_latency_s=0.05), top=1)[0]
    assert best.fits and best.decode_time_per_token_s <= 0.05
    assert best.max_batch >= best.batch


@pytest.mark.parametrize("fixed,needle", [
    ({"tp": 3}, "does not divide the 64 attention heads"),
    ({"tp": 16}, "exceeds the scale-up domain"),
    ({"pp": 81}, "exceeds the 80 layers"),
    ({"dp": 1, "tp": 8, "pp": 1}, "must be equal"),
    ({"dp": 3, "tp": 8, "pp": 1}, "does not divide --num-devices"),
    ({"ep": 2}, "needs a mixture-of-experts model"),
])
def test_bad_layout_is_one_user_error(fixed, needle):
    with pytest.raises(UserError, match=needle) as info:
        search(TRAIN_70B, Cluster(device=get_device("h100"), num_devices=16), fixed=fixed)
    assert "\n" not in str(info.value)


def test_unknown_hardware_and_negative_sizes():
    from accelkit.plan import resolve_hardware

    with pytest.raises(UnknownNameError, match="unknown hardware"):
        resolve_hardware("h999")
    with pytest.raises(ValueError, match="batch_size"):
        Workload(model=get_preset("llama-3.1-8b"), batch_size=-1)


def test_plan_requires_matching_device_count():
    w = TRAIN_70B.replace(recipe=Recipe(precision="bf16", tp=8, dp=2))
    with pytest.raises(UserError, match="dp·tp·pp = 16"):
        plan(w, Cluster(device=get_device("h100"), num_devices=8))


def test_assumptions_name_every_prior_with_a_source():
    est = plan(TRAIN_70B.replace(recipe=Recipe(precision="bf16", tp=8, pp=2, dp=4, zero=1, grad_accum=8)),
               Cluster(device=get_device("h100"), num_devices=64))
    text = "\n".join(est.details["assumptions"])
    assert "compute efficiency 0.80" in text and "MAMF" in text
    assert "memory efficiency 0.76" in text and "kipply" in text
    assert "communication efficiency 0.89" in text and "nccl" in text  # nccl-tests on 8×H100 (dgxc-benchmarking)
    assert "attention efficiency 0.52 (flash) / 0.35 (flash2)" in text and "FlashAttention-3" in text
    assert "sustained tensor-core factor" in text and "fitted on the H100 calibration runs" in text
    assert "ESTIMATED from TDP 700 W" in text


def test_no_published_prior_is_labelled_assumed():
    w = TRAIN_70B.replace(recipe=Recipe(precision="bf16", tp=8, dp=4, zero=3, grad_accum=8))
    est = plan(w, Cluster(device=get_device("Gaudi3"), num_devices=32))
    assert any("ASSUMED" in a for a in est.details["assumptions"])


def _probe(catalog_name, hardware, fraction, device="cuda:0"):
    return Measurement(
        kind="probe", name="hw probe", hardware=hardware,
        details={"device": device, "catalog_name": catalog_name,
                 "matmul": {"bf16": {"tflops": 989 * fraction, "fraction_of_peak": fraction},
                            "fp32": {"tflops": 1.0, "fraction_of_peak": None}},
                 "bandwidth": {"gbps": 2500.0, "fraction_of_peak": 0.7}},
    )


def test_calibration_from_probe_in_store():
    from accelkit.results import ResultStore

    with ResultStore() as store:  # the autouse fixture gives each test its own store
        store.add(_probe("H100-SXM5-80GB", "H100-SXM5-80GB", 0.6))
    w = TRAIN_70B.replace(recipe=Recipe(precision="bf16", tp=8, pp=2, dp=4, zero=1, grad_accum=8))
    cluster = Cluster(device=get_device("h100"), num_devices=64)
    calibrated = plan(w, cluster)
    prior = plan(w, cluster, PlanOptions(use_calibration=False))
    assert any("measured by `hw probe`" in a for a in calibrated.details["assumptions"])
    assert calibrated.details["step_time_s"] > prior.details["step_time_s"]  # 0.60 < 0.80 prior


def test_local_cpu_plan_uses_probe():
    from accelkit.hardware.detect import this_cpu
    from accelkit.plan import resolve_hardware
    from accelkit.results import ResultStore

    with pytest.raises(UserError, match="hw probe"):
        resolve_hardware("cpu")
    with ResultStore() as store:
        store.add(_probe(None, this_cpu(), 1.0, device="cpu"))  # the planner reads the probes of the CPU it runs on
    cpu = resolve_hardware("cpu")
    assert cpu.vendor == "cpu" and cpu.peak("bf16") == 989e12 and cpu.memory_bandwidth_bytes_per_s == 2500e9
    w = Workload(model=get_preset("tiny-llama"), task="train", seq_len=128, recipe=Recipe(precision="fp32"))
    est = plan(w, Cluster(device=cpu, num_devices=1))
    assert any("calibrated" in a for a in est.details["assumptions"])


def test_planner_imports_no_torch():
    import subprocess
    import sys

    code = ("import sys; from accelkit.plan import search; from accelkit.core import Cluster, Workload, Recipe; "
            "from accelkit.models import get_preset; from accelkit.hardware import get_device; "
            "search(Workload(model=get_preset('llama-3.1-8b'), recipe=Recipe(precision='bf16')), "
            "Cluster(device=get_device('h100'), num_devices=8)); "
            # an inference plan too: its kv_cache_capacity is sized by the engine's own (torch-free) functions
            "from accelkit.plan import plan; plan(Workload(model=get_preset('llama-3.1-8b'), task='infer', "
            "recipe=Recipe(precision='bf16', kv_cache_dtype='fp8')), Cluster(device=get_device('h100'), num_devices=1)); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


INFER_8B = Workload(model=get_preset("llama-3.1-8b"), task="infer", prompt_len=512, output_len=128,
                    recipe=Recipe(precision="bf16"))


@pytest.mark.parametrize("fixed,global_batch,needle", [
    ({"zero": 3}, None, "--zero 3 applies to --task train"),
    ({"micro_batch": 4}, None, "--micro-batch 4 applies to --task train"),
    ({"recompute": "full"}, None, "--recompute full applies to --task train"),
    ({"tp": 8, "sequence_parallel": True}, None, "--sequence-parallel applies to --task train"),
    ({"sequence_parallel": False}, None, "--no-sequence-parallel applies to --task train"),
    ({}, 64, "--global-batch 64 applies to --task train"),
    ({"cp": 2}, None, "--cp 2: context-parallel inference is not modelled"),
    ({"pp": 2, "vp": 2}, None, "--vp 2: interleaved-pipeline inference is not modelled"),
])
@pytest.mark.parametrize("minimize", [False, True])
def test_inference_refuses_layout_fields_it_does_not_model(fixed, global_batch, needle, minimize):
    # before: each was accepted and either changed nothing (zero, micro-batch, recompute, global batch) or was
    # reported as applied while the model ignored it (cp 2 halved tok/s at the same memory; sp reported false)
    with pytest.raises(UserError, match=needle) as info:
        search(INFER_8B, Cluster(device=get_device("h100"), num_devices=8), fixed=fixed, global_batch=global_batch,
               batch=16, minimize_devices=minimize)
    assert "\n" not in str(info.value)


def test_inference_takes_the_layout_fields_it_models():
    best = search(INFER_8B, Cluster(device=get_device("h100"), num_devices=8), fixed={"tp": 2, "pp": 2, "cp": 1},
                  batch=16, top=1)[0]
    assert (best.layout.tp, best.layout.pp, best.layout.dp, best.layout.cp) == (2, 2, 2, 1)


def test_tp_must_divide_or_be_a_multiple_of_the_kv_heads():
    # qwen2.5-7b: 28 query heads, 4 KV heads. tp 7 divides the query heads but splits KV heads across ranks;
    # before: pinned it was planned, and searched on 7 devices
    qwen = Workload(model=get_preset("qwen2.5-7b"), task="infer", recipe=Recipe(precision="bf16"))
    assert (qwen.model.num_heads, qwen.model.kv_heads) == (28, 4)
    cluster = Cluster(device=get_device("h100"), num_devices=7)
    # the choices stop at the H100's 8-GPU scale-up domain (28 was offered, and then refused as exceeding it)
    with pytest.raises(UserError, match=r"--tp 7 neither divides nor is a multiple of the 4 KV heads .*"
                                        r"use one of 1, 2, 4$") as info:
        search(qwen, cluster, fixed={"tp": 7})
    assert "\n" not in str(info.value)
    assert {c.layout.tp for c in search(qwen, cluster)} == {1}
    ctx = make_context(qwen.replace(task="train", seq_len=4096), Cluster(device=get_device("h100"), num_devices=28),
                       PlanOptions())
    assert {lay.tp for lay in enumerate_layouts(ctx, 28, {}, 28)} == {1, 2, 4}
    # a multiple of the KV heads replicates each KV head (vLLM): llama-3.1-70b has 8, tp 8 holds one each
    assert search(TRAIN_70B, Cluster(device=get_device("h100"), num_devices=8), fixed={"tp": 8, "pp": 1},
                  global_batch=8, top=1)[0].layout.tp == 8


def _8b(seq=4096):
    return Workload(model=get_preset("llama-3.1-8b"), task="train", seq_len=seq, recipe=Recipe(precision="bf16"))


@pytest.mark.parametrize("cp,seq", [(8, 4), (2, 1), (3, 4096)])
@pytest.mark.parametrize("minimize", [False, True])
def test_context_parallel_must_split_the_sequence_in_2_cp_chunks(cp, seq, minimize):
    # before: --cp above --seq-len divided by zero (exit 1, "internal error"), and --cp 3 on 4096 tokens was planned
    # as 1365 tokens a rank. Load-balanced ring attention (what the time model's even split assumes) cuts 2·cp chunks.
    cluster = Cluster(device=get_device("h100"), num_devices=cp * 8)
    with pytest.raises(UserError, match=rf"^--cp {cp} needs --seq-len divisible by 2·cp = {2 * cp} ") as info:
        search(_8b(seq), cluster, fixed={"cp": cp}, global_batch=8, minimize_devices=minimize)
    assert "\n" not in str(info.value)
    with pytest.raises(UserError, match=f"--seq-len {seq} is not"):
        plan(_8b(seq), cluster, layout=Layout(dp=8, tp=1, pp=1, cp=cp))
    assert search(_8b(4096), Cluster(device=get_device("h100"), num_devices=16), fixed={"cp": 2}, global_batch=8,
                  top=1)[0].layout.cp == 2


@pytest.mark.parametrize("model,n,fixed,global_batch,message", [
    # ZeRO needs data parallelism: the tp that leaves none, or the zero stage, has to give
    ("llama-3.1-8b", 8, {"tp": 8, "zero": 3}, None,
     "ZeRO 1-3 shard over the dp·cp data-parallel ranks, so they need dp·cp > 1 — use --tp 1, 2 or 4 or --zero 0"),
    ("mixtral-8x7b", 8, {"dp": 4, "tp": 2, "ep": 8}, None, "ep divides dp (the experts are spread over ep of the "
                                                            "data-parallel ranks) and the 8 experts — use --ep 1, 2 or 4"),
    ("llama-3.1-8b", 3, {}, 32, "dp must divide the global batch and here dp can only be 3"),
    # Megatron-LM's interleaved schedule: micro-batches a multiple of pp
    ("llama-3.1-8b", 8, {"dp": 1, "pp": 8, "vp": 2}, 4, "interleaved, the micro-batches per step are a multiple of pp"),
])
def test_no_valid_layout_names_the_rule_the_pinned_flags_break(model, n, fixed, global_batch, message):
    # before: every case got the same list of all the rules ("dp·tp·pp must equal the device count, tp divide the
    # heads ..."), which named none of these causes
    w = Workload(model=get_preset(model), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))
    with pytest.raises(UserError) as info:
        search(w, Cluster(device=get_device("h100"), num_devices=n), fixed=fixed, global_batch=global_batch)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_interleaved_1f1b_needs_micro_batches_a_multiple_of_pp():
    # Megatron-LM: "number of microbatches (4) is not divisible by pipeline-model-parallel-size (8) when using
    # interleaved schedule"; the planner planned it (and searched such layouts)
    cluster = Cluster(device=get_device("h100"), num_devices=8)
    with pytest.raises(UserError, match=r"^--vp 2: interleaved 1F1B needs the micro-batches per step \(4\) to be a "
                                        r"multiple of --pp 8"):
        plan(_8b(), cluster, layout=Layout(dp=1, tp=1, pp=8, vp=2, grad_accum=4))
    ctx = make_context(_8b(), cluster, PlanOptions())
    layouts = list(enumerate_layouts(ctx, 8, {"vp": 2}, 32))
    assert layouts and all(lay.grad_accum % lay.pp == 0 for lay in layouts)
    assert {lay.micro_batch for lay in layouts if lay.pp == 8} == {1, 2, 4}  # 32/8 = 4 micro-batches of 8: refused
    assert plan(_8b(), cluster, layout=Layout(dp=1, tp=1, pp=8, grad_accum=4)).details["fits"]  # plain 1F1B: any count


def test_exhausting_max_devices_shows_the_largest_count_with_a_layout_and_warns():
    # before: 128K tokens of llama-3.1-8b fit on no count up to --max-devices 3; the planner then searched 3 devices
    # (none has a valid layout: dp 3 does not divide the batch) and blamed "--num-devices 3", a flag never given
    w = _8b(131072)
    best = search(w, Cluster(device=get_device("h100")), options=PlanOptions(max_devices=3), minimize_devices=True)[0]
    ctx = best.extra["context"]
    assert best.layout.num_devices == 2 and not best.fits
    assert ctx.warnings == ["no device count up to --max-devices 3 fits; showing the best layout on 2"]
    # no count has a layout at all: the error says so, in the flags given
    with pytest.raises(UserError) as info:
        search(_8b(), Cluster(device=get_device("h100")), options=PlanOptions(max_devices=8), fixed={"tp": 8, "zero": 3},
               minimize_devices=True)
    assert "(nor any other count up to --max-devices 8)" in str(info.value) and "--num-devices" not in str(info.value)
    assert "use --tp 1, 2 or 4 or --zero 0" in str(info.value)


def test_an_unreachable_target_is_a_warning():
    # before: exit 0 with "fits yes" on 65,536 devices; the only hint was the last of ~20 assumption lines
    options = PlanOptions(max_devices=16, target_tokens_per_s=1e12)
    best = search(_8b(), Cluster(device=get_device("h100")), options=options, minimize_devices=True)[0]
    assert best.extra["context"].warnings == [
        "no device count up to --max-devices 16 reaches --target-tokens-per-s 1,000,000,000,000; showing the best "
        "layout on 16"]
    assert best.layout.num_devices == 16 and best.fits


@pytest.mark.parametrize("seq,expected", [(4096, 1024), (2048, 2048), (3072, 1024), (197, 16384), (128, 32768),
                                          (6144, 512), (8 * 2**20, 1)])
def test_default_global_batch_is_the_nearest_power_of_two(seq, expected):
    # found in review: ⌊4 Mi / seq_len⌋ is odd for most lengths that are not powers of two (1365 at 3072, 21290 for
    # ViT's 197 tokens), and dp must divide it: llama-3-8b on 64 H100 at seq 3072 planned dp 1 tp 8 pp 8
    from accelkit.plan.search import default_global_batch

    assert default_global_batch(_8b(seq)) == expected


def test_default_global_batch_lets_dp_use_every_device_and_is_stated():
    # before: `plan --model vit-b16 --hardware h100 --num-devices 64` failed (no dp divides 21290) and llama-3-8b at
    # seq 3072 ran 4,944 tokens/s per device where --global-batch 1024 gives 9,434
    vit = Workload(model=get_preset("vit-b16"), task="train", seq_len=get_preset("vit-b16").max_seq_len,
                   recipe=Recipe(precision="bf16"))
    for workload in (vit, _8b(3072)):
        best = search(workload, Cluster(device=get_device("h100"), num_devices=64), top=1)[0]
        assert best.layout.dp == 64 and best.batch in (1024, 16384), best.layout
        said = [a for a in best.extra["context"].assumptions if a.startswith(f"global batch {best.batch:,} ")]
        assert said and "the default, the power of two nearest 4 Mi tokens per step" in said[0]
    given = search(_8b(3072), Cluster(device=get_device("h100"), num_devices=8), global_batch=64, top=1)[0]
    assert not any(a.startswith("global batch") for a in given.extra["context"].assumptions)  # the user's own


def test_search_tries_micro_batches_past_8_while_they_fit():
    # found in review: micro-batches 1/2/4/8 only; bert-base at seq 128 is launch-bound there and a pinned
    # --micro-batch 64 ran 1.85× faster (0.750 s against 1.384 s a step) than the search's best
    bert = Workload(model=get_preset("bert-base"), task="train", seq_len=128, recipe=Recipe(precision="bf16"))
    cluster = Cluster(device=get_device("h100"), num_devices=8)
    best = search(bert, cluster, top=1)[0]
    pinned = search(bert, cluster, fixed={"micro_batch": 64}, top=1)[0]
    assert best.layout.micro_batch > 8 and best.fits
    assert best.step_time_s <= pinned.step_time_s * 1.0001 and best.step_time_s < 1.384 / 1.8
    # a larger micro-batch is tried only while the one half its size fits, so the search stays small: llama-3.1-70b
    # on 64 H100 tries 16, 32, 64 only where 8 (16, 32) fits
    ctx = make_context(TRAIN_70B, Cluster(device=get_device("h100"), num_devices=64), PlanOptions(attention="math"))
    layouts = list(enumerate_layouts(ctx, 64, {}, 1024))
    fits = {lay: evaluate_train(ctx, lay).fits for lay in layouts if lay.micro_batch >= 8}
    for lay in layouts:
        if lay.micro_batch > 8:
            assert fits[lay._replace(micro_batch=lay.micro_batch // 2, grad_accum=lay.grad_accum * 2)], lay
    assert {lay.micro_batch for lay in layouts} > {1, 2, 4, 8} and len(layouts) < 2000


def test_training_tp_divides_the_kv_heads_inference_may_replicate_them(capsys):
    # found in review: --task train planned (and chose) tp 8 for qwen3-30b-a3b's 4 KV heads — vLLM's inference rule;
    # Megatron-Core asserts num_query_groups % tp == 0 and torchtitan's column-parallel wk/wv would split a head
    from accelkit.cli.app import main

    moe = Workload(model=get_preset("qwen3-30b-a3b"), task="train", seq_len=16384, recipe=Recipe(precision="bf16"))
    cluster = Cluster(device=get_device("h100"), num_devices=8)
    assert all(4 % c.layout.tp == 0 for c in search(moe, cluster))
    with pytest.raises(UserError, match=r"^--tp 8 does not divide the 4 KV heads of qwen3-30b-a3b, which training "
                                        r"shards whole \(Megatron-Core: num_query_groups % tp == 0\); use one of 1, 2, 4$"):
        plan(moe, cluster, layout=Layout(dp=1, tp=8, pp=1, grad_accum=16))
    with pytest.raises(SystemExit) as info:
        main(["plan", "--model", "qwen3-30b-a3b", "--hardware", "h100", "--num-devices", "8", "--tp", "8"])
    err = capsys.readouterr().err
    assert info.value.code == 2 and err.startswith("error: --tp 8 does not divide the 4 KV heads") \
        and len(err.strip().splitlines()) == 1
    # inference keeps vLLM's rule: a KV head replicated on tp / kv_heads ranks
    serve = Workload(model=get_preset("qwen3-30b-a3b"), task="infer", prompt_len=1024, output_len=128,
                     recipe=Recipe(precision="bf16"))
    assert search(serve, cluster, fixed={"tp": 8}, top=1)[0].layout.tp == 8
