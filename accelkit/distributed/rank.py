"""Who this process is in a torchrun job — :class:`RankContext`, made by :func:`start` when it joins the process
group — and the gather to rank 0 that every job (bench, collectives) ends with. Imports torch only inside its
functions."""

from __future__ import annotations

import os
import socket
import sys
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from accelkit.distributed.process_group import init_process_group
from accelkit.hardware.device import resolve_device


@dataclass(frozen=True, slots=True)
class RankContext:
    """Who this process is in the job (torchrun's environment) and what it runs on."""

    rank: int
    world_size: int
    local_rank: int
    local_world_size: int
    device: str
    backend: str
    host: str

    @property
    def num_nodes(self) -> int:
        return max(1, self.world_size // max(self.local_world_size, 1))

    def say(self, text: str) -> None:
        if self.rank == 0:
            print(f"[rank 0/{self.world_size}] {text}", file=sys.stderr, flush=True)


def start(job: dict[str, Any]) -> RankContext:
    import torch

    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank, local_world = int(os.environ["LOCAL_RANK"]), int(os.environ["LOCAL_WORLD_SIZE"])
    requested = str(job.get("device", "auto"))
    # every rank takes its own GPU (cuda:LOCAL_RANK) whatever index the launcher was given
    device = resolve_device("cuda" if requested.startswith("cuda") else requested, index=local_rank)
    backend = job.get("backend", "auto")
    if backend == "auto":
        backend = "nccl" if device.startswith("cuda") else "gloo"
    # a collective that waits longer than this for a peer fails on this rank (launch() puts DistConfig's
    # collective_timeout_s, default 600 s, in every job; torch's own default for gloo is 30 min)
    timeout_s = float(job["collective_timeout_s"])
    timeout = timedelta(seconds=timeout_s)
    if device.startswith("cuda"):
        torch.cuda.set_device(device)
        init_process_group(backend, device_id=torch.device(device), timeout=timeout)
    else:
        init_process_group(backend, timeout=timeout)
    ctx = RankContext(rank, world, local_rank, local_world, device, backend, socket.gethostname())
    ctx.say(f"process group: {backend}, a collective waits at most {timeout_s:g} s for its peers")
    return ctx


def gather_to_rank0(obj: Any) -> list[Any] | None:
    """Every rank's ``obj`` on rank 0 (None elsewhere)."""
    import torch.distributed as dist

    out: list[Any] | None = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
    dist.gather_object(obj, out, dst=0)
    return out
