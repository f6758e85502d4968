"""DDP communication hooks on gloo (2 CPU processes, spawned here). torch's hooks chain their work with
``Future.then`` callbacks, which gloo would run — and drop — on its worker threads: PowerSGD's P and Q all-reduces
then reached gloo in a different order on each rank once a model had several buckets (gloo aborted a rank:
"op.preamble.length <= op.nbytes", or the step hung). ``register_ddp_hook`` completes a hook's collectives on the
calling thread on gloo, so its callbacks run and are dropped there (grad_comm.py, "No Python on gloo's threads").

And a rank died at exit ("terminate called without an active exception", SIGABRT): the group outlived the program,
pinned by ``torch.distributed.nn.functional``'s default arguments, and a gloo thread still holding a finished
collective asked for the GIL during interpreter finalization. Started with ``process_group.init_process_group``,
the group is freed — its threads joined — when the rank function ends (process_group.py); the tests check that no
gloo thread is left by then. And freeing it could hang: ``~ProcessGroupGloo`` joins gloo's threads holding the GIL
while one of them, starved, had yet to drop the last collective's tensors, which needs the GIL;
``process_group.destroy_process_group`` waits until gloo's threads are idle first.

The three rank bodies run one after another in one pair of spawned processes (each body starts and destroys a group
of its own, on its own file store); each test reads its body's results."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import torch.multiprocessing as mp

from accelkit.distributed.process_group import destroy_process_group


def _init(rank: int, store: str) -> None:
    from datetime import timedelta

    from accelkit.distributed.process_group import init_process_group

    # a hang fails here after 30 s instead of holding the test
    init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=2, timeout=timedelta(seconds=30))


def _gloo_threads() -> int:
    """This process's live gloo worker threads (Linux names them in /proc)."""
    tasks = Path("/proc/self/task")
    return sum((t / "comm").read_text().strip() == "pt_gloo_runloop" for t in tasks.iterdir())


def _every_body(rank: int, out: str) -> None:
    """Runs each of this rank's bodies (``BODIES``; each starts and destroys its group), and after each writes its
    results with the number of gloo threads still alive once it has returned — what would race interpreter
    finalization."""
    for name, body in BODIES.items():
        results = body(rank, str(Path(out, f"{name}.store")))
        Path(out, f"{name}-{rank}.json").write_text(json.dumps({**results, "gloo_threads_after": _gloo_threads()}))


@pytest.fixture(scope="module")
def body_results(tmp_path_factory) -> Callable[[str], list[dict[str, object]]]:
    """Both ranks' results of a body (by name), from one spawn of 2 processes that ran every body."""
    out = tmp_path_factory.mktemp("gloo-ranks")
    mp.spawn(_every_body, args=(str(out),), nprocs=2, join=True)
    return lambda name: [json.loads(Path(out, f"{name}-{r}.json").read_text()) for r in (0, 1)]


def _powersgd_rank(rank: int, store: str) -> dict[str, object]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from accelkit.core import Recipe
    from accelkit.distributed.grad_comm import CommCounter, register_ddp_hook

    _init(rank, store)
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
        weights = torch.cat([p.detach().flatten() for p in model.parameters()])
        gathered = [torch.empty_like(weights) for _ in range(2)]
        dist.all_gather(gathered, weights)
        last = counter.steps[-1]
        return {"iter": state.iter, "buckets": last.get("buckets", 0), "collectives": last.get("collectives", 0),
                "same_weights": bool(torch.equal(gathered[0], gathered[1]))}
    finally:
        destroy_process_group()


def test_powersgd_on_gloo_with_many_buckets(body_results):
    ranks = body_results("powersgd")
    assert ranks[0]["gloo_threads_after"] == ranks[1]["gloo_threads_after"] == 0, ranks  # the group ended with the ranks
    assert ranks[0]["buckets"] >= 8, ranks  # many buckets: what went wrong
    assert ranks[0]["iter"] == 20 and ranks[0]["same_weights"] and ranks[1]["same_weights"], ranks
    # the uncompressed all-reduce and the P and Q all-reduces of every bucket, issued from the hook's callbacks:
    # all seen by the counter, which watches the calling thread only
    assert ranks[0]["collectives"] == 3 * ranks[0]["buckets"] == ranks[1]["collectives"], ranks


class _SlowToDrop:
    """Held by a hook's callback: whichever thread drops the callback waits here with the GIL released, as a
    worker thread the scheduler starves does."""

    def __del__(self) -> None:
        time.sleep(0.3)


def _slow_callback_rank(rank: int, store: str) -> dict[str, object]:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    from accelkit.distributed.grad_comm import counted_hook

    _init(rank, store)
    seen: dict[str, object] = {}

    def hook(state: object, bucket: object) -> torch.futures.Future[torch.Tensor]:
        held = _SlowToDrop()

        def unpack(fut: torch.futures.Future[list[torch.Tensor]], held: _SlowToDrop = held) -> torch.Tensor:
            seen["callback_thread"] = threading.get_ident()
            return fut.value()[0]

        future = dist.all_reduce(bucket.buffer(), async_op=True).get_future().then(unpack)  # type: ignore[attr-defined]
        seen["done_on_return"] = future.done()
        return future

    ddp = DistributedDataParallel(torch.nn.Linear(8, 8))
    ddp.register_comm_hook(None, counted_hook(hook, None, complete_inline=True))
    ddp(torch.randn(2, 8)).sum().backward()
    destroy_process_group()
    # left to gloo's thread, this callback would still be being dropped now, and with the group alive at exit the
    # rank would die with SIGABRT as the process ends (tried: every time)
    return {"callback_on_training_thread": seen["callback_thread"] == threading.get_ident(),
            "done_on_return": seen["done_on_return"]}


def test_hook_callbacks_run_and_are_dropped_on_the_training_thread_on_gloo(body_results):
    ranks = body_results("slow_callback")
    assert all(r == {"callback_on_training_thread": True, "done_on_return": True, "gloo_threads_after": 0}
               for r in ranks), ranks


def _idle_detection_rank(rank: int, store: str) -> dict[str, object]:
    import torch
    import torch.distributed as dist

    from accelkit.distributed.process_group import _gloo_thread_states, wait_for_idle_gloo_threads

    _init(rank, store)
    dist.all_reduce(torch.ones(4))
    settled = wait_for_idle_gloo_threads(timeout_s=30)
    idle = _gloo_thread_states()

    def slow(fut: torch.futures.Future[list[torch.Tensor]]) -> torch.Tensor:
        time.sleep(0.5)  # on gloo's thread, after the collective: busy, though the caller's wait may have returned
        return fut.value()[0]

    if rank == 1:  # rank 0's collective cannot complete before this: its callback is attached first, so gloo runs it
        time.sleep(0.3)
    future = dist.all_reduce(torch.ones(4), async_op=True).get_future().then(slow)  # type: ignore[attr-defined]
    seen_busy = False
    for _ in range(200):
        seen_busy = seen_busy or "busy" in (_gloo_thread_states() or [])
        if future.done():
            break
        time.sleep(0.002)
    future.wait()
    settled_again = wait_for_idle_gloo_threads(timeout_s=30)
    destroy_process_group()
    return {"settled": settled, "idle": idle, "seen_busy": seen_busy, "settled_again": settled_again}


def test_gloo_threads_are_seen_idle_or_busy_and_the_group_ends_after_they_settle(body_results):
    ranks = body_results("idle_detection")
    for r in ranks:  # gloo's default two threads, both idle once the collective is done
        assert r["settled"] and r["idle"] == ["idle", "idle"] and r["settled_again"], ranks
        assert r["gloo_threads_after"] == 0, ranks
    assert ranks[0]["seen_busy"], ranks  # one of rank 0's threads in the callback (rank 1's may run it inline)


#: what each rank runs, in this order, in the one spawn of the module's tests
BODIES: dict[str, Callable[[int, str], dict[str, object]]] = {
    "powersgd": _powersgd_rank, "slow_callback": _slow_callback_rank, "idle_detection": _idle_detection_rank}
