"""`accelkit.plan.search` and `compare` refuse what `accelkit plan` refuses, each with one line naming the value and
the fix. Before: the flags' ranges guarded the CLI only, so Python callers got wrong numbers or a traceback."""

import pytest

from accelkit.cli.app import main
from accelkit.core import Cluster, Recipe, UserError, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import compare, search

TRAIN = Workload(model=get_preset("llama-3.1-8b"), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))
INFER = Workload(model=get_preset("llama-3.1-8b"), task="infer", seq_len=1024, recipe=Recipe(precision="bf16"))
TWO_H100 = Cluster(device=get_device("h100"), num_devices=2)


def _refused(call, *args, **kwargs) -> str:
    with pytest.raises(UserError) as info:
        call(*args, **kwargs)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("workload,arguments,named", [
    # before: a "best" candidate with grad_accum -4, step_time_s -1.32 and fits True
    (TRAIN, {"global_batch": -4}, "global_batch=-4 is not valid; give a positive integer"),
    # before: ZeroDivisionError in evaluate.py
    (TRAIN, {"global_batch": 0}, "global_batch=0 is not valid"),
    (TRAIN, {"global_batch": 64.0}, "global_batch=64.0 is not valid"),
    # before: top=-1 sliced off the last candidate, top=0 returned them all
    (TRAIN, {"top": -1}, "top=-1 is not valid; give a positive integer (the best K candidates), or None for all"),
    (TRAIN, {"top": 0}, "top=0 is not valid"),
    # before: ordinary-looking inference plans
    (INFER, {"batch": -3}, "batch=-3 is not valid; give a positive integer (concurrent sequences per inference"),
    (INFER, {"batch": 0}, "batch=0 is not valid"),
    # before: a misspelt key was ignored, so the plan was unpinned
    (TRAIN, {"fixed": {"tpp": 2}}, "fixed has no layout field 'tpp'; did you mean 'tp'? the fields are dp, tp, pp, ep, "
                                   "cp, vp, zero, micro_batch, recompute, recompute_every, sequence_parallel"),
    (TRAIN, {"fixed": {"micro_batch": 0}}, "micro_batch=0 is out of range; expected >= 1"),  # before: ZeroDivisionError
    (TRAIN, {"fixed": {"tp": 0}}, "tp=0 is out of range; expected >= 1"),  # before: ZeroDivisionError
    (TRAIN, {"fixed": {"sequence_parallel": 1}}, "sequence_parallel=1 is not valid"),  # before: planned, reported as 1
    (TRAIN, {"fixed": {"tp": "2"}}, "tp='2' is not valid"),
])
def test_search_refuses_bad_arguments_in_one_line(workload, arguments, named):
    cluster = TWO_H100 if workload is TRAIN else Cluster(device=get_device("h100"), num_devices=1)
    assert named in _refused(search, workload, cluster, **arguments)


def test_search_keeps_good_arguments():
    assert len(search(TRAIN, TWO_H100, global_batch=64, top=3)) == 3
    assert search(TRAIN, TWO_H100, global_batch=64, fixed={"tp": 2, "dp": None}, top=1)[0].layout.tp == 2


def test_compare_takes_one_hardware_name_as_a_string():
    # before: the string was iterated, "unknown hardware 'h'"
    rows = compare(TRAIN, "h100", global_batch=64)
    assert [ctx.cluster.device.name for _, ctx in rows] == [get_device("h100").name]
    assert [ctx.cluster.device.name for _, ctx in compare(TRAIN, ("h100", "b200"), global_batch=64)] == [
        get_device("h100").name, get_device("b200").name]


@pytest.mark.parametrize("arguments,named", [
    ({"global_batch": 0}, "global_batch=0 is not valid"),
    ({"num_devices": 0}, "num_devices=0 is not valid; give a positive integer (devices)"),
    ({"fixed": {"tpp": 2}}, "fixed has no layout field 'tpp'"),
])
def test_compare_refuses_the_same_bad_arguments(arguments, named):
    assert named in _refused(compare, TRAIN, ["h100", "b200"], **arguments)


def test_compare_refuses_no_hardware():
    assert "at least one hardware name" in _refused(compare, TRAIN, [])


@pytest.mark.parametrize("flags", [["--global-batch", "-4"], ["--global-batch", "0"], ["--top", "0"], ["--top", "-1"],
                                   ["--tpp", "2"], ["--micro-batch", "0"], ["--task", "infer", "--batch", "0"]])
def test_cli_still_exits_2_with_one_line(capsys, flags):
    with pytest.raises(SystemExit) as info:
        main(["plan", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "2", *flags])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and len(err.splitlines()) == 1 and err.startswith("error: "), err


@pytest.mark.parametrize("fields,named", [
    ({"micro_batch": 0}, "Layout micro_batch=0 is not valid; give an integer >= 1"),  # before: ZeroDivisionError
    ({"grad_accum": 0}, "Layout grad_accum=0 is not valid; give an integer >= 1"),  # before: ZeroDivisionError
    ({"grad_accum": -3}, "Layout grad_accum=-3 is not valid"),  # before: a ValueError after the whole plan
    ({"micro_batch": 2.0}, "Layout micro_batch=2.0 is not valid"),
    ({"vp": 0}, "Layout vp=0 is not valid"),
    ({"recompute_every": 0}, "Layout recompute_every=0 is not valid"),
    ({"zero": 7}, "Layout zero=7 is not valid; give a ZeRO stage 0, 1, 2 or 3"),
    ({"recompute": "bogus"}, "Layout recompute='bogus' is not valid; give 'none', 'selective' or 'full'"),
    ({"shard_group": 0}, "Layout shard_group=0 is not valid"),
    ({"sequence_parallel": 1}, "Layout sequence_parallel=1 is not valid; give True or False"),
])
def test_plan_refuses_a_layout_field_out_of_range_in_one_line(fields, named):
    # found in review: plan(layout=Layout(micro_batch=0)) raised ZeroDivisionError; a Layout is a NamedTuple that
    # checks nothing, so plan() checks its fields first
    from accelkit.plan import Layout, plan

    layout = Layout(**{"dp": 2, "tp": 1, "pp": 1, **fields})
    assert _refused(plan, TRAIN, TWO_H100, layout=layout).startswith(named)
