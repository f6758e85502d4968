"""The workload registry, configs and workload-level refusals (no model is built here)."""

import pytest

from accelkit.bench.variants import Variant
from accelkit.bench.workloads import WORKLOADS, get_workload, make_workload
from accelkit.core import UserError


def test_every_workload_is_registered_with_a_config_and_summary():
    assert set(WORKLOADS) == {"bert", "resnet", "llm", "llm-train", "dataloader", "custom"}
    for name, cls in WORKLOADS.items():
        assert cls.name == name and cls.summary and cls.config_cls.__doc__


def test_unknown_workload_suggests():
    with pytest.raises(UserError, match="did you mean bert"):
        get_workload("bertt")


def test_configs_validate_and_default_to_mlperf_shapes():
    bert = make_workload("bert", {"size": "tiny"})
    assert bert.config.seq_len == 384 and bert.label.startswith("bert tiny-bert")
    assert bert.spec().task == "infer"
    with pytest.raises(ValueError, match="size='huge'"):
        make_workload("bert", {"size": "huge"})
    with pytest.raises(UserError, match="exceeds"):
        make_workload("llm", {"model": "tiny-llama", "prompt_len": 4000}).label  # noqa: B018


def test_workload_refusals():
    bert = make_workload("bert", {"size": "tiny"})
    assert "inference" in bert.refusal(Variant(recompute=True), "cpu")
    assert "channels_last" in bert.refusal(Variant(channels_last=True), "cpu")
    train = make_workload("llm-train", {"model": "tiny-llama"})
    assert "inference-only" in train.refusal(Variant(precision="int8"), "cpu")


def test_dataloader_variants_are_loader_settings_and_pinning_needs_a_gpu():
    dl = make_workload("dataloader", {"num_workers": [0, 2], "pin_memory": [False, True], "prefetch_factor": [2]})
    names = [v.name for v in dl.variants([])]
    assert names == ["workers=0 pin=off", "workers=0 pin=on", "workers=2 pin=off prefetch=2", "workers=2 pin=on prefetch=2"]
    pinned = dl.variants([])[1]
    assert "no GPU" in dl.refusal(pinned, "cpu")
    assert dl.input_bound(0.02) is None  # no --step-time given
    slow = make_workload("dataloader", {"step_time_s": 0.01})
    assert slow.input_bound(0.02)["verdict"].startswith("input-bound")


def test_custom_module_errors_are_one_sentence():
    custom = make_workload("custom", {"module": "no_such_module_xyz:make"})
    with pytest.raises(UserError, match="cannot import 'no_such_module_xyz'"):
        custom.label  # noqa: B018
    with pytest.raises(UserError, match="package.module:factory"):
        make_workload("custom", {"module": "nocolon"}).label  # noqa: B018
