"""Pipeline stages that hold unequal layer counts, and pinned fields refused for their own reason (issue 29 item 5,
issue 32: Llama 3 405B's published layout, pp 16 over 126 layers with lighter first and last stages)."""

import json

import pytest

from accelkit.cli.app import main
from accelkit.core import Cluster, Recipe, UserError, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import Layout, PlanOptions, plan, search
from accelkit.plan.context import make_context
from accelkit.plan.evaluate import inflight_micro_batches, interleaved_peak_bytes, train_memory
from accelkit.plan.memory import layer_activation_bytes
from accelkit.plan.stages import stage_blocks

H100 = get_device("h100")


def _405b() -> Workload:
    return Workload(model=get_preset("llama-3.1-405b"), task="train", seq_len=8192, recipe=Recipe(precision="bf16"))


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    try:
        main(["plan", *args])
        code = 0
    except SystemExit as e:  # an error exits 2; a plan returns
        code = int(e.code or 0)
    out = capsys.readouterr()
    return code, out.out, out.err


def test_search_and_cli_take_a_pp_that_does_not_divide_the_layers(capsys):
    # before: "--pp 16 does not divide the 126 layers of llama-3.1-405b (the search keeps pipeline stages even)",
    # from the CLI and search() alike, although plan(layout=...) took the same layout
    cluster = Cluster(device=H100, num_devices=2048)
    best = search(_405b(), cluster, fixed={"tp": 8, "pp": 16}, global_batch=2048, top=1)[0]
    assert (best.layout.tp, best.layout.pp, best.layout.dp) == (8, 16, 16)
    code, out, err = _cli(capsys, "--model", "llama-3.1-405b", "--hardware", "h100", "--num-devices", "2048",
                          "--tp", "8", "--pp", "16", "--global-batch", "2048", "--seq-len", "8192", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["layout"]["pp"] == 16 and doc["step_time_s"] == pytest.approx(best.step_time_s)
    assert any("uneven pipeline stages: the 126 layers do not divide over pp 16" in a for a in doc["assumptions"])
    # the API's one-layout call plans the same step
    lay = best.layout
    est = plan(_405b(), cluster, layout=lay)
    assert est.details["step_time_s"] == pytest.approx(best.step_time_s)


def test_free_search_still_tries_even_stages_only():
    cluster = Cluster(device=H100, num_devices=64)
    found = search(_405b(), cluster, fixed={"tp": 8}, global_batch=64)
    assert {c.layout.pp for c in found} <= {1, 2}  # 126 = 2·3²·7: of the pp dividing 8 ranks, only 1 and 2


def test_stage_chunks_need_a_layer_each():
    cluster = Cluster(device=H100, num_devices=1024)
    with pytest.raises(UserError, match=r"^--pp 16 × --vp 16 = 256 stage chunks exceed the 126 layers"):
        search(_405b(), cluster, fixed={"tp": 8, "pp": 16, "vp": 16}, global_batch=1024)
    # uneven interleaved chunks are planned: 126 layers over 8 × 8 = 64 chunks (NeMo's 405B layout)
    best = search(_405b(), cluster, fixed={"tp": 8, "pp": 8, "vp": 8}, global_batch=1024, top=1)[0]
    assert (best.layout.pp, best.layout.vp) == (8, 8)


def test_lighter_first_and_last_stages_plan_the_second_stage_activations():
    # Llama 3: 126 layers over 16 stages as 7 + 14 × 8 + 7, the embedding and the head one block each. The first stage
    # keeps 16 micro-batches of 7 blocks in flight, the second 15 of 8: 120 block-micro-batches, the peak
    options = PlanOptions(pp_embedding_as_layer=True, kernels="fused", dropout=False)
    w, lay = _405b(), Layout(dp=16, tp=8, pp=16, micro_batch=1, grad_accum=128, sequence_parallel=True)
    ctx = make_context(w, Cluster(device=H100, num_devices=2048), options)
    assert stage_blocks(ctx, lay) == (7, 8, 7)
    per_layer = layer_activation_bytes(w.model, tokens=8192, seq=8192, e=2, tp=8, sequence_parallel=True,
                                       kernels="fused", attention="flash", dropout=False)
    assert train_memory(ctx, lay)["activations"] == pytest.approx(15 * 8 * per_layer)
    # without the option every stage is taken at the ceiling, 8 blocks: the first stage's 16 × 8 is the peak
    even = make_context(w, Cluster(device=H100, num_devices=2048), options.replace(pp_embedding_as_layer=False))
    assert stage_blocks(even, lay) == (8, 8, 8)
    assert train_memory(even, lay)["activations"] > 16 * 8 * per_layer


@pytest.mark.parametrize("pp,vp,rank,expected", [
    (16, 1, 0, 16), (16, 1, 1, 15), (8, 1, 7, 1),
    # interleaved: 2(pp−rank−1) + (vp−1)·pp + 1 chunks of 1/vp stage (Megatron-LM's warm-up)
    (8, 2, 0, 8 + 7 / 2), (8, 2, 1, (2 * 6 + 8 + 1) / 2), (8, 12, 0, 8 + 7 / 12),
])
def test_inflight_micro_batches_per_stage(pp, vp, rank, expected):
    assert inflight_micro_batches(pp, vp, 1000, rank=rank) == pytest.approx(expected)


@pytest.mark.parametrize("pp,vp,ga,rank", [(8, 2, 16, 0), (8, 2, 16, 1), (8, 2, 16, 7), (16, 8, 32, 0),
                                            (16, 8, 32, 5), (4, 3, 4, 0), (4, 2, 2, 0), (16, 2, 1000, 0)])
def test_interleaved_schedule_with_equal_chunks_is_the_warm_up_count(pp, vp, ga, rank):
    # played chunk by chunk, equal chunks give Megatron-LM's closed form back (Korthikanti et al. 2022 §4.2.3)
    assert interleaved_peak_bytes(pp, vp, ga, rank, [1.0 / vp] * vp) == pytest.approx(
        inflight_micro_batches(pp, vp, ga, rank=rank))


def _replay(pp, vp, ga, rank, chunk_bytes):
    """Megatron-LM's interleaved 1F1B on one rank, every forward and backward of the step."""
    total, group = ga * vp, pp * vp
    warmup = min(2 * (pp - rank - 1) + (vp - 1) * pp, total)
    held = peak = 0.0
    for k in range(total):
        held += chunk_bytes[(k % group) // pp]
        peak = max(peak, held)
        if k >= warmup:
            held -= chunk_bytes[vp - 1 - ((k - warmup) % group) // pp]
    return peak


@pytest.mark.parametrize("pp,vp,ga,rank", [(16, 8, 32, 0), (16, 8, 32, 1), (16, 8, 64, 15), (4, 3, 40, 2),
                                            (8, 2, 9, 0), (2, 5, 100, 1), (12, 4, 36, 5)])
def test_interleaved_peak_stops_after_one_period_of_the_steady_state(pp, vp, ga, rank):
    # the planner replays only the warm-up and one period past it; the whole step reaches no higher peak
    chunks = [0.0, *(1.0 + 0.1 * c for c in range(1, vp))]  # unequal: an embedding-only first chunk, growing others
    assert interleaved_peak_bytes(pp, vp, ga, rank, chunks) == pytest.approx(_replay(pp, vp, ga, rank, chunks))


def test_llama3_first_chunk_holding_only_the_embedding_keeps_the_warm_up_off_the_layers():
    # Dubey et al. 2024 §3.3.2: pp 16, the first chunk of the first stage "has only the embedding", so a chunk is one
    # block and vp = (126 + 2) / 16 = 8. Rank 0 warms up 2·15 + 7·16 = 142 chunks: the 16 + 15 of its first chunk
    # hold no layer, the other 7 chunks 16 micro-batches each — 112 layer-micro-batches, what 1F1B keeps (16 × 7), not
    # the 143 / 8 × 7 ≈ 125 of spreading the warm-up evenly. Rank 1 (8 full chunks) warms up 140 + 1: the peak.
    options = PlanOptions(pp_embedding_as_layer=True, kernels="fused", dropout=False)
    w, lay = _405b(), Layout(dp=64, tp=8, pp=16, vp=8, micro_batch=1, grad_accum=32, sequence_parallel=True)
    ctx = make_context(w, Cluster(device=H100, num_devices=8192), options)
    per_layer = layer_activation_bytes(w.model, tokens=8192, seq=8192, e=2, tp=8, sequence_parallel=True,
                                       kernels="fused", attention="flash", dropout=False)
    first = interleaved_peak_bytes(16, 8, 32, 0, [0.0] + [1.0] * 7)
    assert first == 112 == 16 * 7
    assert interleaved_peak_bytes(16, 8, 32, 1, [1.0] * 8) == 141
    assert train_memory(ctx, lay)["activations"] == pytest.approx(141 * per_layer)


def test_a_chunk_may_hold_only_the_embedding_or_the_head(capsys):
    # pp 16 × vp 8 = 128 chunks over 126 layers + the embedding + the head: the Llama 3 paper's layout
    cluster = Cluster(device=H100, num_devices=8192)
    lay = Layout(dp=64, tp=8, pp=16, vp=8, micro_batch=1, grad_accum=32, zero=2, sequence_parallel=True)
    est = plan(_405b(), cluster, PlanOptions(pp_embedding_as_layer=True), layout=lay)
    assert est.details["step_time_s"] > 0
    with pytest.raises(UserError, match=r"^--pp 16 × --vp 8 = 128 stage chunks exceed the 126 layers of "):
        plan(_405b(), cluster, layout=lay)  # without the option a chunk needs a layer
    with pytest.raises(UserError, match=r"^--pp 16 × --vp 16 = 256 stage chunks exceed the 126 layers \+ the "
                                        r"embedding and the head of llama-3.1-405b"):
        plan(_405b(), cluster, PlanOptions(pp_embedding_as_layer=True), layout=lay._replace(vp=16))
    code, out, err = _cli(capsys, "--model", "llama-3.1-405b", "--hardware", "h100", "--num-devices", "8192",
                          "--tp", "8", "--pp", "16", "--vp", "8", "--global-batch", "2048", "--seq-len", "8192",
                          "--pp-embedding-as-layer", "--json")
    assert code == 0, err
    assert json.loads(out)["layout"]["vp"] == 8


def test_pinned_tp_that_splits_no_heads_says_so_without_a_device_count(capsys):
    # before: "no device count up to --max-devices 65536 can hold the layout fields given (--tp 3)"
    w = Workload(model=get_preset("llama-3.1-70b"), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))
    with pytest.raises(UserError, match=r"^--tp 3 does not divide the 64 attention heads of llama-3.1-70b; use one "
                                        r"of 1, 2, 4, 8$"):
        search(w, Cluster(device=H100, num_devices=8), fixed={"tp": 3}, minimize_devices=True)
    code, out, err = _cli(capsys, "--model", "llama-3.1-70b", "--hardware", "h100", "--tp", "3")
    assert code == 2 and out == ""
    assert err.strip().splitlines() == ["error: --tp 3 does not divide the 64 attention heads of llama-3.1-70b; use "
                                        "one of 1, 2, 4, 8"]
