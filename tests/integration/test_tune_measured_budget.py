"""`tune --memory-budget` holds a recipe the planner has no estimate for to its measured peak: a custom model
(the planner models none) was "measured instead of pruned" and then won at 27–175 MB measured against a 1 MiB
budget. And a recipe that misses the accuracy gate says by which figure and threshold."""

from __future__ import annotations

import json
import re

from accelkit.bench.workloads import make_workload
from accelkit.tune import tune
from accelkit.tune.search import QUICK_LOOP, TuneConfig

MLP = """import torch
def make():
    torch.manual_seed(0)
    # one 64 MiB weight: past glibc's largest mmap threshold (32 MiB), so loading it always grows the RSS (small
    # tensors can come from heap that earlier tests in the process freed, and add nothing to it)
    model = torch.nn.Sequential(torch.nn.Linear(4096, 4096))
    return model, (torch.randn(4, 4096),)
"""
BUDGET = 2**20  # 1 MiB: under what loading the fp32 model alone adds


def _module(tmp_path, monkeypatch, name: str) -> str:
    (tmp_path / f"{name}.py").write_text(MLP)
    monkeypatch.syspath_prepend(str(tmp_path))
    return f"{name}:make"


def test_a_measured_peak_over_the_budget_is_not_ranked(tmp_path, monkeypatch):
    workload = make_workload("custom", {"module": _module(tmp_path, monkeypatch, "tune_budget_mlp")})
    result = tune(workload, TuneConfig(max_trials=2, compile=False, device="cpu", memory_budget_bytes=BUDGET,
                                       loop=QUICK_LOOP.replace(warmup_time_s=0.1, min_time_s=0.1)))
    doc = result.to_json()
    measured = {t["name"]: t for t in doc["trials"] if t["memory_bytes"] is not None}
    assert set(measured) == {"fp32", "bf16"}
    assert all(t["memory_basis"] == "measured peak" for t in measured.values())  # the planner models no custom model
    assert measured["fp32"]["memory_bytes"] > BUDGET  # the test's premise: the fp32 load alone is over it
    for t in measured.values():
        if t["memory_bytes"] > BUDGET:
            assert t["status"] == "over-budget" and not t["pareto"], t
            assert t["reason"].startswith("measured peak ") and "MiB > budget 1.0 MiB" in t["reason"]
        else:
            assert t["status"] == "measured"
    assert doc["winner"] is None or doc["winner"]["memory_bytes"] <= BUDGET
    assert any("no memory estimate for fp32, bf16" in note and "measured peak" in note for note in result.notes)


def test_cli_says_no_recipe_within_the_budget(tmp_path, monkeypatch, cli):
    target = _module(tmp_path, monkeypatch, "tune_budget_cli_mlp")  # importable: on sys.path (in-process run_cli)
    proc = cli("tune", "--module", target, "--max-trials", "1", "--no-compile", "--device", "cpu",
               "--memory-budget", "1KiB", "--warmup-time", "0.1", "--min-time", "0.1", "--no-save", env={"COLUMNS": "250"})
    assert proc.returncode == 0, proc.stderr
    assert "over-budget" in proc.stdout and "measured peak" in proc.stdout
    assert "No recipe within --memory-budget passed the accuracy gate" in proc.stdout


def test_a_failed_gate_says_its_figure_and_threshold(cli):
    """bf16 against fp32 at --max-accuracy-drop 0: its cosine is just under 1, shown as 'cosine 1.0000 … fail'
    with an empty why column before."""
    proc = cli("tune", "bert", "--size", "tiny", "--batch-size", "2", "--seq-len", "16", "--max-trials", "2",
               "--no-compile", "--device", "cpu", "--max-accuracy-drop", "0", "--warmup-time", "0.1", "--min-time", "0.1", "--no-save",
               "--json")
    assert proc.returncode == 0, proc.stderr
    bf16 = next(t for t in json.loads(proc.stdout)["trials"] if t["name"] == "bf16")
    assert bf16["status"] == "measured" and not bf16["passed"]
    assert re.fullmatch(r"accuracy gate: cosine 0\.9+\d* < 1 \(1 − --max-accuracy-drop 0\)", bf16["reason"]), bf16
