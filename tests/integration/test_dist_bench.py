"""2-process training benches on gloo (CPU), launched by torchrun through `accelkit bench`: DDP (ZeRO 0)
and FSDP2 (ZeRO 3); the FSDP2 run's per-rank parameter+gradient+optimizer bytes within 10% of the
planner's ZeRO-3 estimate for the same layout."""

from __future__ import annotations

import json

from tests.conftest import accelkit

FAST = ("--warmup", "2", "--warmup-time", "0", "--min-iterations", "4", "--min-time", "0.1")


def dist_bench(*args: str) -> dict:
    proc = accelkit("bench", *args, "--device", "cpu", "--nproc-per-node", "2", *FAST, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _stored(result_id: int):
    from accelkit.results import ResultStore

    with ResultStore() as store:
        return store.get(result_id)


def test_fsdp2_zero3_memory_matches_the_planner(probed):
    doc = dist_bench("llm-train", "--model", "tiny-llama", "--batch-size", "2", "--seq-len", "32", "--zero", "3")
    assert doc["world_size"] == 2 and doc["zero"] == 3 and "FSDP2" in doc["layout"]
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    (entry,) = doc["variants"]
    assert entry["world_size"] == 2 and entry["backend"] == "gloo"
    assert entry["throughput"]["value"] > 0 and entry["latency_s"]["n"] >= 4
    check = entry["memory_check"]
    assert check["predicted"] is not None, entry["predicted_reason"]
    for ratio in check["ratio_per_rank"]:
        assert abs(ratio - 1) <= 0.10, check
    assert check["within_tolerance"] is True
    for rank in entry["ranks"]:
        mem = rank["memory_bytes"]
        assert mem["parameters"] + mem["gradients"] + mem["optimizer"] == mem["model_states"]
        assert mem["peak"] > mem["model_states"]  # peak RSS reported separately (whole process)
    # one Measurement for the whole run, with per-rank detail, beside the planner's estimate
    stored = _stored(entry["result_id"]).result
    assert stored.kind == "bench" and stored.num_devices == 2
    assert len(stored.details["ranks"]) == 2 and stored.workload.recipe.zero == 3 and stored.workload.recipe.dp == 2
    assert {"rank0_latency_s", "rank1_latency_s", "latency_s"} <= set(stored.samples)
    estimate = _stored(entry["predicted"]["estimate_id"]).result
    assert estimate.kind == "plan" and estimate.details["layout"]["zero"] == 3 and estimate.details["layout"]["dp"] == 2


def test_ddp_resnet_two_ranks(probed):
    doc = dist_bench("resnet", "--size", "tiny", "--batch-size", "4", "--image-size", "32", "--zero", "0")
    (entry,) = doc["variants"]
    assert doc["world_size"] == 2 and "DDP" in entry["layout"]
    assert entry["throughput"]["unit"] == "images/s" and entry["throughput"]["value"] > 0
    # DDP replicates every state: both ranks hold the same full model states
    states = [r["memory_bytes"]["model_states"] for r in entry["ranks"]]
    assert states[0] == states[1] > 0
    assert _stored(entry["result_id"]).result.details["layout"].startswith("dp2 zero0")


def test_distributed_flags_are_checked_before_launch(_isolated_home):
    proc = accelkit("bench", "bert", "--size", "tiny", "--nproc-per-node", "2", "--device", "cpu", *FAST)
    assert proc.returncode == 2 and "applies to `bench llm-train`, `bench resnet`" in proc.stderr
    proc = accelkit("bench", "llm-train", "--model", "tiny-llama", "--nproc-per-node", "2", "--nnodes", "2:4")
    assert proc.returncode == 2 and "rdzv_endpoint" in proc.stderr
    assert "Traceback" not in proc.stderr
