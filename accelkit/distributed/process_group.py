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
frees the group once the last DDP model using it is gone, and its threads are joined then, not at exit.

Freed, the group joins its threads in ``~ProcessGroupGloo`` — and that runs with the GIL held, whichever Python
object drops the last reference (a DDP model's reducer, or ``destroy_process_group`` itself). A gloo thread drops the
collective it just finished *after* the caller's ``wait`` returned, and dropping the Python object of a tensor the
collective held needs the GIL: when that thread was starved until the caller reached the destructor, each waits for
the other forever (py-spy: the main thread in ``std::thread::join`` under ``~Reducer``, a ``pt_gloo_runloop`` thread
in ``gil_scoped_acquire`` under ``~AsyncAllgatherWork``; 2 of about 100 runs of the PowerSGD test on a loaded 2-core
machine). :func:`destroy_process_group` therefore first waits — with the GIL released — until every gloo thread of
this process is idle, blocked on its empty work queue (Linux: read from ``/proc/self/task/*/syscall``), and only
then destroys the group; with no work left, nothing after that needs one of those threads to take the GIL.

DDP's communication hooks are made safe on their own too (``grad_comm``: on gloo nothing of a hook runs on gloo's
threads); this module covers what no hook controls: the group's lifetime.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

#: x86-64 and arm64 Linux's futex syscall number (what an idle gloo thread is blocked in), per architecture
_FUTEX = {"x86_64": 202, "aarch64": 98}
_FUTEX_WAIT_BITSET = 9  # the op glibc's pthread_cond_wait uses (with the PRIVATE / CLOCK_REALTIME flags above 0x7f)


def init_process_group(backend: str, **kwargs: Any) -> None:
    """``torch.distributed.init_process_group(backend, **kwargs)``, with ``torch.distributed.nn`` imported first
    (the module docstring says why). Call it instead of torch's in a script that builds DDP models on gloo."""
    import torch.distributed as dist
    import torch.distributed.nn  # noqa: F401  # before init: its default arguments must bind no live group

    dist.init_process_group(backend, **kwargs)


def _gloo_thread_states() -> list[str] | None:
    """Each ``pt_gloo_runloop`` thread of this process: "idle" (in ``pthread_cond_wait`` with no timeout — gloo's wait
    for work; a thread waiting for the GIL waits with one), else "busy". None where it cannot be read (not Linux)."""
    import platform

    futex = _FUTEX.get(platform.machine())
    tasks = Path("/proc/self/task")
    if futex is None or not tasks.is_dir():
        return None
    states = []
    for task in tasks.iterdir():
        try:
            if (task / "comm").read_text().strip() != "pt_gloo_runloop":
                continue
            fields = (task / "syscall").read_text().split()
        except OSError:  # the thread ended (or this kernel hides it): nothing of it to wait for
            continue
        idle = (len(fields) > 4 and fields[0] == str(futex) and int(fields[2], 16) & 0x7F == _FUTEX_WAIT_BITSET
                and int(fields[4], 16) == 0)
        states.append("idle" if idle else "busy")
    return states


def wait_for_idle_gloo_threads(timeout_s: float = 10.0) -> bool:
    """Sleep (GIL released) until every gloo thread is idle twice in a row, 5 ms apart; False after ``timeout_s``
    (or where the threads cannot be read), when destroying the group takes its chances as torch's own does."""
    deadline = time.monotonic() + timeout_s
    settled = 0
    while time.monotonic() < deadline:
        states = _gloo_thread_states()
        if states is None:
            return False
        settled = settled + 1 if all(s == "idle" for s in states) else 0
        if settled == 2:
            return True
        time.sleep(0.005)
    return False


def destroy_process_group(group: Any = None) -> None:
    """``torch.distributed.destroy_process_group(group)`` once gloo's threads have put down their last collective
    (the module docstring says why). Call it instead of torch's, after the group's last collective."""
    import torch.distributed as dist

    wait_for_idle_gloo_threads()
    dist.destroy_process_group(group)
