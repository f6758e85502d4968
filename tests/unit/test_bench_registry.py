"""The workload registry, configs and workload-level refusals (no model is built here)."""

import pytest

from accelkit.bench.variants import Variant
from accelkit.bench.workloads import WORKLOADS, get_workload, make_workload
from accelkit.core import UserError


def test_every_workload_is_registered_with_a_config_and_summary():
    assert set(WORKLOADS) == {"bert", "resnet", "llm", "llm-train", "dataloader", "diffusion", "custom"}
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
    with pytest.raises(ValueError, match=r"^--step-time 0 is no training step"):  # (every setting 'input-bound')
        make_workload("dataloader", {"step_time_s": 0})


def test_custom_module_errors_are_one_sentence():
    custom = make_workload("custom", {"module": "no_such_module_xyz:make"})
    with pytest.raises(UserError, match="cannot import 'no_such_module_xyz'"):
        custom.label  # noqa: B018
    with pytest.raises(UserError, match="package.module:factory"):
        make_workload("custom", {"module": "nocolon"}).label  # noqa: B018


@pytest.mark.parametrize("name, config, flag", [
    ("bert", {"size": "tiny", "batch_size": 10**9}, "--batch-size 1000000000 --seq-len 384"),
    ("llm", {"model": "tiny-llama", "batch_size": 10**9, "prompt_len": 4}, "--batch-size 1000000000 --prompt-len 4"),
    ("llm-train", {"model": "tiny-llama", "seq_len": 2048, "batch_size": 10**7}, "--batch-size 10000000 --seq-len"),
    ("resnet", {"size": "tiny", "batch_size": 2, "image_size": 10**6}, "--batch-size 2 --image-size 1000000"),
])
def test_absurd_sizes_are_refused_before_anything_is_allocated(name, config, flag):
    """What one step must hold at once (inputs, the first activations) is a lower bound of its memory: a size that
    cannot fit is one line naming the flags, said by check() before a tensor exists."""
    with pytest.raises(UserError, match="needs at least") as refused:
        make_workload(name, config).check("cpu")
    assert flag in str(refused.value) and "lower --batch-size" in str(refused.value)
    make_workload(name, {**config, "batch_size": 1, **({"image_size": 64} if name == "resnet" else {})}).check("cpu")


def test_dataloader_refuses_batches_that_cannot_be_in_flight_and_workers_beyond_the_cores():
    with pytest.raises(UserError, match=r"--batch-size 2524929481 of 3×224×224 float32 images"):
        make_workload("dataloader", {"batch_size": 2524929481}).check("cpu")
    with pytest.raises(UserError, match=r"3 batch\(es\) in flight"):  # 1 read + 1 worker × 2 prefetched
        make_workload("dataloader", {"batch_size": 10**5, "num_workers": [1], "prefetch_factor": [2]}).check("cpu")
    with pytest.raises(UserError, match="--num-workers 100000 is more than 4 worker processes per usable CPU core"):
        make_workload("dataloader", {"num_workers": [0, 100000]}).check("cpu")
    make_workload("dataloader", {"batch_size": 2, "image_size": 8, "num_workers": [0, 1]}).check("cpu")


def test_seeds_cover_what_torch_takes():
    from accelkit.bench.runner import SEED_MAX, BenchConfig
    from accelkit.bench.workloads.base import model_seed

    assert SEED_MAX == 2**64 - 1
    BenchConfig(seed=SEED_MAX)
    with pytest.raises(ValueError, match="seed"):
        BenchConfig(seed=SEED_MAX + 1)
    model_seed(SEED_MAX)  # the inputs' seed (seed + 1) wraps instead of overflowing torch's unsigned 64 bits


def test_loop_phases_are_bounded():
    from accelkit.timing import LoopConfig

    for field in ("warmup_time_s", "min_time_s"):
        with pytest.raises(ValueError, match=field):
            LoopConfig(**{field: float("inf")})
    for field in ("warmup_iterations", "min_iterations", "max_iterations"):
        with pytest.raises(ValueError, match=field):
            LoopConfig(**{field: 10**20})
