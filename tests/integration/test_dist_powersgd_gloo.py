"""PowerSGD on gloo with many DDP buckets (2 CPU processes, spawned here): torch's hook issues its P and Q
all-reduces from callbacks on gloo's threads, and with two or more buckets the ranks issued them in different
orders — gloo paired collectives of different sizes and aborted a rank ("op.preamble.length <= op.nbytes"), or every
worker thread waited in a callback and the step hung. ``register_ddp_hook`` runs one bucket at a time on gloo."""

from __future__ import annotations

import json
from pathlib import Path

import torch.multiprocessing as mp


def _rank(rank: int, store: str, out: str) -> None:
    from datetime import timedelta

    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from accelkit.core import Recipe
    from accelkit.distributed.grad_comm import CommCounter, register_ddp_hook

    # a hang fails here after 30 s instead of holding the test
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2,
                            timeout=timedelta(seconds=30))
    try:
        torch.manual_seed(0)
        model = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(16)])
        ddp = DistributedDataParallel(model, bucket_cap_mb=0.02)  # a bucket or so per layer
        counter = CommCounter()
        state = register_ddp_hook(ddp, Recipe(grad_compression="powersgd", powersgd_start_iter=2), counter)
        optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
        torch.manual_seed(1 + rank)  # each rank its own batch
        x = torch.randn(8, 64)

        def train() -> None:
            optimizer.zero_grad()
            ddp(x).square().mean().backward()
            optimizer.step()

        step = counter.step(train)
        for _ in range(20):
            step()
        counter.uninstall()
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        gathered = [torch.empty_like(weights) for _ in range(2)]
        dist.all_gather(gathered, weights)
        Path(out, f"{rank}.json").write_text(json.dumps({
            "iter": state.iter, "buckets": counter.steps[-1].get("buckets", 0),
            "same_weights": bool(torch.equal(gathered[0], gathered[1]))}))
    finally:
        dist.destroy_process_group()


def test_powersgd_on_gloo_runs_one_bucket_at_a_time(tmp_path):
    mp.spawn(_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["buckets"] >= 8, ranks  # many buckets: what went wrong
    assert ranks[0]["iter"] == 20 and ranks[0]["same_weights"] and ranks[1]["same_weights"], ranks
