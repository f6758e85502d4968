"""The layout search does each estimate once: a layout's memory once per context (the device-count search checked it
up to three times), the activations and the pipeline stage's time once for the ZeRO stages that share them, and the
step time only of the layouts that can be shown. Each shortcut keeps every figure as it was: the estimates read
from ``PlanContext.memo`` equal those of a context that has computed nothing yet."""

import dataclasses
import importlib
from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest

from accelkit.core import Cluster, Recipe, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import PlanOptions, make_context, search
from accelkit.plan.evaluate import evaluate, required_bytes, train_memory
from accelkit.plan.layout import Layout
from accelkit.plan.search import enumerate_layouts

# the modules by name: ``accelkit.plan.evaluate`` the attribute is the function the package exports
EVALUATE = importlib.import_module("accelkit.plan.evaluate")
TIME = importlib.import_module("accelkit.plan.time")
NO_CAL = PlanOptions(use_calibration=False)


def _train(model: str, seq: int = 4096, **recipe: Any) -> Workload:
    return Workload(model=get_preset(model), task="train", seq_len=seq, recipe=Recipe(precision="bf16", **recipe))


# (workload, device, devices, pinned layout fields, global batch, options): dense and MoE (ep), unfused attention
# (selective recompute), interleaved stages with the embedding and head as blocks, context parallelism, hybrid
# sharding, every-n-th-block recompute, PowerSGD and frozen weights
CASES = [
    (_train("llama-3.1-70b"), "h100", 64, {}, 1024, PlanOptions(use_calibration=False, attention="math")),
    (_train("mixtral-8x7b"), "mi300x", 32, {}, 256, NO_CAL),
    (_train("gpt3-175b", 2048), "h100", 64, {"vp": 2}, 512,
     PlanOptions(use_calibration=False, pp_embedding_as_layer=True)),
    (_train("llama-3.1-8b", 8192), "h100", 16, {"cp": 2}, 64, NO_CAL),
    (_train("llama-3.1-8b"), "a100", 16, {"shard_group": 2}, 128, NO_CAL),
    (_train("qwen3-30b-a3b"), "h200", 16, {"recompute": "full", "recompute_every": 3}, 128, NO_CAL),
    (_train("llama-3.1-8b", grad_compression="powersgd"), "l40s", 8, {}, 64, NO_CAL),
    (_train("llama-3.1-8b"), "rtx-4090", 8, {}, 64, PlanOptions(use_calibration=False, frozen_weights=True)),
]


@pytest.mark.parametrize("workload,device,n,fixed,global_batch,options", CASES,
                         ids=[f"{c[0].model.name}-{c[1]}-{c[2]}-{'-'.join(c[3]) or 'free'}" for c in CASES])
def test_estimates_kept_on_the_context_equal_fresh_ones(workload: Workload, device: str, n: int,
                                                        fixed: dict[str, Any], global_batch: int,
                                                        options: PlanOptions) -> None:
    ctx = make_context(workload, Cluster(device=get_device(device), num_devices=n), options)
    layouts = list(enumerate_layouts(ctx, n, fixed, global_batch))
    zero_only = workload.recipe.grad_compression == "powersgd" or options.frozen_weights  # ZeRO 0 alone
    assert zero_only or len({lay.zero for lay in layouts}) == 4  # ZeRO stages that share activations and stage time
    for layout in layouts:  # in the search's order: the first layout of a shape fills what the others read
        fresh = dataclasses.replace(ctx)  # the same context with nothing computed yet
        assert evaluate(ctx, layout) == evaluate(fresh, layout), layout
    assert ctx.memo  # the estimates were kept


def _spy(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[tuple[Any, ...]]:
    """Record the arguments of every call of ``module.name`` (the real function still runs)."""
    calls: list[tuple[Any, ...]] = []
    real: Callable[..., Any] = getattr(module, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, spy)
    return calls


def _repeated(keys: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    return [k for k, count in Counter(keys).items() if count > 1]


def _activation_shape(layout: Layout) -> Layout:
    """What a layout's activations depend on: not dp, ep, the ZeRO stage or the shard group."""
    return layout._replace(dp=0, ep=0, zero=0, shard_group=None)


@pytest.mark.parametrize("model,top", [("llama-3-70b", 1), ("llama-3-70b", None), ("mixtral-8x7b", 1)])
def test_device_count_search_estimates_each_memory_once(monkeypatch: pytest.MonkeyPatch, model: str,
                                                        top: int | None) -> None:
    # the calls keep their contexts alive: an id is not reused within the test
    states = _spy(monkeypatch, EVALUATE, "stage_param_split")  # once per memory estimate of a layout
    activations = _spy(monkeypatch, EVALUATE, "stage_blocks")  # once per activation estimate
    stages = _spy(monkeypatch, TIME, "_layer_s")  # once per pipeline-stage time estimate
    found = search(_train(model), Cluster(device=get_device("h100")), minimize_devices=True, top=top, options=NO_CAL)
    assert found[0].fits and len(states) > 100  # it searched several counts
    assert not _repeated([(id(ctx), layout) for ctx, layout in states])
    assert not _repeated([(id(ctx), _activation_shape(layout)) for ctx, layout, *_ in activations])
    assert stages and not _repeated([(id(ctx), layout._replace(zero=0, shard_group=None))
                                     for ctx, layout, *_ in stages])
    # a plan keeps its context (extra["context"]), not the thousands of estimates that served the search
    assert all(not c.extra["context"].memo for c in found)


def test_top_k_times_only_fitting_layouts_when_k_of_them_fit(monkeypatch: pytest.MonkeyPatch) -> None:
    workload, cluster = _train("llama-3-70b"), Cluster(device=get_device("h100"))
    everything = search(workload, cluster, minimize_devices=True, options=NO_CAL)
    fitting = sum(c.fits for c in everything)
    assert 3 <= fitting < len(everything)
    timed = _spy(monkeypatch, EVALUATE, "train_time")
    best = search(workload, cluster, minimize_devices=True, top=3, options=NO_CAL)
    assert len(timed) == fitting  # of the layouts on the count found, the fitting ones
    assert all(required_bytes(train_memory(ctx, layout)) <= ctx.device.memory_bytes for ctx, layout, _ in timed)
    # the same best three, figure for figure; fewer fitting than asked for: every layout, as before
    same = [(c.layout, c.memory, c.step_time_s, c.time_breakdown, c.mfu) for c in everything[:3]]
    assert [(c.layout, c.memory, c.step_time_s, c.time_breakdown, c.mfu) for c in best] == same
    assert len(search(workload, cluster, minimize_devices=True, top=fitting + 1, options=NO_CAL)) == fitting + 1


def test_layouts_one_search_never_puts_side_by_side_keep_their_own_estimates() -> None:
    # within one count of the search dp follows from tp·pp·cp, the micro-batch from the accumulation steps and
    # recompute_every from the recompute choice; a caller can still evaluate such layouts on one context
    ctx = make_context(_train("llama-3.1-70b"), Cluster(device=get_device("h100"), num_devices=64), NO_CAL)
    apart = Layout(dp=1, tp=2, pp=2, micro_batch=1, grad_accum=8, recompute="full")
    deep = apart._replace(pp=8)
    groups = [
        [apart._replace(dp=d) for d in (1, 4)],  # the pipeline's neighbours inside a node, then across nodes
        [deep._replace(micro_batch=b) for b in (1, 2)],
        [deep._replace(grad_accum=g) for g in (2, 4, 8)],  # micro-batches in flight: min(pp, grad_accum)
        [deep._replace(recompute_every=k) for k in (1, 2, 3)],
    ]
    for group in groups:
        got = [evaluate(ctx, layout) for layout in group]
        assert got == [evaluate(dataclasses.replace(ctx), layout) for layout in group]
        assert len({(c.memory["activations"], c.step_time_s) for c in got}) == len(group)  # each its own figures
