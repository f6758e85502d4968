"""A bench (or tune) run whose store refuses its writes printed the run's document "rather than lost" — but that
document held each variant's statistics, not the rows the store would have kept: the raw samples were gone, and
`accelkit results import` could not take it. The writer now keeps what it could not store, as exported records,
under ``unstored_results``; the printed document imports as it is, raw samples included."""

from __future__ import annotations

import json
import sqlite3

import pytest

from accelkit.core import Measurement, Recipe
from accelkit.results import ResultStore
from accelkit.results.importing import read_export, unstored_in
from accelkit.tune.search import Trial, TuneResult
from tests.conftest import main_in_process

torch = pytest.importorskip("torch")
nn = torch.nn


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4)), torch.randn(2, 8)


@pytest.fixture
def locked_store(tmp_path):
    """A real store that another connection holds locked: every write waits its 0.2 s out and is refused."""
    path = tmp_path / "results.db"
    store = ResultStore(path, timeout_s=0.2)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    yield path, store
    store.close()
    holder.rollback()
    holder.close()


def test_a_refused_bench_run_keeps_its_rows_and_they_import(capsys, locked_store, _isolated_home, tmp_path):
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import Matrix
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    _, store = locked_store
    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=3, min_time_s=0)
    config = BenchConfig(device="cpu", loop=loop, predict=False, auto_probe=False, accuracy=False)
    run = run_benchmark(make_workload("custom", {"module": f"{__name__}:mlp"}),
                        Matrix(precisions=("fp32", "bf16")).variants(), config, store=store)
    doc = json.loads(json.dumps(run.to_json()))
    assert doc["store_error"] and all(v["result_id"] is None for v in doc["variants"])
    records = doc["unstored_results"]
    assert [(r["type"], r["name"].split(" · ")[1]) for r in records] == [("measurement", "fp32"), ("measurement", "bf16")]
    assert all(len(r["samples"]["latency_s"]) >= 3 and r["run_id"] == doc["run_id"] for r in records)
    assert unstored_in(doc) == records and len(read_export(json.dumps(doc), "doc")) == 2

    saved = tmp_path / "printed.json"  # what stdout held; imported once the store takes writes again
    saved.write_text(json.dumps({"suite": "s", "runs": [doc]}))  # (a suite's document nests them in its runs)
    home = _isolated_home / "results.db"
    code, _, err = main_in_process(capsys, "results", "import", str(saved))
    assert code == 0, err
    with ResultStore(home, readonly=True) as kept:
        rows = kept.query()
    assert sorted(r.result.name for r in rows) == sorted(r["name"] for r in records)
    assert all(isinstance(r.result, Measurement) and r.result.samples["latency_s"] for r in rows)
    assert {r.run_id for r in rows} == {doc["run_id"]}


def test_a_tune_summary_after_a_refused_write_is_kept_not_dropped(tmp_path):
    result = TuneResult(workload="w", objective="speed", device="cpu", trials=[Trial("fp32", Recipe())], winner=None,
                        snippet=None, run_id="r1", store_error="locked")
    from accelkit.bench.record import StoreWriter

    with ResultStore(tmp_path / "results.db") as store:
        result.store_summary(StoreWriter(store), name="tune w (speed)", hardware="cpu", details={}, run_id="r1")
        assert store.count() == 0  # no write is tried after the refused one
    doc = result.to_json()
    [summary] = doc["unstored_results"]
    assert summary["type"] == "measurement" and summary["kind"] == "tune" and summary["run_id"] == "r1"
    assert "unstored_results" not in summary["details"]  # (the summary does not hold itself)
    assert [r.name for _, _, r in read_export(json.dumps(doc), "doc")] == ["tune w (speed)"]
