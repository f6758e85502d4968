"""Inference batch and memory (issue 18 item 1): the default batch fits by construction, "max that fits" is
the largest batch for which ``fits`` is true, and the KV-cache dtype is the one really used — over every
transformer preset × catalog device (CNNs are traced with torch: tests/integration/test_plan_cli.py)."""

import pytest

from accelkit.core import Cluster, Recipe, Workload
from accelkit.hardware import get_device, list_devices
from accelkit.models import get_preset
from accelkit.models.presets import PRESETS
from accelkit.plan import PlanOptions, evaluate, search

NO_CAL = PlanOptions(use_calibration=False)
TRANSFORMERS = [n for n in PRESETS if get_preset(n).kind != "cnn"]


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_default_batch_fits_and_max_is_the_largest_fitting_batch(name):
    model = get_preset(name)
    for device in list_devices():
        w = Workload(model=model, task="infer", recipe=Recipe(precision="bf16"))
        best = search(w, Cluster(device=device), minimize_devices=True, top=1, options=NO_CAL)[0]
        ctx = best.extra["context"]
        where = f"{name} on {best.layout.num_devices} × {device.name}"
        assert isinstance(best.max_batch, int), where
        if best.max_batch == 0:  # nothing fits even at the largest count searched: reported, not hidden
            assert not best.fits, where
            continue
        assert best.fits and 1 <= best.batch <= best.max_batch, where
        assert best.batch == min(NO_CAL.max_serving_batch, best.max_batch), where
        assert evaluate(ctx, best.layout, best.max_batch).fits, where
        assert not evaluate(ctx, best.layout, best.max_batch + 1).fits, where


@pytest.mark.parametrize("name", TRANSFORMERS)
def test_training_default_layout_fits_when_any_does(name):
    model = get_preset(name)
    for device in list_devices():
        w = Workload(model=model, task="train", seq_len=2048, recipe=Recipe(precision="bf16"))
        found = search(w, Cluster(device=device), minimize_devices=True, options=NO_CAL)
        assert found[0].fits == any(c.fits for c in found), f"{name} on {device.name}"


def test_issue_18_llama_70b_on_h100_and_mi300x():
    w = Workload(model=get_preset("llama-3.1-70b"), task="infer", recipe=Recipe(precision="bf16"))
    for hw in ("H100-SXM5-80GB", "MI300X"):
        device = next(d for d in list_devices() if d.name == hw)
        best = search(w, Cluster(device=device), minimize_devices=True, top=1, options=NO_CAL)[0]
        assert best.fits and best.batch <= best.max_batch
        over = evaluate(best.extra["context"], best.layout, best.max_batch + 1)
        assert not over.fits and over.overflow["over_by_bytes"] > 0


def test_encoder_has_a_max_batch_and_memory_time():
    w = Workload(model=get_preset("bert-base"), task="infer", seq_len=512, recipe=Recipe(precision="bf16"))
    best = search(w, Cluster(device=get_device("h100")), minimize_devices=True, top=1, options=NO_CAL)[0]
    assert isinstance(best.max_batch, int) and best.max_batch >= best.batch
    assert best.time_breakdown["memory"] > 0  # norms, activations and weights move through memory


@pytest.mark.parametrize("precision,kv,expected", [("bf16", "auto", "bf16"), ("fp16", "auto", "fp16"),
                                                   ("fp32", "auto", "fp32"), ("fp8", "auto", "bf16"),
                                                   ("bf16", "fp8", "fp8"), ("bf16", "int8", "int8")])
def test_kv_cache_dtype_auto_is_resolved(precision, kv, expected):
    from accelkit.plan import plan

    w = Workload(model=get_preset("llama-3.1-8b"), task="infer", batch_size=4,
                 recipe=Recipe(precision=precision, kv_cache_dtype=kv))
    d = plan(w, Cluster(device=get_device("h100")), NO_CAL).details
    assert d["kv_cache_dtype"] == expected and d["kv_cache_dtype_requested"] == kv
