"""The collective probe on 2 CPU processes (gloo, torchrun) and the plan that takes its bus bandwidth."""

from __future__ import annotations

import json
import re

import pytest

from tests.conftest import accelkit

pytestmark = pytest.mark.usefixtures("probed")  # a matmul probe: the planner's description of this CPU


def test_collective_probe_feeds_the_plan():
    """(Messages up to 64 KiB, not the default 64 MiB: the plan takes whatever the largest one measured.)"""
    proc = accelkit("hw", "probe", "--collectives", "--nproc-per-node", "2", "--device", "cpu", "--quick", "--json",
                    "--max-message-size", "64KiB")
    assert proc.returncode == 0, proc.stderr[-3000:]
    probe = json.loads(proc.stdout)
    d = probe["details"]
    assert probe["kind"] == "collectives" and d["world_size"] == 2 and d["backend"] == "gloo"
    assert {r["op"] for r in d["results"]} == {"all_reduce", "all_gather", "reduce_scatter"}
    # the ranks measured the default steps up to the flag's size: 1, 4, 16 and 64 KiB
    assert sorted({r["size_bytes"] for r in d["results"]}) == [1024, 4096, 16384, 65536] == \
        sorted(r["size_bytes"] for r in d["results"] if r["op"] == "all_reduce")
    assert d["largest_size_bytes"] == 65536
    for r in d["results"]:  # nccl-tests definitions on n = 2: all-reduce ×1, gather/scatter ×½
        factor = 1.0 if r["op"] == "all_reduce" else 0.5
        assert abs(r["busbw_gbps"] - r["algbw_gbps"] * factor) < 1e-9
        assert abs(r["algbw_gbps"] - r["size_bytes"] / r["time_s"] / 1e9) < 1e-9
    busbw = d["bus_bandwidth_gbps"]["all_reduce"]
    assert busbw > 0 and probe["result_id"] is not None

    plan = accelkit("plan", "--model", "tiny-llama", "--hardware", "cpu", "--num-devices", "2", "--dp", "2",
                    "--tp", "1", "--pp", "1", "--zero", "3", "--precision", "fp32", "--global-batch", "4",
                    "--seq-len", "32", "--json")
    assert plan.returncode == 0, plan.stderr
    assumptions = json.loads(plan.stdout)["assumptions"]
    named = [a for a in assumptions if f"measured all-reduce bus bandwidth {busbw:.3f} GB/s" in a]
    assert named, assumptions
    assert "hw probe --collectives" in named[0]


@pytest.mark.parametrize(("device", "needle"), [("cuda", "torch sees no CUDA/ROCm device"),
                                                ("bogus", "device 'bogus' is not valid")])
def test_collective_probe_refuses_a_device_as_hw_probe_does(device, needle):
    """Any device but cpu was sent as auto: on a host without a GPU `--device cuda` (or a typo) ran on the CPU
    and exited 0. Now the same one line as `hw probe --device`, exit 2, before torchrun starts."""
    import torch

    if device == "cuda" and torch.cuda.is_available():
        pytest.skip("this host has a GPU: cuda is valid here")
    proc = accelkit("hw", "probe", "--collectives", "--nproc-per-node", "2", "--device", device, "--quick", "--no-save")
    single = accelkit("hw", "probe", "--device", device, "--quick", "--no-save")
    assert proc.returncode == single.returncode == 2, proc.stderr[-2000:]
    # the same error line; the single-process probe may show its progress first (#29: on a pipe too) while torch loads
    errors = [[line for line in p.stderr.splitlines() if not re.match(r"\[ *\d+\.\d s\] probing", line)]
              for p in (proc, single)]
    assert needle in proc.stderr and errors[0] == errors[1] == proc.stderr.splitlines(), (proc.stderr, single.stderr)
    assert "torchrun" not in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (("--collectives", "--max-message-size", "lots"), "--max-message-size 'lots' is not a size; write e.g. 512MiB, 16GiB or 80GB"),
    (("--collectives", "--max-message-size", "2"), "--max-message-size 2 is out of range; give 4B to 1GiB"),
    (("--collectives", "--max-message-size", "2GiB"), "--max-message-size 2GiB is out of range; give 4B to 1GiB"),
    (("--max-message-size", "1MiB"), "--max-message-size applies to --collectives (the torchrun launch); add "
                                     "--collectives or drop it"),
])
def test_a_bad_max_message_size_is_a_one_line_usage_error(args, message):
    proc = accelkit("hw", "probe", "--device", "cpu", "--quick", "--no-save", *args)
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"error: {message}", proc.stderr  # one line, before any launch


def test_the_largest_message_bounds_the_default_sizes():
    """Below the first default step a rank measures that one size; sizes given outright take no bound."""
    from accelkit.distributed.collectives import CPU_SIZES, GPU_SIZES, CollectiveConfig

    assert CollectiveConfig().message_sizes("cpu") == CPU_SIZES and CollectiveConfig().message_sizes("cuda:0") == GPU_SIZES
    bounded = CollectiveConfig(max_size_bytes=100_000)
    assert bounded.message_sizes("cpu") == (1024, 4096, 16384, 65536)
    assert bounded.message_sizes("cuda:1") == (100_000,)
    assert CollectiveConfig(max_size_bytes=1 << 30).message_sizes("cuda:0") == GPU_SIZES
    assert CollectiveConfig(sizes_bytes=(8, 64)).message_sizes("cpu") == (8, 64)
    with pytest.raises(ValueError, match="with sizes_bytes given, drop it"):
        CollectiveConfig(sizes_bytes=(8,), max_size_bytes=64)
