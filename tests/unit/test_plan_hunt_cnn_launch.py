"""A CNN training plan pays the host's kernel launches: ResNet-50 at micro-batch 1 (≥ 3 kernels per conv/linear,
5 µs each, against ~40 µs of GPU work an image) is launch-bound, not as fast per image as micro-batch 8 — before,
every micro-batch tied and the search chose mb1 × 1024 accumulation steps; the plan says "samples", not tokens."""

from __future__ import annotations

import re

from accelkit.core import Cluster, Recipe, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import Layout, plan, search
from accelkit.plan.time import CNN_KERNELS_PER_LAYER
from tests.conftest import main_in_process

RESNET = Workload(model=get_preset("resnet-50"), task="train", seq_len=1, recipe=Recipe(precision="bf16"))
H100 = Cluster(device=get_device("h100"), num_devices=1)


def _at(micro_batch: int) -> dict:
    return plan(RESNET, H100, layout=Layout(dp=1, tp=1, pp=1, micro_batch=micro_batch, grad_accum=1024 // micro_batch)).details


def test_micro_batch_one_is_launch_bound():
    one, eight = _at(1), _at(8)
    assert one["time_breakdown_s"]["launch"] > 0 and one["bottleneck"] == "launch"
    assert eight["time_breakdown_s"]["launch"] == 0
    assert one["step_time_s"] > 3 * eight["step_time_s"]
    layers = 54  # ResNet-50: 53 convolutions and the fc layer
    floor = 1024 * CNN_KERNELS_PER_LAYER * layers * 5e-6  # 1024 micro-batches of the launches, at 5 µs each
    assert one["step_time_s"] >= floor


def test_search_does_not_choose_micro_batch_one():
    best = search(RESNET, H100, global_batch=1024)[0]
    assert best.layout.micro_batch > 1 and best.time_breakdown["launch"] == 0


def test_cnn_step_line_counts_samples(capsys):
    code, out, err = main_in_process(capsys, "plan", "--model", "resnet-50", "--hardware", "h100", "--num-devices", "1")
    assert code == 0, err
    assert re.search(r"│ step\s+│ [\d.]+ s for 1024 samples", out), out
