"""Vocabulary types: validation names the field; JSON round trip is lossless (property-tested)."""

import json
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from accelkit.core import Cluster, DeviceSpec, Estimate, Measurement, ModelSpec, Recipe, Workload, summarize
from accelkit.core.recipe import CompileMode, Precision, Quantization, Recompute
from accelkit.core.serving_memory import KVCacheDtype
from accelkit.hardware import list_devices
from accelkit.models import PRESETS


def _choices(literal):
    return st.sampled_from(literal.__args__)


recipes = st.builds(
    Recipe,
    precision=_choices(Precision),
    quantization=st.none() | _choices(Quantization),
    kv_cache_dtype=_choices(KVCacheDtype),
    recompute=_choices(Recompute),
    compile=_choices(CompileMode),
    channels_last=st.booleans(),
    fold_bn=st.booleans(),
    sparsity=st.sampled_from([None, "2:4"]),
    warm_allocator=st.booleans(),
    dp=st.integers(1, 4096),
    tp=st.integers(2, 64),
    pp=st.integers(1, 128),
    ep=st.integers(1, 64),
    zero=st.integers(0, 3),
    micro_batch=st.integers(1, 64),
    grad_accum=st.integers(1, 512),
    sequence_parallel=st.booleans(),
    offload=st.booleans(),
)
models = st.sampled_from([f() for f in PRESETS.values()])
devices = st.sampled_from(list_devices())
workloads = st.builds(
    Workload, model=models, task=st.sampled_from(["train", "infer", "serve"]), recipe=recipes,
    batch_size=st.integers(1, 10_000), seq_len=st.integers(1, 1 << 20), prompt_len=st.integers(1, 1 << 17),
    output_len=st.integers(0, 1 << 15), optimizer=st.sampled_from(["adam", "sgd"]),
)
finite = st.floats(min_value=0, max_value=1e30, allow_nan=False, allow_infinity=False)
json_leaf = st.none() | st.booleans() | st.integers(-(2**53), 2**53) | finite | st.text(max_size=20)
json_values = st.recursive(json_leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=3), max_leaves=10)


def _roundtrip(obj):
    again = type(obj).from_dict(json.loads(json.dumps(obj.to_dict())))
    assert again == obj
    return again


@settings(max_examples=200, deadline=None)
@given(recipes)
def test_recipe_roundtrip(recipe):
    _roundtrip(recipe)


@settings(max_examples=100, deadline=None)
@given(workloads, devices, st.integers(1, 100_000))
def test_workload_and_cluster_roundtrip(workload, device, n):
    _roundtrip(workload)
    _roundtrip(Cluster(device=device, num_devices=n))


@settings(max_examples=100, deadline=None)
@given(
    workloads | st.none(),
    st.lists(st.floats(1e-6, 10.0), min_size=1, max_size=50),
    st.dictionaries(st.text(max_size=10), json_values, max_size=4),
    st.dictionaries(st.text(min_size=1, max_size=10), st.lists(finite, max_size=20), max_size=3),
)
def test_results_roundtrip(workload, samples, details, series):
    common = dict(kind="bench", name="x", workload=workload, latency_s=summarize(samples), details=details,
                  memory_bytes={"total": 123}, mfu=0.4, environment={"torch": "2.13"})
    _roundtrip(Estimate(**common))
    _roundtrip(Measurement(**common, samples=series))


def test_model_and_device_roundtrip():
    for factory in PRESETS.values():
        _roundtrip(factory())
    for device in list_devices():
        _roundtrip(device)


@pytest.mark.parametrize(
    ("kwargs", "field", "hint"),
    [
        ({"precision": "int4"}, "precision", "fp32"),
        ({"quantization": "int3"}, "quantization", "int8-dynamic"),
        ({"kv_cache_dtype": "fp4"}, "kv_cache_dtype", "auto"),
        ({"recompute": "some"}, "recompute", "selective"),
        ({"compile": True}, "compile", "reduce-overhead"),
        ({"compile": 0}, "compile", "False"),
        ({"zero": 4}, "zero", "<= 3"),
        ({"tp": 0}, "tp", ">= 1"),
        ({"dp": 1.5}, "dp", "integer"),
        ({"micro_batch": True}, "micro_batch", "integer"),
        ({"sparsity": "1:2"}, "sparsity", "2:4"),
        ({"sequence_parallel": True}, "sequence_parallel", "tp > 1"),
    ],
)
def test_recipe_rejects_bad_values_naming_the_field(kwargs, field, hint):
    with pytest.raises(ValueError) as info:
        Recipe(**kwargs)
    assert field in str(info.value) and hint in str(info.value)


def test_specs_are_frozen_slotted_keyword_only():
    r = Recipe()
    with pytest.raises(AttributeError):
        r.precision = "bf16"  # type: ignore[misc]
    assert not hasattr(r, "__dict__")
    with pytest.raises(TypeError):
        Recipe("bf16")  # type: ignore[misc]


def test_from_dict_names_unknown_fields():
    with pytest.raises(ValueError, match="no field precisoin.*known fields"):
        Recipe.from_dict({"precisoin": "bf16"})


def test_model_spec_cross_field_checks():
    base = PRESETS["tiny-llama"]()
    with pytest.raises(ValueError, match="num_kv_heads"):
        base.replace(num_kv_heads=3)
    with pytest.raises(ValueError, match="num_experts"):
        base.replace(num_experts=4)
    with pytest.raises(ValueError, match="hidden_size"):
        base.replace(hidden_size=65)
    with pytest.raises(ValueError, match="num_layers"):
        ModelSpec(name="x", kind="decoder", family="llama", num_layers=-1)


def test_device_rejects_non_positive_peak():
    with pytest.raises(ValueError, match=r"peak_flops\['bf16'\]"):
        DeviceSpec(name="x", vendor="y", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0, peak_flops={"bf16": 0.0})
    with pytest.raises(ValueError, match="peak_flops"):
        DeviceSpec(name="x", vendor="y", memory_bytes=1, memory_bandwidth_bytes_per_s=1.0, peak_flops={"bf17": 1.0})


def test_core_and_light_packages_do_not_import_torch():
    code = (
        "import sys, accelkit.core, accelkit.hardware, accelkit.models, accelkit.results;"
        "from accelkit.models import get_preset; get_preset('llama-3.1-70b').num_params();"
        "bad = [m for m in ('torch', 'transformers', 'numpy') if m in sys.modules]; print(bad); assert not bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
