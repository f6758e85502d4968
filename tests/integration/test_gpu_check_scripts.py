"""scripts/gpu_check.sh and scripts/gpu_results.py, as far as a CPU machine can run them: the shell script is
valid and says what is missing without a GPU; the summary and the commit step work on a real bench document."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.conftest import REPO

sys.path.insert(0, str(REPO / "scripts"))
import gpu_results


def test_gpu_check_is_valid_bash_and_refuses_without_a_gpu(tmp_path):
    assert subprocess.run(["bash", "-n", str(REPO / "scripts" / "gpu_check.sh")]).returncode == 0
    env = {**os.environ, "OUT": str(tmp_path), "PY": sys.executable}
    proc = subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 1 and "no CUDA-enabled torch found" in proc.stderr
    assert "error" in json.loads((tmp_path / "gpu_check.json").read_text())


def test_summary_and_commit_of_a_real_bench_document(tmp_path):
    from accelkit.bench.runner import BenchConfig, run_benchmark
    from accelkit.bench.variants import matrix
    from accelkit.bench.workloads import make_workload
    from accelkit.timing import LoopConfig

    run = run_benchmark(make_workload("llm-train", {"model": "tiny-llama", "batch_size": 2, "seq_len": 32}),
                        matrix(["fp32", "bf16"]),
                        BenchConfig(device="cpu", loop=LoopConfig(warmup_iterations=3, warmup_time_s=0,
                                                                  min_iterations=3, min_time_s=0),
                                    predict=False, auto_probe=False, save=False))
    out = tmp_path / "out"
    out.mkdir()
    (out / "bench_llm_train_1b_fp8.json").write_text(json.dumps(run.to_json()))
    (out / "parts.tsv").write_text("llm_train_1b_fp8\t0\t42\nserve_throughput\tabsent\t0\nreference_quick\t124\t200\n")
    (out / "nvidia-smi.csv").write_text("name, driver_version\nNVIDIA H200, 580.1\n")
    assert gpu_results.main(["summarize", str(out), "--seconds", "300"]) == 1  # a part timed out
    summary = json.loads((out / "gpu_check.json").read_text())
    assert summary["parts"]["reference_quick"]["status"] == "timed out" and not summary["ok"]
    train = summary["fp8_vs_bf16_training_1b"]
    assert [v["name"] for v in train["variants"]] == ["fp32", "bf16"] and train["verdicts"]
    assert len(train["variants"][1]["loss_first_steps"]) == 4  # first call + 3 warm-up steps
    assert train["peak_memory"]["whole_run_bytes"] > 0
    written = gpu_results.commit(out, root=tmp_path / "results")
    assert {p.name for p in written} >= {"gpu_check.json", "bench_llm_train_1b_fp8.json", "SUMMARY.md"}
    assert written[0].parent.name == "nvidia-h200"
    md = (written[0].parent / "SUMMARY.md").read_text()
    assert "| bf16 |" in md and "timed out" in md


def _fake_gpu_python(tmp_path):
    """A stand-in for the GPU image's python: 'torch sees a GPU', every part exits 0 at once, and the summary step
    runs for real — what is left to check is the script's own bookkeeping (parts chosen, timeouts, budget)."""
    fake = tmp_path / "fake-python"
    fake.write_text(f"""#!/usr/bin/env bash
case "$1" in
  -c) exit 0 ;;
  scripts/gpu_results.py) exec {sys.executable} "$@" ;;
  *) echo "$*" >> "$OUT/calls.txt"; echo '{{}}' ;;
esac
""")
    fake.chmod(0o755)
    return fake


def _gpu_check(tmp_path, out, **env):
    env = {**os.environ, "OUT": str(out), "PY": str(_fake_gpu_python(tmp_path)),
           "GPU_CHECK_WHEELS": str(tmp_path / "no-wheels"), **env}  # not the checkout's .whl/, if it has one
    return subprocess.run(["bash", str(REPO / "scripts" / "gpu_check.sh")], env=env, capture_output=True, text=True,
                          timeout=120)


def test_gpu_check_parts_are_selectable_and_a_rerun_keeps_the_other_rows(tmp_path):
    out = tmp_path / "out"
    proc = _gpu_check(tmp_path, out, GPU_CHECK_PARTS="hw_probe,report")
    assert proc.returncode == 0, proc.stderr
    assert [line.split("\t")[0] for line in (out / "parts.tsv").read_text().splitlines()] == ["hw_probe", "report"]
    assert len((out / "calls.txt").read_text().splitlines()) == 2
    proc = _gpu_check(tmp_path, out, GPU_CHECK_PARTS="serve_throughput")
    assert proc.returncode == 0, proc.stderr
    assert "--device cuda --out" in (out / "calls.txt").read_text().splitlines()[-1]
    summary = json.loads((out / "gpu_check.json").read_text())
    assert set(summary["parts"]) == {"hw_probe", "report", "serve_throughput"} and summary["ok"]
    # a part outside the default set (issue 28's guided decoding on the GPU) runs when named, in bf16 on cuda
    proc = _gpu_check(tmp_path, out, GPU_CHECK_PARTS="structured_outputs")
    assert proc.returncode == 0, proc.stderr
    call = (out / "calls.txt").read_text().splitlines()[-1]
    assert "structured_outputs.py --device cuda --dtype bfloat16" in call, call


def test_gpu_check_fits_every_part_into_one_device_command(tmp_path):
    """The part timeouts add up to more than a device command's 600 s: each is cut to what the budget leaves, and
    a part with too little left is skipped (and reported), so the summary is always written within the budget."""
    out = tmp_path / "out"
    proc = _gpu_check(tmp_path, out, GPU_CHECK_BUDGET_S="110")
    limits = [int(line.rsplit("timeout ", 1)[1].rstrip("s)")) for line in proc.stderr.splitlines()
              if "(timeout " in line]
    # every part before the report keeps 30 s of the budget for it
    assert limits and all(limit <= 110 - 20 - 30 for limit in limits[:-1]) and limits[-1] <= 110 - 20, proc.stderr
    summary = json.loads((out / "gpu_check.json").read_text())
    assert summary["parts"]["hw_probe"]["status"] == "ok"
    proc = _gpu_check(tmp_path, out, GPU_CHECK_BUDGET_S="45")
    assert proc.returncode == 1
    summary = json.loads((out / "gpu_check.json").read_text())
    assert {p["status"] for p in summary["parts"].values()} == {"skipped (time budget)"} and not summary["ok"]
    assert len(summary["parts"]) == 10
