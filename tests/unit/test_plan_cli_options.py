"""`accelkit plan` flags are generated from its specs (issue 16 item 3): every flag the command had before
generation still exists, and each spec-backed one has its field's default and bounds."""

import typer

from accelkit.cli.app import app
from accelkit.plan import PlanOptions
from accelkit.plan.layout import MAX_DEVICES
from accelkit.plan.request import LayoutChoice, PlanRequest

FLAGS_BEFORE = ["--model", "--task", "--hardware", "--num-devices", "--tp", "--pp", "--dp", "--ep", "--zero",
                "--recompute", "--sequence-parallel", "--micro-batch", "--global-batch", "--seq-len", "--precision",
                "--optimizer", "--offload", "--batch", "--prompt-len", "--output-len", "--kv-dtype", "--compare", "--top",
                "--price-per-device-hour", "--activity-factor", "--target-tokens-per-s", "--json"]


def _plan_command():
    root = typer.main.get_command(app)
    return root.commands["plan"]


def test_plan_binds_its_three_specs():
    fn = _plan_command().callback
    while not hasattr(fn, "spec_options"):
        fn = fn.__wrapped__
    assert {spec for spec, _ in fn.spec_options} == {PlanRequest, LayoutChoice, PlanOptions}


def test_every_former_flag_survives_generation():
    opts = {o for p in _plan_command().params for o in p.opts}
    assert set(FLAGS_BEFORE) <= opts
    assert {"--cp", "--vp", "--attention", "--kernels", "--tp-comm-overlap"} <= opts


def test_num_devices_is_bounded_like_the_planner():
    param = next(p for p in _plan_command().params if "--num-devices" in p.opts)
    assert (param.min, param.max) == (1, MAX_DEVICES)
