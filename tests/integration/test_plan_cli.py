"""`accelkit plan` end to end in a subprocess (the real entry point, so error handling and exit codes are
the real ones)."""

import json
import re

import pytest

from tests.conftest import accelkit

KEYS = {"model", "task", "hardware", "layout", "memory_per_device_bytes", "fits", "flops_per_step", "step_time_s",
        "tokens_per_s", "mfu", "time_breakdown_s", "energy_j_per_token", "assumptions"}


def run_plan(*args):
    return accelkit("plan", *args)


def test_train_json_has_the_issue_fields():
    proc = run_plan("--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "8", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert set(doc) >= KEYS
    assert set(doc["model"]) == {"name", "params", "active_params"}
    assert set(doc["hardware"]) == {"name", "num_devices"} and doc["hardware"]["num_devices"] == 8
    assert set(doc["layout"]) == {"dp", "tp", "pp", "ep", "zero", "micro_batch", "grad_accum", "recompute",
                                  "recompute_every", "sequence_parallel", "cp", "vp", "shard_group"}
    assert set(doc["memory_per_device_bytes"]) == {"weights", "gradients", "optimizer", "activations", "kv_cache",
                                                   "other", "total"}
    assert set(doc["time_breakdown_s"]) == {"compute", "memory", "communication", "bubble", "launch"}
    assert doc["fits"] is True and 0 < doc["mfu"] < 1


def test_infer_json_adds_prefill_decode_and_max_batch():
    proc = run_plan("--model", "llama-3.1-8b", "--task", "infer", "--hardware", "h100", "--num-devices", "1",
                    "--prompt-len", "32768", "--output-len", "256", "--kv-dtype", "fp8", "--json",
                    "--price-per-device-hour", "2.5")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert {"prefill_time_s", "decode_time_per_token_s", "max_batch"} <= set(doc)
    assert doc["max_batch"] >= doc["batch"] >= 1 and doc["cost"]["per_million_tokens"] > 0


def test_compare_prints_one_row_per_hardware():
    proc = run_plan("--model", "llama-3.1-70b", "--task", "train", "--compare", "h100,h200,mi300x,b200", "--json")
    assert proc.returncode == 0, proc.stderr
    docs = json.loads(proc.stdout)
    assert [d["hardware"]["name"] for d in docs] == ["H100-SXM5-80GB", "H200-SXM-141GB", "MI300X", "B200-SXM-180GB"]
    table = run_plan("--model", "llama-3.1-70b", "--compare", "h100,b200")
    assert table.returncode == 0 and "B200-SXM-180GB" in table.stdout and "bottleneck" in table.stdout


def test_top_k_lists_layouts():
    proc = run_plan("--model", "llama-3.1-8b", "--hardware", "h200", "--num-devices", "16", "--top", "3", "--json")
    docs = json.loads(proc.stdout)
    assert len(docs) == 3 and docs[0]["step_time_s"] <= docs[1]["step_time_s"] <= docs[2]["step_time_s"]


def test_not_fitting_layout_is_reported_not_an_error():
    proc = run_plan("--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "8", "--tp", "8",
                    "--zero", "0", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["fits"] is False and doc["overflow"]["over_by_bytes"] > 0 and doc["overflow"]["largest"]
    human = run_plan("--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "8", "--tp", "8", "--zero", "0")
    assert "NO — over by" in human.stdout


@pytest.mark.parametrize("args,needle", [
    (["--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "8", "--tp", "3"], "does not divide the 64"),
    (["--model", "llama-3.1-70b", "--hardware", "h999"], "unknown hardware 'h999'"),
    (["--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "-4"], "--num-devices"),
    (["--model", "llama-3.1-70b", "--hardware", "h100", "--global-batch", "-1"], "--global-batch"),
    (["--model", "llama-3.1-70b", "--hardware", "h100", "--recompute", "most"], "'--recompute': 'most' is not one of 'none', 'selective', 'full'"),
    (["--model", "no-such-model", "--hardware", "h100"], "no-such-model"),
])
def test_bad_input_exits_2_with_one_line(args, needle):
    proc = run_plan(*args)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


# ---- issue 18, item 1: the first inference plan must not contradict itself
@pytest.mark.parametrize("hardware", ["h100", "mi300x"])
def test_default_inference_batch_fits_and_max_is_consistent(hardware):
    human = run_plan("--model", "llama-3.1-70b", "--task", "infer", "--hardware", hardware)
    assert human.returncode == 0, human.stderr
    assert "NO — over by" not in human.stdout
    batch, most = map(int, re.search(r"batch\s+│ (\d+) \(max that fits: (\d+)\)", human.stdout).groups())
    assert batch <= most
    doc = json.loads(run_plan("--model", "llama-3.1-70b", "--task", "infer", "--hardware", hardware, "--json").stdout)
    n = doc["hardware"]["num_devices"]
    over = run_plan("--model", "llama-3.1-70b", "--task", "infer", "--hardware", hardware, "--num-devices", str(n),
                    "--batch", str(doc["max_batch"] + 1), "--tp", str(doc["layout"]["tp"]), "--json")
    assert json.loads(over.stdout)["fits"] is False  # one more sequence than "max that fits" does not fit
    at_max = run_plan("--model", "llama-3.1-70b", "--task", "infer", "--hardware", hardware, "--num-devices", str(n),
                      "--batch", str(doc["max_batch"]), "--tp", str(doc["layout"]["tp"]), "--json")
    assert json.loads(at_max.stdout)["fits"] is True


def test_encoder_inference_has_max_batch_and_memory_time():
    doc = json.loads(run_plan("--model", "bert-base", "--task", "infer", "--hardware", "h100", "--json").stdout)
    assert isinstance(doc["max_batch"], int) and doc["max_batch"] >= doc["batch"]
    assert doc["time_breakdown_s"]["memory"] > 0
    human = run_plan("--model", "bert-base", "--task", "infer", "--hardware", "h100")
    assert "max that fits: None" not in human.stdout


def test_kv_cache_dtype_auto_is_resolved_to_the_dtype_used():
    doc = json.loads(run_plan("--model", "llama-3.1-8b", "--task", "infer", "--hardware", "h100", "--json").stdout)
    assert doc["kv_cache_dtype"] == "bf16" and doc["kv_cache_dtype_requested"] == "auto"


# ---- issue 15: a device count of 10^20 must not hang (divisors() tried every integer)
def test_huge_device_count_is_a_range_error_not_a_hang():
    # a hang is caught by the subprocess timeout (each answers in under a second; the old code never did)
    proc = accelkit("plan", "--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "100000000000000000000",
                    timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("error:")]
    assert len(lines) == 1 and "--num-devices" in lines[0] and "1048576" in lines[0]
    big = accelkit("plan", "--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "1048576", "--tp", "8",
                   "--pp", "4", "--global-batch", "32768", "--json", timeout=60)
    assert big.returncode == 0, big.stderr


def test_context_parallel_and_virtual_stages_from_the_command_line():
    doc = json.loads(run_plan("--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "64", "--tp", "4",
                              "--pp", "4", "--cp", "2", "--vp", "5", "--global-batch", "128", "--seq-len", "8192",
                              "--kernels", "fused", "--json").stdout)
    assert doc["layout"]["cp"] == 2 and doc["layout"]["vp"] == 5 and doc["layout"]["dp"] == 2
    # 4 × 3 = 12 chunks over 80 layers are uneven, which a pinned layout may be (issue 32); more chunks than layers
    # are refused
    uneven = run_plan("--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "64", "--pp", "4", "--vp",
                      "3", "--global-batch", "128", "--json")
    assert uneven.returncode == 0, uneven.stderr
    assert json.loads(uneven.stdout)["layout"]["vp"] == 3
    bad = run_plan("--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "64", "--pp", "4", "--vp", "32")
    assert bad.returncode == 2 and "stage chunks exceed the 80 layers" in bad.stderr


def test_cnn_inference_batch_fits():
    doc = json.loads(run_plan("--model", "resnet-50", "--task", "infer", "--hardware", "h100", "--json").stdout)
    assert doc["fits"] and isinstance(doc["max_batch"], int) and doc["max_batch"] >= doc["batch"]
