"""Hybrid sharding (issue 32: PyTorch HSDP, DeepSpeed MiCS): ZeRO shards the model states over a group of G of the dp
ranks and replicates them over the dp/G groups; each gradient reduction is a reduce-scatter inside the group and an
all-reduce of the shard across the groups."""

import json

import pytest

from accelkit.core import Cluster, Recipe, UserError, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import Layout, PlanOptions, plan, search
from accelkit.plan.context import gradient_element_bytes, make_context
from accelkit.plan.priors import COLLECTIVE_LATENCY_S
from accelkit.plan.stages import stage_params
from tests.conftest import main_in_process

H100 = get_device("h100")
OPTS = PlanOptions(use_calibration=False, kernels="eager", attention="flash", dropout=False)
GBPS = 100.0  # a slow scale-out network, where the groups' placement shows
CLUSTER = Cluster(device=H100, num_devices=16, devices_per_node=8, scaleout_bandwidth_bytes_per_s=GBPS / 8 * 1e9)


def _workload(model: str = "llama-3.1-8b") -> Workload:
    return Workload(model=get_preset(model), task="train", seq_len=4096, recipe=Recipe(precision="bf16"))


def _layout(zero: int = 3, group: int | None = None) -> Layout:
    return Layout(dp=16, tp=1, pp=1, zero=zero, micro_batch=1, grad_accum=4, recompute="full", shard_group=group)


def _plan(zero: int = 3, group: int | None = None) -> dict:
    return plan(_workload(), CLUSTER, OPTS, layout=_layout(zero, group)).details


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_a_group_of_all_dp_ranks_is_plain_zero(zero):
    plain, whole = _plan(zero), _plan(zero, 16)
    assert whole["layout"]["shard_group"] == plain["layout"]["shard_group"] == 16
    assert whole == plain


@pytest.mark.parametrize("zero, sharded", [(1, ("optimizer",)), (2, ("gradients", "optimizer")),
                                           (3, ("weights", "gradients", "optimizer"))])
@pytest.mark.parametrize("group", [8, 4, 2])
def test_memory_divides_the_sharded_states_by_the_group_not_dp(zero, sharded, group):
    plain, hybrid = (_plan(zero, g)["memory_per_device_bytes"] for g in (None, group))
    ctx = make_context(_workload(), CLUSTER, OPTS)
    params = stage_params(ctx, _layout())
    per_param = {"weights": 2, "gradients": 2, "optimizer": 12}  # bf16 weights and gradients; Adam fp32 m, v, master
    for key, bytes_per_param in per_param.items():
        expected = bytes_per_param * params / (group if key in sharded else 1)
        assert hybrid[key] == pytest.approx(expected, rel=1e-9), key
        assert hybrid[key] == pytest.approx(plain[key] * (16 / group if key in sharded else 1), rel=1e-9), key
    assert hybrid["activations"] == plain["activations"]


def test_reductions_run_inside_the_node_then_across_nodes_by_hand():
    doc = _plan(3, 8)
    red = doc["grad_reduction"]
    ctx = make_context(_workload(), CLUSTER, OPTS)
    eff = ctx.efficiency
    buffer = stage_params(ctx, _layout()) * gradient_element_bytes(ctx)
    per_step = 4  # ZeRO 3 reduces after every micro-batch
    assert (red["group_size"], red["replicas"], red["reductions_per_step"]) == (8, 2, per_step)
    # the shard group: 8 ranks of one node over NVLink, a ring reduce-scatter of the whole buffer
    nvlink = H100.scaleup_group_bandwidth(8) * eff.comm
    assert red["collective_s"] == pytest.approx(per_step * (7 / 8 * buffer / nvlink + COLLECTIVE_LATENCY_S), rel=1e-9)
    # across the 2 groups: one rank per node, the 1/8 shard all-reduced over the NICs (two stages, two latencies each)
    nic = GBPS / 8 * 1e9 * eff.scaleout
    shard = buffer / 8
    assert red["replica_all_reduce_s"] == pytest.approx(
        per_step * 2 * (1 / 2 * shard / nic + 2 * COLLECTIVE_LATENCY_S), rel=1e-9)
    # plain ZeRO-3 reduce-scatters the whole buffer over both nodes, two-level: the NICs carry 1/8 of it each
    plain = _plan(3)["grad_reduction"]
    assert "replicas" not in plain and plain["group_size"] == 16
    assert plain["collective_s"] == pytest.approx(
        per_step * (max(7 / 8 * buffer / nvlink, 1 / 2 * buffer / (8 * nic)) + 2 * COLLECTIVE_LATENCY_S), rel=1e-9)


def test_the_cross_group_all_reduce_is_in_the_step():
    # the same layout with a faster network only shortens the cross-node all-reduce: the step follows it
    slow = plan(_workload(), CLUSTER, OPTS, layout=_layout(2, 8)).details
    fast_cluster = Cluster(device=H100, num_devices=16, devices_per_node=8, scaleout_bandwidth_bytes_per_s=400e9 / 8)
    fast = plan(_workload(), fast_cluster, OPTS, layout=_layout(2, 8)).details
    assert fast["grad_reduction"]["collective_s"] == pytest.approx(slow["grad_reduction"]["collective_s"])
    assert fast["grad_reduction"]["replica_all_reduce_s"] < slow["grad_reduction"]["replica_all_reduce_s"]
    assert fast["time_breakdown_s"]["communication"] < slow["time_breakdown_s"]["communication"]


def test_assumption_says_where_each_collective_runs():
    doc = _plan(3, 8)
    assert any("ZeRO-3 states sharded over 8 ranks (inside a node) and replicated over 2 groups" in a
               and "across the groups (across nodes)" in a for a in doc["assumptions"])
    assert not any("hybrid sharding" in a for a in _plan(3)["assumptions"])


def test_search_keeps_the_group_and_shards_only():
    found = search(_workload(), CLUSTER, options=OPTS, fixed={"shard_group": 4}, global_batch=64)
    assert found
    assert all(c.layout.dp % 4 == 0 and c.layout.shard_group == 4 for c in found)
    assert all(c.layout.zero >= 1 for c in found if c.layout.dp > 4)


@pytest.mark.parametrize("fixed, msg", [
    ({"dp": 16, "shard_group": 3}, "--shard-group 3 does not divide --dp 16"),
    ({"dp": 16, "shard_group": 8, "zero": 0}, "--shard-group 8 shards ZeRO's model states and needs --zero 1, 2 or 3"),
    ({"dp": 16, "shard_group": 1, "zero": 3}, "--shard-group 1 shards the model states over one rank"),
])
def test_refused_in_one_line(fixed, msg):
    with pytest.raises(UserError, match="^--shard-group") as err:
        search(_workload(), CLUSTER, options=OPTS, fixed=fixed, global_batch=64)
    assert msg in str(err.value)


def test_refused_with_expert_parallelism():
    with pytest.raises(UserError, match="--shard-group 2 with --ep 2 is not modelled"):
        plan(_workload("mixtral-8x7b"), CLUSTER, OPTS,
             layout=Layout(dp=4, tp=4, pp=1, ep=2, zero=3, micro_batch=1, grad_accum=1, shard_group=2))


def _cli(capsys, *args: str) -> tuple[int, str, str]:
    return main_in_process(capsys, "plan", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "16", *args)


def test_cli_flag(capsys):
    flags = ("--dp", "16", "--tp", "1", "--pp", "1", "--zero", "3", "--shard-group", "8", "--global-batch", "64",
             "--no-use-calibration")
    code, out, err = _cli(capsys, *flags, "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["layout"]["shard_group"] == 8 and doc["grad_reduction"]["replicas"] == 2
    code, out, err = _cli(capsys, *flags)
    assert code == 0, err
    assert "shard8" in out


@pytest.mark.parametrize("args, msg", [
    (("--dp", "16", "--tp", "1", "--pp", "1", "--shard-group", "5"), "--shard-group 5 does not divide --dp 16"),
    (("--task", "infer", "--shard-group", "2"), "--shard-group 2 applies to --task train"),
])
def test_cli_refuses(capsys, args, msg):
    code, _out, err = _cli(capsys, *args)
    assert code == 2 and msg in err
