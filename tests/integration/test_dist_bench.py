"""2-process training benches on gloo (CPU), launched by torchrun through `accelkit bench`: DDP (ZeRO 0)
and FSDP2 (ZeRO 3); the FSDP2 run's per-rank parameter+gradient+optimizer bytes within 10% of the
planner's ZeRO-3 estimate for the same layout. One FSDP2 run of fp32 and bf16 (two launches) serves the tests of
its memory and of what each launch's recipe did."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import accelkit

FAST = ("--warmup", "2", "--warmup-time", "0", "--min-iterations", "4", "--min-time", "0.1")


def dist_bench(*args: str) -> dict:
    proc = accelkit("bench", *args, "--device", "cpu", "--nproc-per-node", "2", *FAST, "--json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout)


def _stored(result_id: int, db=None):
    from accelkit.results import ResultStore

    with ResultStore(db) as store:
        return store.get(result_id)


@pytest.fixture(scope="module")
def fsdp2_fp32_bf16(probe_db, tmp_path_factory):
    """One FSDP2 run of tiny-llama in fp32 and bf16 — a launch each — on a store that holds the shared probe: (its
    document, the store)."""
    import shutil

    home = tmp_path_factory.mktemp("fsdp2-home")
    shutil.copy(probe_db, home / "results.db")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACCELKIT_HOME", str(home))
        doc = dist_bench("llm-train", "--model", "tiny-llama", "--batch-size", "2", "--seq-len", "32", "--zero", "3",
                         "--precision", "fp32,bf16")
    return doc, home / "results.db"


def test_fsdp2_zero3_memory_matches_the_planner(fsdp2_fp32_bf16):
    doc, db = fsdp2_fp32_bf16
    assert doc["world_size"] == 2 and doc["zero"] == 3 and "FSDP2" in doc["layout"]
    assert [r["rank"] for r in doc["ranks"]] == [0, 1]
    entry = doc["variants"][0]
    assert entry["name"] == "fp32"
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
    stored = _stored(entry["result_id"], db).result
    assert stored.kind == "bench" and stored.num_devices == 2
    assert len(stored.details["ranks"]) == 2 and stored.workload.recipe.zero == 3 and stored.workload.recipe.dp == 2
    assert {"rank0_latency_s", "rank1_latency_s", "latency_s"} <= set(stored.samples)
    estimate = _stored(entry["predicted"]["estimate_id"], db).result
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


def _lines(stderr: str) -> list[str]:
    """stderr without bench's progress lines (on a pipe too since #29: "bench resnet: starting", "[ 5 s] …")."""
    return [line for line in stderr.strip().splitlines() if not re.match(r"(bench \S+: starting|\[ *\d)", line)]


def test_distributed_flags_are_checked_before_launch(_isolated_home):
    proc = accelkit("bench", "bert", "--size", "tiny", "--nproc-per-node", "2", "--device", "cpu", *FAST)
    assert proc.returncode == 2 and "applies to `bench llm-train`, `bench resnet`" in proc.stderr
    proc = accelkit("bench", "llm-train", "--model", "tiny-llama", "--nproc-per-node", "2", "--nnodes", "2:4")
    assert proc.returncode == 2 and "--nnodes '2:4' needs --rdzv-endpoint HOST:PORT" in proc.stderr
    assert "Traceback" not in proc.stderr
    proc = accelkit("bench", "resnet", "--size", "tiny", "--device", "cpu", "--nproc-per-node", "2", "--nnodes", "2",
                    "--node-rank", "0", "--rdzv-endpoint", "h:99999", *FAST)
    assert proc.returncode == 2 and "port 99999, out of range" in proc.stderr, proc.stderr[-2000:]  # not torchrun's
    assert "Traceback" not in proc.stderr and len(_lines(proc.stderr)) == 1
    # NCCL on a CPU failed on every rank after torchrun started (~9 s, a traceback from each): refused up front
    proc = accelkit("bench", "resnet", "--size", "tiny", "--device", "cpu", "--nproc-per-node", "2", "--backend", "nccl",
                    *FAST)
    assert proc.returncode == 2 and "--backend nccl needs CUDA GPUs" in proc.stderr and "--backend gloo" in proc.stderr
    assert "torchrun" not in proc.stderr and len(_lines(proc.stderr)) == 1, proc.stderr[-2000:]


# ---- rank 0's side, in-process: the store refuses a write ------------------------------------------------
def _rank(rank: int):
    """What one rank gathers to rank 0 for a variant (worker.bench_variant's record)."""
    from accelkit.bench.record import RankMeasurement

    return RankMeasurement(
        rank=rank, local_rank=rank, host="h", device="cpu", items=4, unit="images", analytic_flops_per_item=None,
        analytic_formula=None, load_s=0.1, first_call_s=0.2, flops_per_call=1e6, warmup_iterations=2, warmup_s=0.1,
        samples_s=[0.01, 0.011, 0.012], block_walls_s=[0.033], agreed_walls_s=[0.033], peak_scope="RSS",
        memory_bytes={"parameters": 10, "gradients": 10, "optimizer": 20, "model_states": 40, "peak": 100})


def test_rank0_keeps_what_the_store_refuses(_isolated_home, monkeypatch):
    """Rank 0 stored each variant with a bare store.add: a refused write (disk full, a lock held past its timeout)
    raised out of bench_document and the whole document — every rank's measurements — was lost. As in a
    single-process bench, the writing stops, the document keeps every variant (the stored ones with their
    result_id) and store_error says why; a store that cannot even be opened is the same."""
    from types import SimpleNamespace

    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.core import AccelkitError
    from accelkit.distributed.rank_results import BenchDocument, open_writer
    from accelkit.results import ResultStore

    def bench_document(ctx, workload, variants, job):  # rank 0's document, every variant stored as the worker does
        with open_writer(job) as writer:
            document = BenchDocument(ctx, workload, job, writer)
            for variant, ranks in variants:
                document.add(variant, ranks)
            return document.to_json()

    ctx = SimpleNamespace(rank=0, world_size=2, local_rank=0, local_world_size=2, num_nodes=1, device="cpu",
                          backend="gloo", host="h")
    workload = make_workload("resnet", {"size": "tiny", "batch_size": 4, "image_size": 32})
    variants = [(Variant(precision=p), [_rank(0), _rank(1)]) for p in ("fp32", "bf16")]
    job = {"save": True, "store_path": str(_isolated_home / "results.db"), "run_id": "r", "predict": False,
           "zero": 0, "peak": {"flops": 1e12, "source": "test"}, "datasheet": None, "probe": None,
           "bench_config": {}, "notes": [], "refused": []}
    add = ResultStore.add
    calls: list[int] = []

    def full_after_one(self, result, *, run_id=None):
        calls.append(1)
        if len(calls) > 1:
            raise AccelkitError("the results store is full (disk full)")
        return add(self, result, run_id=run_id)

    monkeypatch.setattr(ResultStore, "add", full_after_one)
    doc = bench_document(ctx, workload, variants, job)  # type: ignore[arg-type]
    assert [v["name"] for v in doc["variants"]] == ["fp32", "bf16"]
    assert all(v["throughput"]["value"] > 0 for v in doc["variants"])
    stored_id = doc["variants"][0]["result_id"]
    assert stored_id is not None and doc["variants"][1]["result_id"] is None and doc["result_ids"] == [stored_id]
    assert doc["store_error"] == "the results store is full (disk full)" and len(calls) == 2  # no later write

    (_isolated_home / "dir.db").mkdir()  # not a store: it cannot be opened
    doc = bench_document(ctx, workload, variants, {**job, "store_path": str(_isolated_home / "dir.db")})  # type: ignore[arg-type]
    assert [v["result_id"] for v in doc["variants"]] == [None, None] and "dir.db" in doc["store_error"]


def test_a_distributed_cpu_run_says_what_each_recipe_did_and_scores_each_rank_on_its_share(fsdp2_fp32_bf16):
    """train_parts dropped recipes.apply's notes, and the merge of launches kept a later launch's warnings only:
    bf16 (the second launch: one per precision) said nothing of what its recipe did. And on a CPU, each rank was
    scored (MFU) and planned as the whole CPU, though it runs on its share of the cores."""
    doc, db = fsdp2_fp32_bf16
    entries = {e["name"]: e for e in doc["variants"]}
    assert list(entries) == ["fp32", "bf16"]
    assert entries["fp32"]["recipe_notes"] == [] and entries["bf16"]["recipe_notes"] == ["autocast bf16"]
    assert "bf16: autocast bf16" in doc["notes"]
    assert len(doc["notes"]) == len(set(doc["notes"]))  # each launch's copy of the run's notes, once
    assert _stored(entries["bf16"]["result_id"], db).result.details["recipe_notes"] == ["autocast bf16"]
    # two ranks on one CPU each run on half its cores: MFU and the planner take half its peak, not all of it
    mfu = entries["fp32"]["mfu"]
    assert mfu["peak_source"].endswith("÷ 2 ranks sharing it") and mfu["probe"]["source"] == mfu["peak_source"]
    assert mfu["value"] == pytest.approx(entries["fp32"]["throughput"]["per_device"] * mfu["flops_per_item"]
                                         / mfu["peak_flops"])
    estimate = _stored(entries["fp32"]["predicted"]["estimate_id"], db).result
    assert estimate.hardware.endswith("÷ 2 ranks") and estimate.num_devices == 2
