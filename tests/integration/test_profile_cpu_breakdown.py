"""`profile_step` on a real CPU run: the breakdown's communication is the collectives' time only."""

import torch
import torch.distributed as dist
import torch.nn.functional as F

from accelkit.monitor.profiler import ProfileConfig, profile_step


def _mse_step():
    model = torch.nn.Linear(16, 16)
    x, target = torch.randn(4, 16), torch.randn(16)  # the target broadcasts: F.mse_loss calls aten::broadcast_tensors

    def step():
        F.mse_loss(model(x), target.expand(4, 16)).backward()

    return step


def test_one_process_mse_step_has_no_communication(tmp_path):
    """Before, aten::broadcast_tensors was "communication": a one-CPU run read "communication 0.1%, overlap 0.0%"."""
    config = ProfileConfig(wait=0, warmup=1, steps=2, out_dir=str(tmp_path))
    summary = profile_step(_mse_step(), config)
    names = {row["name"] for row in summary["top_cpu_ops"]}
    assert "aten::mse_loss" in names or "aten::mse_loss_backward" in names
    assert "aten::broadcast_tensors" in (tmp_path / "trace.json").read_text()
    b = summary["breakdown"]
    assert b["timeline"] == "cpu" and b["communication_s"] == 0 and b["overlap_pct"] is None
    assert summary["top_device_ops"] == []


def test_gloo_collectives_are_communication(tmp_path):
    """The real op names torch records for gloo collectives (c10d::allreduce_ …) still count as communication."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        mse = _mse_step()
        grad = torch.ones(1024)

        def step():
            mse()
            dist.all_reduce(grad)
            dist.broadcast(grad, 0)

        summary = profile_step(step, ProfileConfig(wait=0, warmup=1, steps=2, out_dir=str(tmp_path / "prof")))
    finally:
        dist.destroy_process_group()
    b = summary["breakdown"]
    assert b["communication_s"] > 0 and b["overlap_pct"] is not None
