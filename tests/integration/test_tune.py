"""`accelkit tune` end to end on a tiny BERT: every candidate ends in a status, refusals say why, the
winner passes the gate and is the fastest passing recipe (by the paired ratios the bench's verdict reads)."""

import json
import re


def test_tune_bert_tiny(cli):
    proc = cli("tune", "bert", "--size", "tiny", "--seq-len", "64", "--no-compile", "--max-trials", "5", "--json",
               # (the warm-up's default 3 calls are enough for its phase line; measuring: 5 recipes × 0.6 s, so that
               # a round line after the first, thinned to one every 2 s, counts all 5 recipes)
               "--warmup-time", "0", "--min-time", "0.6",
               "--progress", check=True)
    data = json.loads(proc.stdout)  # stdout: the document only; progress went to stderr (issue #18 item 6)
    for step in ("tune bert: no stored probe of this CPU", "tune bert: checking which of", "tune bert: estimating",
                 "tune bert: measuring 5 recipes", "tune bert: fp32: load", "tune bert: fp32 · forward: warm-up",
                 "tune bert: gating accuracy", "finished fp32: stored as result"):
        assert step in proc.stderr, (step, proc.stderr)
    # the measuring rounds (thinned to a line every 2 s, so which recipe shows depends on the machine's speed)
    assert re.search(r"tune bert: measuring \S+ · forward: \d+ it, [\d.]+ s \(\d/5 recipes", proc.stderr), proc.stderr
    trials = {t["name"]: t for t in data["trials"]}
    assert trials["fp32"]["status"] == "measured" and trials["fp32"]["passed"]
    assert trials["fp8-dynamic"]["status"] == "refused" and "FP8 tensor cores" in trials["fp8-dynamic"]["reason"]
    assert trials["tf32"]["status"] == "refused"
    measured = [t for t in data["trials"] if t["status"] == "measured"]
    assert len(measured) == 5 and all(t["throughput"] > 0 for t in measured)
    assert [t for t in data["trials"] if t["status"] == "skipped"]  # beyond --max-trials
    winner = data["winner"]
    assert winner["passed"]
    # the fastest passing recipe by the bench's paired ratios against fp32 (every trial ran interleaved), as the
    # note says — not by total throughput, which a few slow blocks can swing
    passing = [t for t in measured if t["passed"]]
    assert winner["vs_baseline"]["ratio"] == max(t["vs_baseline"]["ratio"] for t in passing)
    assert any(n.startswith("speed ranked by the median of paired blocks against fp32") for n in data["notes"])
    assert "from accelkit.recipes import apply" in data["snippet"] and data["result_id"] is not None
    assert data["pareto"]
    # the star stands only where the table backs it (issue 29 item 9): a firm winner is on the front; otherwise the
    # document says why not
    assert winner["name"] in data["pareto"] if data["winner_firm"] else data["winner_unsupported"]
    stored = json.loads(cli("results", "show", str(data["result_id"]), "--json", check=True).stdout)
    assert stored["kind"] == "tune" and stored["details"]["winner"]["name"] == winner["name"]


def test_tune_memory_budget_prunes_with_the_planner(cli, probed):
    # the planner models this CPU from its probe: the suite's shared quick probe (`probed`), not one more of its own
    proc = cli("tune", "bert", "--size", "tiny", "--seq-len", "64", "--no-compile", "--max-trials", "3",
               "--memory-budget", "1KiB", "--warmup-time", "0.1", "--min-time", "0.1", "--json")
    assert proc.returncode == 2 and "--memory-budget prunes the fp32 baseline" in proc.stderr  # even fp32 is over 1 KiB
    proc = cli("tune", "bert", "--size", "tiny", "--seq-len", "64", "--no-compile", "--max-trials", "2",
               "--memory-budget", "4GiB", "--warmup-time", "0.1", "--min-time", "0.1", "--json", check=True)
    trials = json.loads(proc.stdout)["trials"]
    assert all(t["estimated_bytes"] and t["estimated_bytes"] < 4 * 2**30 for t in trials if t["status"] == "measured")


def test_tune_bad_objective(cli):
    proc = cli("tune", "bert", "--size", "tiny", "--objective", "speed")
    assert proc.returncode == 2 and "objective" in proc.stderr


def test_a_tune_trial_is_stored_and_scored_at_its_recipes_precision(probed):
    """tune's trials are Variant(explicit_recipe=…): the stored precision and the MFU peak are the recipe's
    (bf16: the probe's bf16 matmul peak), not the fp32 default of the variant's own precision field."""
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.core import Recipe
    from accelkit.results import ResultStore
    from accelkit.timing import LoopConfig

    workload = make_workload("bert", {"size": "tiny", "batch_size": 2, "seq_len": 16})
    variants = [Variant(precision="bf16"), Variant(explicit_recipe=Recipe(precision="bf16"), label="bf16 (tune)")]
    loop = LoopConfig(warmup_iterations=1, warmup_time_s=0, min_iterations=3, min_time_s=0)
    with ResultStore() as store:
        run = run_benchmark(workload, variants, BenchConfig(device="cpu", loop=loop, predict=False, auto_probe=False),
                            store=store)
        stored = [r.result.details["precision"] for r in store.query(kind="bench")]
    bench, tuned = run.variants
    assert tuned.precision == bench.precision == "bf16" and stored == ["bf16", "bf16"]
    assert tuned.mfu.peak_source == bench.mfu.peak_source and "bf16 matmul" in tuned.mfu.peak_source
