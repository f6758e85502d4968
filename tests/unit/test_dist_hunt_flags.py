"""Launch flags that did nothing in the layout they were given to, refused in one line instead (found in a hunt):
``--rdzv-id`` outside a c10d rendezvous (torchrun's --standalone draws its own id, a static rendezvous uses none, and
the command line carried it only for c10d), and the quality check's flags where no quality check runs."""

from __future__ import annotations

import pytest

from accelkit.core import UserError
from accelkit.distributed.launch import DistConfig, check_rdzv_id, launch, torchrun_command
from accelkit.distributed.quality import QualityConfig, check_quality_flags


def test_rdzv_id_outside_a_c10d_rendezvous_is_refused_naming_the_fix():
    standalone = DistConfig(nproc_per_node=2, rdzv_id="job7")
    assert "job7" not in torchrun_command(standalone)  # what it was: dropped from the launch without a word
    with pytest.raises(UserError, match=r"^--rdzv-id job7 applies to a c10d rendezvous .*--standalone.*drop --rdzv-id"):
        check_rdzv_id(standalone)
    static = DistConfig(nproc_per_node=2, nnodes="2", node_rank=1, rdzv_endpoint="node0:29400", rdzv_id="job7")
    with pytest.raises(UserError, match=r"with --node-rank the rendezvous is static.*drop --rdzv-id, or drop --node-rank"):
        check_rdzv_id(static)
    # the launcher refuses it before torchrun starts (hw probe --collectives and tune launch through it too)
    with pytest.raises(UserError, match="^--rdzv-id job7 applies"):
        launch({"task": "never run"}, standalone)


def test_rdzv_id_is_taken_where_it_names_the_job():
    c10d = DistConfig(nproc_per_node=2, nnodes="2:4", rdzv_endpoint="head:29400", rdzv_id="job7")
    check_rdzv_id(c10d)
    cmd = torchrun_command(c10d)
    assert cmd[cmd.index("--rdzv-id") + 1] == "job7"
    check_rdzv_id(DistConfig(nproc_per_node=2))  # the default id, never given: nothing to refuse


def test_the_bench_refuses_rdzv_id_before_its_probe_and_launch():
    from accelkit.bench.runner import BenchConfig
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload
    from accelkit.distributed.bench_launch import run_distributed_bench

    with pytest.raises(UserError, match="^--rdzv-id job7 applies to a c10d rendezvous"):
        run_distributed_bench(make_workload("resnet", {"size": "tiny"}), [Variant()], BenchConfig(device="cpu"),
                              DistConfig(nproc_per_node=2, rdzv_id="job7"))


def test_quality_flags_without_a_quality_check_are_refused():
    with pytest.raises(UserError, match=r"^--quality-steps 10 applies to the quality check .* add --grad-compression"):
        check_quality_flags(QualityConfig(quality_steps=10), compressed=False)
    with pytest.raises(UserError, match=r"^--quality-steps 3 and --max-loss-increase 0.5 apply .* drop them$"):
        check_quality_flags(QualityConfig(quality_steps=3, max_loss_increase=0.5), compressed=False)
    with pytest.raises(UserError, match=r"^--max-loss-increase 0.1 is the quality check's allowance, and "
                                        r"--quality-steps 0 turns the check off"):
        check_quality_flags(QualityConfig(quality_steps=0, max_loss_increase=0.1), compressed=True)
    check_quality_flags(QualityConfig(), compressed=False)  # defaults: nothing given
    check_quality_flags(QualityConfig(quality_steps=10, max_loss_increase=0.5), compressed=True)
    check_quality_flags(QualityConfig(quality_steps=0), compressed=True)


@pytest.mark.parametrize("flags", [("--quality-steps", "10"), ("--max-loss-increase", "0.5")])
def test_the_bench_cli_refuses_quality_flags_without_compression(flags):
    """Wired in `accelkit bench` (not in the launch, which `accelkit tune` shares with settings of its own)."""
    from tests.conftest import run_cli

    proc = run_cli("bench", "llm-train", "--model", "tiny-llama", "--batch-size", "2", "--seq-len", "32", "--device",
                   "cpu", "--quick", "--no-save", *flags)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: {flags[0]} ") and "no variant here compresses its gradients" in proc.stderr
