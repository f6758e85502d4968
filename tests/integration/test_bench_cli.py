"""`accelkit bench` end to end in a subprocess, on tiny models, with short loops: the acceptance commands
(bert, resnet, llm, llm-train, custom), refusals, the data loader and usage errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import accelkit

FAST = ("--warmup", "2", "--warmup-time", "0", "--min-iterations", "5", "--min-time", "0.2")
#: the loops of this file's in-process runs, which check each command's document, table, store rows and refusals,
#: not its figures: the fewest iterations that still run every phase (a warm-up call, three measured — the paired
#: blocks a comparison needs — and no minimum time). FAST (imported by other test files) stays as it was.
SHORT = ("--warmup", "1", "--warmup-time", "0", "--min-iterations", "3", "--min-time", "0")


def bench_json(*args: str) -> dict:
    proc = accelkit("bench", *args, *SHORT, "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def stored_bench(home: Path) -> list:
    from accelkit.results import ResultStore

    with ResultStore(home / "results.db") as store:
        return store.query(kind="bench")


def test_bert_precision_matrix_json(probed):
    doc = bench_json("bert", "--size", "tiny", "--precision", "fp32,bf16", "--seq-len", "64", "--batch-size", "2")
    assert doc["workload"] == "bert" and doc["config"]["size"] == "tiny"
    assert [v["name"] for v in doc["variants"]] == ["fp32", "bf16"]
    for v in doc["variants"]:
        assert set(v["phases"]) >= {"load_s", "first_call_s", "warmup_iterations"}
        assert set(v["latency_s"]) >= {"median", "p50", "p90", "p95", "p99", "mean", "stdev", "cv", "n"}
        assert v["throughput"]["unit"] == "samples/s" and v["throughput"]["value"] > 0
        assert set(v["mfu"]) >= {"value", "peak_flops", "peak_source", "flops_per_item", "flops_source"}
        assert v["mfu"]["peak_source"].startswith("measured: `accelkit hw probe`") and v["mfu"]["value"] > 0
        assert "peak" in v["memory_bytes"]
        assert v["energy_j_per_item"] is None or v["energy_j_per_item"] > 0
        if v["energy_j_per_item"] is None:
            assert v["energy"]["reason"]  # null always comes with the reason
        assert "predicted" in v
    bf16 = doc["variants"][1]
    assert bf16["comparison"]["baseline"] == "fp32" and bf16["comparison"]["pairs"] >= 1
    assert 0.9 < bf16["accuracy"]["cosine"] <= 1.0 + 1e-6 and bf16["accuracy"]["sqnr_db"] > 10
    assert doc["environment"]["torch_threads"] >= 1 and doc["environment"]["timer"] == "perf_counter_ns"
    rows = stored_bench(probed)
    assert sorted(r.id for r in rows) == sorted(v["result_id"] for v in doc["variants"])
    assert set(doc["result_ids"]) >= {r.id for r in rows}
    assert len(rows[0].result.samples["latency_s"]) == rows[0].result.latency_s.n


def test_resnet_tiny_training_prints_table_and_mfu(probed):
    proc = accelkit("bench", "resnet", "--size", "tiny", "--batch-size", "4", *SHORT)
    assert proc.returncode == 0, proc.stderr
    assert "resnet tiny-resnet train" in proc.stdout and "images/s" in proc.stdout
    assert "MFU peak (fp32): measured: `accelkit hw probe`" in proc.stdout
    assert len(stored_bench(probed)) == 1


def test_llm_prefill_and_decode(probed):
    doc = bench_json("llm", "--model", "tiny-llama", "--prompt-len", "64", "--output-len", "32")
    steps = {v["step"]: v for v in doc["variants"]}
    assert set(steps) == {"prefill", "decode"}
    assert steps["prefill"]["latency_name"] == "TTFT" and steps["decode"]["latency_name"] == "per-token latency"
    assert steps["decode"]["throughput"]["unit"] == "tokens/s"
    # decode tokens/s ≈ batch / per-token latency; prefill processes 64 tokens per call
    assert steps["prefill"]["mfu"]["flops_per_item"] > 0 and steps["decode"]["mfu"]["value"] > 0
    assert len(stored_bench(probed)) == 2


def test_llm_train_mfu_matches_palm_formula(probed):
    doc = bench_json("llm-train", "--model", "tiny-llama", "--seq-len", "64", "--batch-size", "2")
    mfu = doc["variants"][0]["mfu"]
    assert mfu["value"] > 0 and "PaLM" in mfu["analytic_formula"]
    assert mfu["flops_per_item"] == pytest.approx(mfu["analytic_flops_per_item"], rel=0.05)


def make_mlp():
    """A custom factory: (model, example_inputs) → inference."""
    import torch

    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8)), torch.randn(16, 32)


def make_mlp_train():
    """(model, inputs, loss_fn) → a training step."""
    model, x = make_mlp()
    return {"model": model, "inputs": x, "loss_fn": lambda out: out.square().mean()}


@pytest.mark.parametrize(("factory", "step"), [("make_mlp", "forward"), ("make_mlp_train", "train step")])
def test_custom_module(probed, factory, step):
    doc = bench_json("custom", "--module", f"tests.integration.test_bench_cli:{factory}", "--precision", "fp32,bf16")
    assert [v["step"] for v in doc["variants"]] == [step, step]
    assert doc["variants"][0]["throughput"]["value"] > 0 and doc["variants"][0]["mfu"]["value"] > 0
    assert doc["variants"][1]["accuracy"]["sqnr_db"] > 10


def test_unrunnable_variant_is_refused_with_one_line_and_never_substituted(probed):
    proc = accelkit("bench", "bert", "--size", "tiny", "--seq-len", "32", "--precision", "fp32,fp8", *SHORT, "--json")
    assert proc.returncode == 0, proc.stderr
    refused = [line for line in proc.stderr.splitlines() if line.startswith("refused")]
    assert refused == ["refused fp8: fp8 matmuls need an NVIDIA SM89+ or AMD MI300-class GPU; this is a CPU"]
    doc = json.loads(proc.stdout)
    assert [v["name"] for v in doc["variants"]] == ["fp32"] and doc["refused"][0]["name"] == "fp8"


def test_all_refused_is_a_usage_error(probed):
    proc = accelkit("bench", "bert", "--size", "tiny", "--precision", "tf32,fp8", *SHORT)
    assert proc.returncode == 2
    assert "nothing to run" in proc.stderr and "a CPU has no tf32" in proc.stderr and "Traceback" not in proc.stderr


def test_dataloader_throughput_and_input_bound(probed):
    doc = bench_json("dataloader", "--image-size", "32", "--batch-size", "8", "--num-workers", "0,1",
                     "--step-time", "0.5")
    assert [v["name"] for v in doc["variants"]] == ["workers=0 pin=off", "workers=1 pin=off prefetch=2"]
    for v in doc["variants"]:
        assert v["throughput"]["unit"] == "samples/s" and v["input_bound"]["verdict"]
        assert v["mfu"]["value"] is None and "not applicable" in v["mfu"]["peak_source"]
    assert any("one after another" in n for n in doc["notes"])


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("bench", "bert", "--prompt-len", "5"), "--prompt-len does not apply to `bench bert`; it applies to `bench llm`"),
        (("bench", "bertt"), "did you mean bert"),
        # click reads '-xyz' as options -x -y -z: the word is named, not only '-x' (a fuzz case found it)
        (("bench", "suite", "-èxyz"), "no such option: -è (read from '-èxyz': a value that starts with '-' goes after"),
        (("bench",), "give a workload"),
        (("bench", "bert", "--precision", "fp64"), "--precision 'fp64' is not valid"),
        (("bench", "custom"), "needs --module"),
        (("bench", "custom", "--module", "nosuchmod:f"), "cannot import 'nosuchmod'"),
        (("bench", "llm", "--model", "llama-3.1-405b"), "needs"),
    ],
)
def test_usage_errors_are_one_line_exit_2(args, needle):
    proc = accelkit(*args)
    assert proc.returncode == 2, proc.stderr
    assert needle in proc.stderr and "Traceback" not in proc.stderr
    assert len([line for line in proc.stderr.strip().splitlines() if line.startswith("error")]) == 1


def test_a_factory_that_raises_is_one_line_not_a_traceback():
    """Issue 15: `bench custom --module json:loads` printed a traceback (loads() needs an argument)."""
    proc = accelkit("bench", "custom", "--module", "json:loads", "--device", "cpu")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "calling loads() raised TypeError" in proc.stderr and "takes no arguments" in proc.stderr


def test_a_suite_whose_precisions_cannot_run_here_is_refused_before_it_starts(_isolated_home):
    """Issue 15: `bench --suite quick --precision fp8 --device cpu` ran for 65 s instead of refusing."""
    for args in (("bench", "--suite", "quick"), ("bench", "suite", "quick")):
        proc = accelkit(*args, "--precision", "fp8", "--device", "cpu", "--json")
        assert proc.returncode == 2, proc.stderr
        assert "nothing to run: --precision fp8" in proc.stderr and proc.stdout == ""
    assert not (_isolated_home / "results.db").exists() or stored_bench(_isolated_home) == []


def test_progress_is_on_stderr_unless_turned_off(probed):
    """Issue 18: every long phase shows progress on stderr, never on stdout; issue 29: on a pipe too by default (a
    suite printed nothing for 600 s), --no-progress turns it off."""
    args = ("bench", "bert", "--size", "tiny", "--seq-len", "16", "--batch-size", "2", "--no-save", *SHORT, "--json")
    quiet = accelkit(*args, "--no-progress")
    assert quiet.returncode == 0 and json.loads(quiet.stdout)["variants"]
    assert "fp32 reference" not in quiet.stderr and "warm-up" not in quiet.stderr
    loud = accelkit(*args)
    assert loud.returncode == 0 and json.loads(loud.stdout)["variants"]  # stdout: the JSON and nothing else
    for phase in ("MFU peaks", "the planner's estimate", "fp32 reference: FLOPs on the meta device", "fp32: load",
                  "fp32 · forward: first call", "fp32 · forward: warm-up"):
        assert phase in loud.stderr, (phase, loud.stderr)


@pytest.fixture(scope="module")
def user_run_on_a_terminal(tmp_path_factory, probe_db) -> tuple[int, str, str]:
    """`accelkit bench custom --module mymodels:make --json` as a user starts it: the installed console script (not
    `python -m`), in a folder holding mymodels.py, without PYTHONPATH, its stdout a pipe and its stderr a
    pseudo-terminal (COLUMNS=120, TERM=xterm), on a store holding the suite's shared probe. The two tests below read
    different parts of this one process (a new interpreter importing torch is most of either's time). Returns (exit
    code, stdout, what the terminal showed)."""
    import os
    import pty
    import shutil
    import subprocess
    import sys

    script = Path(sys.executable).parent / "accelkit"
    assert script.exists(), f"the console script is installed beside {sys.executable}"
    folder = tmp_path_factory.mktemp("user-folder")
    (folder / "mymodels.py").write_text(
        "import torch\n\ndef make():\n    return torch.nn.Linear(8, 4), torch.randn(4, 8)\n")
    home = tmp_path_factory.mktemp("user-home")
    shutil.copy(probe_db, home / "results.db")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(ACCELKIT_HOME=str(home), COLUMNS="120", TERM="xterm")
    master, slave = pty.openpty()
    proc = subprocess.Popen([str(script), "bench", "custom", "--module", "mymodels:make", *FAST, "--no-save", "--json"],
                            cwd=folder, env=env, stdout=subprocess.PIPE, stderr=slave)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    stdout = proc.stdout.read().decode()
    proc.wait(timeout=300)
    os.close(master)
    return proc.returncode, stdout, b"".join(chunks).decode(errors="replace")


def test_a_terminal_gets_the_live_progress_bar(user_run_on_a_terminal):
    """stderr on a pseudo-terminal (stdout a pipe): rich draws its live display there."""
    code, stdout, shown = user_run_on_a_terminal
    assert code == 0 and json.loads(stdout)["variants"]
    assert "\x1b[" in shown and "fp32 · forward" in shown  # a live (ANSI) display with the lane


def test_input_bound_compares_the_wall_time_per_batch_with_the_step():
    """Prefetching workers hand most batches over at once (four finish together, then a 20 ms wait), so the median
    next() is near zero; the verdict must rest on the wall time per batch. 4 workers × 4 samples × ≥5 ms per sample:
    over 40 batches with at most 8 prefetched, a batch takes at least (40 - 8) × 5 ms / 40 = 4 ms > the 3 ms step."""
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    workload = make_workload("dataloader", {"dataset": "tests.integration.slow_dataset:make", "batch_size": 4,
                                            "num_workers": [4], "step_time_s": 0.003})
    loop = LoopConfig(warmup_iterations=5, warmup_time_s=0.5, min_iterations=40, min_time_s=0, max_iterations=40)
    run = run_benchmark(workload, [], BenchConfig(device="cpu", loop=loop, save=False))
    (entry,) = run.variants
    assert entry.phases.measured_iterations == 40
    bound = entry.input_bound
    assert bound is not None and bound.batch_time_s >= 0.004 and bound.verdict.startswith("input-bound"), bound
    assert bound.batch_time_s == pytest.approx(entry.phases.measured_s / 40)


def test_a_module_beside_the_user_is_found_by_the_installed_command(user_run_on_a_terminal):
    """`accelkit bench custom --module mymodels:make` with mymodels.py in the working directory failed with "cannot
    import 'mymodels'" unless PYTHONPATH=. was set: the installed `accelkit` script (unlike `python -m`) does not put
    the working directory on the import path. It now does, first, as `python -m` and uvicorn do."""
    code, stdout, shown = user_run_on_a_terminal
    assert code == 0, shown
    assert json.loads(stdout)["variants"][0]["throughput"]["value"] > 0
