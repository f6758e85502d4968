"""The Python API at its edges: devices and recipes that recipes.apply cannot take, the caller's RNG around a
bench run, an empty variant list, a result id of the wrong type, and run_loadtest inside a running event loop."""

import asyncio
import copy

import pytest
import torch

from accelkit.core import Measurement, Recipe, UserError
from accelkit.models import get_preset
from accelkit.models.build import build_model
from accelkit.recipes import RecipeRefused, apply, refusal


@pytest.fixture(scope="module")
def llama():
    return build_model(get_preset("tiny-llama"), seed=0).eval()


def _params(model):
    return {k: v.clone() for k, v in model.state_dict().items()}


def _unchanged(model, before):
    after = model.state_dict()
    return set(after) == set(before) and all(torch.equal(before[k], v) for k, v in after.items())


# ---- devices -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("device", ["gpu", "tpu", "mps", "xpu", "cuda:x"])
def test_a_device_the_techniques_cannot_target_is_a_one_line_user_error(llama, device):
    model = copy.deepcopy(llama)
    before = _params(model)
    with pytest.raises(UserError, match=f"device '{device}' is not valid; use auto, cpu, cuda or cuda:N"):
        apply(model, Recipe(precision="bf16"), device=device)
    with pytest.raises(UserError, match=f"device '{device}' is not valid"):
        refusal(Recipe(), device)
    assert _unchanged(model, before)


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_without_a_gpu_says_so_instead_of_torchs_assertion(llama):
    with pytest.raises(UserError, match="torch sees no CUDA/ROCm device"):
        apply(copy.deepcopy(llama), Recipe(precision="bf16"), device="cuda")
    with pytest.raises(UserError, match="torch sees no CUDA/ROCm device"):
        refusal(Recipe(precision="bf16"), "cuda:0")


def test_auto_and_a_torch_device_are_taken(llama):
    assert refusal(Recipe(precision="bf16"), "auto") is None
    assert refusal(Recipe(precision="bf16"), torch.device("cpu")) is None  # type: ignore[arg-type]


def test_the_meta_device_stays_usable_for_counting_flops():
    # the bench builds the fp32 model on meta (no storage) and applies the plain recipe there to count FLOPs
    meta = build_model(get_preset("tiny-llama"), device="meta").eval()
    assert apply(meta, Recipe()) is meta
    assert "meta has no TF32" in (refusal(Recipe(precision="tf32"), "meta") or "")


# ---- what a recipe is ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(("name", "hint"), [("bf16", "Recipe(precision='bf16')"),
                                            ("int8-dynamic", "Recipe(quantization='int8-dynamic')"),
                                            ("fast", "e.g. Recipe(precision='bf16')")])
def test_a_name_instead_of_a_recipe_says_how_to_write_one(llama, name, hint):
    with pytest.raises(TypeError, match=f"recipe must be an accelkit.core.Recipe, not str '{name}'.*") as info:
        apply(copy.deepcopy(llama), name)  # type: ignore[arg-type]
    assert hint in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(TypeError, match="recipe must be an accelkit.core.Recipe"):
        refusal(name)  # type: ignore[arg-type]


@pytest.mark.parametrize("kv", ["fp8", "int8"])
def test_a_kv_cache_dtype_is_refused_not_dropped(llama, kv):
    model = copy.deepcopy(llama)
    before = _params(model)
    with pytest.raises(RecipeRefused, match=f"kv_cache_dtype='{kv}' is a serving setting.*EngineConfig"):
        apply(model, Recipe(precision="bf16", kv_cache_dtype=kv))
    assert "kv_cache_dtype" in (refusal(Recipe(kv_cache_dtype=kv), "cpu") or "")
    assert _unchanged(model, before)
    assert refusal(Recipe(kv_cache_dtype="auto"), "cpu") is None


def test_offload_is_refused_not_dropped(llama):
    model = copy.deepcopy(llama)
    before = _params(model)
    with pytest.raises(RecipeRefused, match=r"offload=True .* planning input \(accelkit plan --offload\)"):
        apply(model, Recipe(precision="bf16", offload=True))
    assert _unchanged(model, before)


# ---- bench ---------------------------------------------------------------------------------------------------
def _bench(variants):
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=2, min_time_s=0, max_iterations=2)
    workload = make_workload("bert", {"size": "tiny", "batch_size": 2, "seq_len": 16})
    return run_benchmark(workload, variants, BenchConfig(device="cpu", loop=loop, auto_probe=False, predict=False,
                                                         save=False))


def test_a_bench_run_leaves_the_callers_random_stream_as_it_was():
    from accelkit.bench.variants import matrix

    torch.manual_seed(1234)
    torch.rand(3)  # somewhere in the stream, not at its start
    state = torch.get_rng_state()
    expected = torch.rand(5)
    torch.set_rng_state(state)
    result = _bench(matrix(["fp32"]))
    assert [v.name for v in result.variants] == ["fp32"] and not result.failed
    assert torch.initial_seed() == 1234
    assert torch.equal(torch.rand(5), expected)


def test_no_variants_says_none_were_given():
    with pytest.raises(UserError, match="no variants were given for bert; pass at least one") as info:
        _bench([])
    assert "refused" not in str(info.value)


# ---- results store -------------------------------------------------------------------------------------------
def test_a_result_id_that_is_not_an_int_is_named():
    from accelkit.results import ResultStore

    m = Measurement(kind="bench", name="x", throughput=1.0, throughput_unit="items/s")
    with ResultStore() as store:
        rid = store.add(m)
        with pytest.raises(TypeError, match=r"result id must be an int, not str '1'; use store.get\(int\('1'\)\)"):
            store.get(str(rid))  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="result id must be an int, not float 1.0$"):
            store.get(1.0)  # type: ignore[arg-type]
        with pytest.raises(TypeError, match="result id must be an int, not bool True"):
            store.get(True)
        assert store.get(rid).result == m


# ---- load test -----------------------------------------------------------------------------------------------
def test_run_loadtest_works_inside_a_running_event_loop():
    from accelkit.loadtest import LoadTestConfig, run_loadtest
    from accelkit.loadtest.runner import run_loadtest_async
    from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig

    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.01, itl_s=0.001)) as server:
        config = LoadTestConfig(base_url=server.base_url, model="fake-model", num_prompts=4, random_input_len=8,
                                random_output_len=2, warmup=0)

        async def notebook_cell():  # what Jupyter does: the cell's code runs while a loop is running
            blocking = run_loadtest(config)
            awaited = await run_loadtest_async(config)
            return blocking, awaited

        blocking, awaited = asyncio.run(notebook_cell())
    for result in (blocking, awaited):
        assert result.kind == "loadtest" and result.details["passes"][0]["completed"] == 4
