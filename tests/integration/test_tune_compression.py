"""`accelkit tune llm-train --nproc-per-node 2`: the gradient compressions measured on 2 gloo processes, each gated
on its loss against none, fp16 refused without a loss scale, a winner with the code that registers it."""

import json

from tests.conftest import accelkit


def test_tune_gradient_compression_on_two_processes(probed):
    proc = accelkit("tune", "llm-train", "--model", "tiny-llama", "--batch-size", "4", "--seq-len", "32", "--device",
                    "cpu", "--nproc-per-node", "2", "--max-accuracy-drop", "0.02", "--lr", "3e-3", "--json", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    trials = {t["name"]: t for t in doc["trials"]}
    assert list(trials) == ["fp32", "fp32+bf16-grads", "fp32+fp16-grads", "fp32+powersgd-r4", "fp32+powersgd-r1"]
    assert trials["fp32+fp16-grads"]["status"] == "refused" and "loss scale" in trials["fp32+fp16-grads"]["reason"]
    for name in ("fp32", "fp32+bf16-grads", "fp32+powersgd-r4", "fp32+powersgd-r1"):
        t = trials[name]
        assert t["status"] == "measured" and t["throughput"] > 0
        assert t["accuracy"]["grad_comm"]["within_tolerance"] is True
    assert trials["fp32"]["gate"]["criterion"] == "reference"
    assert trials["fp32+bf16-grads"]["gate"]["criterion"] == "loss vs none" and trials["fp32+bf16-grads"]["passed"]
    assert doc["winner"]["name"] in {n for n, t in trials.items() if t["passed"]}
    assert "register" in doc["snippet"]
