"""In-flight batching in the inference model (issue 32, serving): an engine that runs new requests' prefill in the
same iterations as the running requests' decode (TensorRT-LLM) reads each layer's weights once per step for both."""

import pytest

from accelkit.core import Cluster, Recipe, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import Layout, PlanOptions
from accelkit.plan.context import make_context
from accelkit.plan.evaluate import evaluate_infer
from accelkit.plan.time import infer_time


def _ctx(inflight: bool, prompt: int, output: int):
    w = Workload(model=get_preset("llama-3.1-8b"), task="infer", prompt_len=prompt, output_len=output, batch_size=1,
                 recipe=Recipe(precision="bf16"))
    return make_context(w, Cluster(device=get_device("h100"), num_devices=1),
                        PlanOptions(use_calibration=False, inflight_batching=inflight))


@pytest.mark.parametrize("prompt,output", [(2048, 128), (1000, 1000), (128, 2048)])
def test_inflight_batching_overlaps_prefill_with_memory_bound_decode(prompt, output):
    lay = Layout(dp=1, tp=1, pp=1)
    static, inflight = evaluate_infer(_ctx(False, prompt, output), lay, 64), evaluate_infer(_ctx(True, prompt, output),
                                                                                          lay, 64)
    t = infer_time(_ctx(True, prompt, output), lay, 64)
    # the decode steps read the weights anyway: the prefill's GEMMs ride along, so the whole is faster than prefill
    # then decode, but never faster than the decode steps alone or the prefill's own compute
    assert inflight.step_time_s < static.step_time_s
    assert inflight.step_time_s >= output * t["decode"]
    assert inflight.step_time_s >= t["prefill_compute"]
    # one step = one decode for every running request and its share of the prefills: the inter-token latency
    assert inflight.itl_s == pytest.approx(inflight.step_time_s / output)
    assert inflight.prefill_time_s == static.prefill_time_s  # a lone request's TTFT does not change
    assert sum(inflight.time_breakdown.values()) == pytest.approx(inflight.step_time_s)


def test_inflight_batching_is_off_by_default():
    assert PlanOptions().inflight_batching is False
    assert "mixed_step" not in infer_time(_ctx(False, 512, 128), Layout(dp=1, tp=1, pp=1), 8)
