"""This rank's ``torch.distributed`` process group, started so that it can end before the interpreter does.

``torch.distributed.nn.functional`` binds the default group as a default argument when it is imported
(``def all_reduce(tensor, op=ReduceOp.SUM, group=group.WORLD)``). ``DistributedDataParallel`` imports it on
construction (through FSDP and ``_shard``), so with torch 2.11–2.15 the first DDP model built after
``init_process_group`` pins the default group for the life of the process: ``destroy_process_group`` unregisters it
but can never free it, and on gloo its worker threads (``pt_gloo_runloop``) then outlive the program. A worker
thread that still holds a finished collective when the program ends — a ``Future.then`` callback to drop, or the
Python object of a tensor whose last reference it held — asks for the GIL during interpreter finalization;
CPython ends such a thread with ``pthread_exit``, and the unwinding through torch's ``noexcept`` destructors calls
``std::terminate``: the rank dies with SIGABRT, "terminate called without an active exception", after its work is
done — only when the machine is busy enough to starve that thread (about 1 run in 25 of a PowerSGD test on a loaded
2-core machine). Imported before ``init_process_group``, the module binds ``None`` instead, ``destroy_process_group``
frees the group once the last DDP model using it is gone, and its threads are joined then — with the GIL released —
not at exit.

DDP's communication hooks are made safe on their own too (``grad_comm``: on gloo nothing of a hook runs on gloo's
threads); this module covers what no hook controls: the group's lifetime.
"""

from __future__ import annotations

from typing import Any


def init_process_group(backend: str, **kwargs: Any) -> None:
    """``torch.distributed.init_process_group(backend, **kwargs)``, with ``torch.distributed.nn`` imported first
    (the module docstring says why). Call it instead of torch's in a script that builds DDP models on gloo."""
    import torch.distributed as dist
    import torch.distributed.nn  # noqa: F401  # before init: its default arguments must bind no live group

    dist.init_process_group(backend, **kwargs)
