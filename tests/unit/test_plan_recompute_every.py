"""Full recompute of every n-th transformer block (issue 32: torchtitan's 'selective layer' activation checkpointing,
``selective_ac_option`` n): ⌊L/n⌋ blocks keep only their input and run their forward again in backward, the others
keep all their activations."""

import json

import pytest

from accelkit.core import Cluster, Recipe, UserError, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import Layout, PlanOptions, plan, search
from accelkit.plan.layout import checkpointed_blocks, recompute_share
from accelkit.plan.memory import layer_activation_bytes
from tests.conftest import main_in_process

A100 = get_device("a100")
OPTS = PlanOptions(use_calibration=False, kernels="eager", attention="flash", dropout=False)


def _workload(model: str = "llama-3.1-8b", seq: int = 8192) -> Workload:
    return Workload(model=get_preset(model), task="train", seq_len=seq, recipe=Recipe(precision="bf16"))


def _plan(recompute: str, every: int = 1, *, pp: int = 1, model: str = "llama-3.1-8b") -> dict:
    dp = 8 // pp
    lay = Layout(dp=dp, tp=1, pp=pp, zero=3, micro_batch=1, grad_accum=4 * pp, recompute=recompute,
                 recompute_every=every)
    return plan(_workload(model), Cluster(device=A100, num_devices=8), OPTS, layout=lay).details


def _layer_bytes(recompute: str) -> float:
    model = get_preset("llama-3.1-8b")
    return layer_activation_bytes(model, tokens=8192, seq=8192, e=2, recompute=recompute, kernels="eager",
                                  attention="flash", dropout=False)


def test_torchtitan_checkpoints_every_nth_block_counted_from_one():
    # parallelize_llama.py (torchtitan 395a526): block k (1, 2, …) is wrapped when k % n == 0
    assert [checkpointed_blocks(32, n) for n in (1, 2, 3, 4, 32, 33)] == [32, 16, 10, 8, 1, 0]
    full = Layout(dp=1, tp=1, pp=1, recompute="full", recompute_every=3)
    assert recompute_share(full, 32) == pytest.approx(10 / 32)
    assert recompute_share(full._replace(recompute_every=1), 32) == 1.0
    assert recompute_share(full._replace(recompute="none"), 32) == 0.0


def test_every_first_block_is_full_recompute():
    assert _plan("full", 1) == _plan("full")


@pytest.mark.parametrize("every, checkpointed", [(2, 16), (3, 10), (4, 8)])
def test_memory_keeps_the_inputs_of_checkpointed_blocks_and_all_of_the_others(every, checkpointed):
    full, none, part = (_plan(*a)["memory_per_device_bytes"]["activations"]
                        for a in (("full",), ("none",), ("full", every)))
    kept, inp = _layer_bytes("none"), _layer_bytes("full")
    # the same first-stage micro-batches in flight (pp 1: one); full and none differ only in the 32 blocks and
    # full's one rebuilt block
    head = none - 32 * kept
    assert full == pytest.approx(32 * inp + head + kept, rel=1e-9)
    assert part == pytest.approx(checkpointed * inp + (32 - checkpointed) * kept + head + kept, rel=1e-9)
    assert none > part > full


@pytest.mark.parametrize("every", [2, 3, 4])
def test_time_reruns_the_forward_of_the_checkpointed_share_only(every):
    full, none, part = (_plan(*a)["time_breakdown_s"] for a in (("full",), ("none",), ("full", every)))
    share = checkpointed_blocks(32, every) / 32
    for key in ("compute", "memory", "launch"):  # each linear in the recomputed forward
        assert part[key] == pytest.approx(none[key] + share * (full[key] - none[key]), rel=1e-9, abs=1e-12), key
    assert full["compute"] > part["compute"] > none["compute"]
    step = {k: _plan(*a)["step_time_s"] for k, a in (("full", ("full",)), ("none", ("none",)), ("part", ("full", every)))}
    assert step["full"] > step["part"] > step["none"]


def test_share_is_taken_over_the_heaviest_stage():
    # pp 2 over 32 layers: 16 blocks a stage, every 3rd of them checkpointed: 5 of 16, not 10 of 32
    full, none, part = (_plan(*a, pp=2)["time_breakdown_s"]["compute"] for a in (("full",), ("none",), ("full", 3)))
    assert part == pytest.approx(none + 5 / 16 * (full - none), rel=1e-9)


def test_assumption_names_the_blocks():
    doc = _plan("full", 3)
    assert doc["layout"]["recompute_every"] == 3
    assert any("10 of the heaviest stage's 32 blocks keep only their input" in a for a in doc["assumptions"])
    assert not any("recompute-every" in a for a in _plan("full")["assumptions"])


def test_search_keeps_a_pinned_every_on_full_recompute():
    found = search(_workload(), Cluster(device=A100, num_devices=8), options=OPTS,
                   fixed={"recompute": "full", "recompute_every": 2}, global_batch=32)
    assert found and {(c.layout.recompute, c.layout.recompute_every) for c in found} == {("full", 2)}


@pytest.mark.parametrize("fixed, msg", [
    ({"recompute_every": 2}, "--recompute-every 2 checkpoints one block in 2 in full and needs --recompute full; "
                             "no --recompute was given"),
    ({"recompute": "selective", "recompute_every": 2}, "--recompute selective was given"),
    ({"recompute": "full", "recompute_every": 33}, "--recompute-every 33 exceeds the 32 layers of llama-3.1-8b"),
])
def test_refused_where_it_cannot_apply(fixed, msg):
    with pytest.raises(UserError, match="^--recompute-every ") as err:
        search(_workload(), Cluster(device=A100, num_devices=8), options=OPTS, fixed=fixed, global_batch=32)
    assert msg in str(err.value)


def test_plan_refuses_it_on_a_cnn():
    w = Workload(model=get_preset("resnet-50"), task="train", seq_len=1, recipe=Recipe(precision="bf16"))
    with pytest.raises(UserError, match="the CNN resnet-50 has none"):
        plan(w, Cluster(device=A100, num_devices=1), OPTS,
             layout=Layout(dp=1, tp=1, pp=1, recompute="full", recompute_every=2))


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    return main_in_process(capsys, "plan", "--model", "llama-3.1-8b", "--hardware", "a100", *args)


def test_cli_flag_plans_and_shows_it(capsys):
    code, out, err = _cli(capsys, "--num-devices", "8", "--dp", "8", "--tp", "1", "--pp", "1", "--zero", "3",
                          "--micro-batch", "1", "--recompute", "full", "--recompute-every", "2", "--seq-len", "8192",
                          "--global-batch", "32", "--no-use-calibration", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["layout"]["recompute"] == "full" and doc["layout"]["recompute_every"] == 2
    code, out, err = _cli(capsys, "--num-devices", "8", "--dp", "8", "--tp", "1", "--pp", "1", "--zero", "3",
                          "--micro-batch", "1", "--recompute", "full", "--recompute-every", "2", "--seq-len", "8192",
                          "--global-batch", "32", "--no-use-calibration")
    assert code == 0, err
    assert "rc=full/2" in out


@pytest.mark.parametrize("args, msg", [
    (("--recompute-every", "2"), "needs --recompute full"),
    (("--recompute-every", "0"), "--recompute-every"),
    (("--task", "infer", "--recompute-every", "2"), "--recompute-every 2 applies to --task train"),
])
def test_cli_refuses_in_one_line(capsys, args, msg):
    code, _out, err = _cli(capsys, "--num-devices", "8", *args)
    assert code == 2
    assert msg in err and len([line for line in err.splitlines() if line.startswith("error")]) == 1

