"""The planner's Python API refuses what the task never reads, as `accelkit plan` does, in the same words: a
training-only option (or recipe layout field) on an inference plan, an inference-only option (or KV dtype, or a
``batch``) on a training plan — each was accepted and the plan silently unchanged."""

import pytest

import accelkit.plan as P
from accelkit.core import Cluster, Recipe, UserError, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset

MODEL = get_preset("llama-3.1-8b")
ONE = Cluster(device=get_device("h100"), num_devices=1)
INFER = Workload(model=MODEL, task="infer", recipe=Recipe(precision="bf16"))
TRAIN = Workload(model=MODEL, task="train", recipe=Recipe(precision="bf16"), seq_len=2048)


@pytest.mark.parametrize(("option", "value", "flag"), [
    ("optimizer_states", "bf16", "--optimizer-states bf16"),
    ("frozen_weights", True, "--frozen-weights"),
    ("grad_reduce_overlap", False, "--no-grad-reduce-overlap"),
    ("dropout", True, "--dropout"),
    ("tp_comm_overlap", True, "--tp-comm-overlap"),
])
def test_inference_refuses_a_training_only_option_in_every_call(option, value, flag):
    options = P.PlanOptions(**{option: value})
    message = f"{flag} applies to --task train; inference does not model it — drop it"
    for call in (lambda: P.plan(INFER, ONE, options), lambda: P.search(INFER, ONE, options=options),
                 lambda: P.compare(INFER, ["h100"], options=options)):
        with pytest.raises(UserError) as caught:
            call()
        assert str(caught.value) == message


@pytest.mark.parametrize(("recipe", "starts"), [
    (Recipe(precision="bf16", recompute="full"), "--recompute full applies to --task train"),
    (Recipe(precision="bf16", zero=1), "--zero 1 applies to --task train"),
    (Recipe(precision="bf16", micro_batch=4), "--micro-batch 4 applies to --task train"),
    (Recipe(precision="bf16", grad_accum=4), "grad_accum=4 applies to --task train"),
])
def test_an_inference_plan_refuses_the_recipes_training_layout(recipe, starts):
    with pytest.raises(UserError, match=f"^{starts}"):
        P.plan(INFER.replace(recipe=recipe), ONE)


@pytest.mark.parametrize(("options", "message"), [
    (P.PlanOptions(max_serving_batch=8), "--max-serving-batch 8 applies to --task infer"),
    (P.PlanOptions(block_size=32), "--block-size 32 applies to --task infer"),
    (P.PlanOptions(inflight_batching=True), "--inflight-batching applies to --task infer"),
])
def test_training_refuses_an_inference_only_option(options, message):
    with pytest.raises(UserError) as caught:
        P.plan(TRAIN, ONE, options)
    assert str(caught.value) == f"{message}; training does not model it — drop it, or add --task infer"


def test_training_refuses_a_kv_dtype_and_a_serving_batch():
    with pytest.raises(UserError, match="^--kv-dtype fp8 applies to --task infer"):
        P.plan(TRAIN.replace(recipe=Recipe(precision="bf16", kv_cache_dtype="fp8")), ONE)
    with pytest.raises(UserError, match=r"^--batch 8 applies to --task infer .*give --global-batch"):
        P.search(TRAIN, ONE, batch=8)


def test_defaults_still_plan_both_tasks():
    assert P.plan(INFER, ONE).details and P.plan(TRAIN, ONE, P.PlanOptions()).details
