"""`--selective-recompute op` says what `--recompute selective` recomputes (docs/plan.md). With a pinned `--recompute`
none or full, or a CNN (recompute none or full only), no layout reads it: the plan was the same as without it and
nothing said so. It is refused in one line, exit 2, as `--recompute-every` without `--recompute full` is. In process."""

import pytest

from accelkit.core import UserError
from accelkit.plan.options import PlanOptions
from accelkit.plan.recommend import compare
from tests.conftest import run_cli


@pytest.mark.parametrize(("recompute", "says"), [("full", "recomputes every block"), ("none", "recomputes nothing")])
def test_op_with_a_pinned_recompute_that_is_not_selective_is_refused(recompute, says):
    proc = run_cli("plan", "--model", "tiny-llama", "--hardware", "h100", "--num-devices", "2",
                   "--recompute", recompute, "--selective-recompute", "op")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: --selective-recompute op chooses what --recompute selective recomputes; "
                               f"--recompute {recompute} {says}")


def test_op_on_a_cnn_is_refused():
    proc = run_cli("plan", "--model", "tiny-resnet", "--hardware", "h100", "--selective-recompute", "op")
    assert proc.returncode == 2 and "the CNN tiny-resnet has none" in proc.stderr, proc.stderr


def test_op_with_selective_or_a_searched_recompute_still_plans():
    for extra in ((), ("--recompute", "selective")):
        proc = run_cli("plan", "--model", "tiny-llama", "--hardware", "h100", "--num-devices", "2",
                       "--selective-recompute", "op", *extra, "--json")
        assert proc.returncode == 0, proc.stderr


def test_the_library_compare_refuses_it_too():
    from accelkit.core import Workload
    from accelkit.models import get_preset
    workload = Workload(model=get_preset("tiny-llama"), task="train", seq_len=64)
    with pytest.raises(UserError, match="--recompute full recomputes every block"):
        compare(workload, ["h100", "b200"], options=PlanOptions(selective_recompute="op", use_calibration=False),
                fixed={"recompute": "full"}, num_devices=2)


def test_vp_for_inference_without_a_device_count_says_inference_does_not_take_it():
    # docs/plan.md: a --cp/--vp above 1, which the inference model does not take, is one error line naming it. Without
    # --num-devices, --vp 2 was refused as "needs --pp > 1", and the --pp 2 --vp 2 it pointed to then as not modelled
    for extra in ((), ("--num-devices", "2"), ("--pp", "2")):
        proc = run_cli("plan", "--model", "tiny-llama", "--task", "infer", "--hardware", "h100", "--vp", "2", *extra)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1, proc.stderr
        assert lines[0] == ("error: --vp 2: interleaved-pipeline inference is not modelled (its time and memory "
                            "ignore it); drop --vp or plan --task train"), (extra, lines)
