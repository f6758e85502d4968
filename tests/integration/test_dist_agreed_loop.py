"""The agreed timing loop on 2 CPU processes (gloo, spawned here rather than by torchrun: a second each): the ranks
run the same blocks, a run without warm-up starts from one call, and max_iterations holds exactly."""

from __future__ import annotations

import json
import time
from itertools import pairwise
from pathlib import Path

import torch.multiprocessing as mp


def _rank(rank: int, store: str, out: str) -> None:
    import torch.distributed as dist

    from accelkit.distributed.agreed_loop import AgreedRun, agreed_steady_state, agreed_warm_up
    from accelkit.timing import LoopConfig

    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2)
    try:
        calls = [0]

        def step() -> None:  # rank 1 is the slow one: the agreed (MAX) times are its
            calls[0] += 1
            if calls[0] > 1000:  # the old estimate of 0 s a call sized one block of 10 million
                raise RuntimeError("a block far past its target")
            time.sleep(0.001 * (1 + 2 * rank))

        # min_time_s far past 25 calls' time: only the cap ends the run, however slow a loaded machine makes a sleep
        no_warmup = LoopConfig(warmup_iterations=0, warmup_time_s=0.0, min_iterations=1, min_time_s=600.0,
                               max_iterations=25)
        by_count = LoopConfig(warmup_iterations=2, warmup_time_s=0.0, min_iterations=100, min_time_s=0.0,
                              max_iterations=25)  # blocks of min_iterations / 10 once overshot the cap (30)
        doc = {}
        for name, loop in (("no_warmup", no_warmup), ("by_count", by_count)):
            run, counts = AgreedRun(), [0]
            agreed_warm_up(step, loop, device="cpu", run=run)
            agreed_steady_state(step, loop, device="cpu", run=run,
                                on_block=lambda r, counts=counts: counts.append(len(r.samples_s)))
            doc[name] = {"samples": len(run.samples_s), "blocks": [b - a for a, b in pairwise(counts)]}
        Path(out, f"{rank}.json").write_text(json.dumps(doc))
    finally:
        dist.destroy_process_group()


def test_ranks_run_the_same_blocks_from_one_call_up_to_the_cap(tmp_path):
    mp.spawn(_rank, args=(str(tmp_path / "store"), str(tmp_path)), nprocs=2, join=True)
    ranks = [json.loads((tmp_path / f"{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0] == ranks[1]  # same count, same blocks on every rank
    for run in ranks[0].values():
        assert run["samples"] == 25 == sum(run["blocks"])  # max_iterations exactly: the last block cut to fit
        assert max(run["blocks"]) <= 3  # about a tenth of the cap per block
    assert ranks[0]["no_warmup"]["blocks"][0] == 1  # no warm-up: the first call is the estimate
