"""What one device cannot hold is planned as the engine would meet it: a `--kv-cache-memory` budget is allocated up
front, so weights + budget past the device's memory is a plan that does not fit (with a warning naming the figures),
as `accelkit serve`'s preflight (accelkit/serve/preflight.py check_memory) refuses it; a budget or an `--overhead`
allowance larger than the device alone is one error line, exit 2. Before, `--kv-cache-memory 70GiB` on one H100 said
"fits: yes" with 573,424 KV tokens the card cannot hold, and `--overhead 100GiB` searched to 65,536 devices (found in
review). In process."""

import json
from pathlib import Path

import pytest

from accelkit.hardware import get_device
from accelkit.serve.preflight import TensorInfo, check_memory
from tests.conftest import main_in_process

INFER_8B = ["--model", "llama-3.1-8b", "--task", "infer", "--hardware", "h100"]
GIB = 2**30


def _main(capsys, *args: str) -> tuple[int, str, str]:
    """`accelkit plan ARGS` in process: (exit code, stdout, stderr)."""
    return main_in_process(capsys, "plan", *args)


def _engine_preflight(kv_budget: int, weight_bytes: int) -> None:
    """The engine's own check on one H100 for a bf16 Llama 3.1 8B of ``weight_bytes`` and this KV budget."""
    cfg = {"num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32, "hidden_size": 4096,
           "head_dim": 128}
    tensors = {"model.weights": TensorInfo(dtype="BF16", shape=(weight_bytes // 2,), num_bytes=weight_bytes)}
    check_memory(Path("llama-3.1-8b"), cfg, tensors, dtype="bfloat16",
                 kv_cache_dtype="auto", kv_cache_memory_bytes=kv_budget, max_model_len=640, block_size=16,
                 host_available=1 << 50, device_available=get_device("h100").memory_bytes, where="cuda:0")


def test_a_budget_that_leaves_no_room_for_the_weights_does_not_fit_and_says_why(capsys):
    code, out, err = _main(capsys, *INFER_8B, "--num-devices", "1", "--kv-cache-memory", "70GiB", "--json")
    assert code == 0, err
    doc = json.loads(out)
    mem, capacity = doc["memory_per_device_bytes"], doc["memory_capacity_bytes"]
    # the engine allocates the whole budget, whatever batch 1 uses of it: that is what is over the device
    held = mem["weights"] + mem["activations"] + mem["other"] + 70 * GIB
    assert not doc["fits"] and held > capacity
    assert doc["overflow"]["over_by_bytes"] == pytest.approx(held - capacity, abs=4)
    assert doc["overflow"]["largest"][0] == "kv_cache"
    (warning,) = doc["warnings"]
    assert warning.startswith("--kv-cache-memory 70.00 GiB + this device's weights 14.96 GiB, activations ")
    assert "more than the 79.65 GiB of one H100-SXM5-80GB: `accelkit serve` refuses this budget" in warning
    assert f"warning: {warning}" in err
    with pytest.raises(ValueError, match="this model needs at least 84.96 GiB of cuda:0"):  # so does the engine
        _engine_preflight(70 * GIB, mem["weights"])
    # the budget the warning offers fits, on the planner's rule and the engine's
    offered = int(warning.split("lower --kv-cache-memory to ")[1].split("MiB")[0])
    code, out, _ = _main(capsys, *INFER_8B, "--num-devices", "1", "--kv-cache-memory", f"{offered}MiB", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["fits"] and doc["warnings"] == []
    _engine_preflight(offered << 20, mem["weights"])
    # one MiB more does not
    code, out, _ = _main(capsys, *INFER_8B, "--num-devices", "1", "--kv-cache-memory", f"{offered + 1}MiB", "--json")
    assert code == 0 and not json.loads(out)["fits"]


def test_the_device_count_search_finds_where_the_budget_fits(capsys):
    code, out, err = _main(capsys, *INFER_8B, "--kv-cache-memory", "70GiB", "--json")
    assert code == 0, err
    doc = json.loads(out)
    # one H100 cannot hold 15 GiB of weights beside 70 GiB of KV; tp 2 halves the weights each device holds
    assert doc["fits"] and doc["hardware"]["num_devices"] == 2 and doc["layout"]["tp"] == 2
    assert doc["kv_cache_capacity"]["budget_bytes"] == 70 * GIB and doc["warnings"] == []


@pytest.mark.parametrize("flag,value,needle", [
    ("--kv-cache-memory", "1TiB", "--kv-cache-memory 1.00 TiB is more than the 79.65 GiB of one H100-SXM5-80GB"),
    ("--overhead", "100GiB", "--overhead 100.00 GiB is not less than the 79.65 GiB of one H100-SXM5-80GB"),
])
def test_more_than_one_device_holds_is_one_error_line(capsys, flag, value, needle):
    code, out, err = _main(capsys, *INFER_8B, flag, value)
    lines = err.strip().splitlines()
    assert code == 2 and out == "" and len(lines) == 1 and needle in lines[0], err


def test_a_smaller_budget_is_planned_as_before(capsys):
    """A budget the batch's KV outgrows changes nothing but the KV capacity row: the batch's KV is the larger."""
    base = json.loads(_main(capsys, *INFER_8B, "--num-devices", "1", "--json")[1])
    small = json.loads(_main(capsys, *INFER_8B, "--num-devices", "1", "--kv-cache-memory", "2GiB", "--json")[1])
    assert small["memory_per_device_bytes"] == base["memory_per_device_bytes"] and small["fits"]
    assert (small["batch"], small["tokens_per_s"]) == (base["batch"], base["tokens_per_s"])
