"""Tensor parallelism (``tensor_parallel_size=N``, vLLM's flag): one model spread over N ranks, one process each.

How the model splits (Megatron's column/row scheme, as vLLM does it):

- attention: each rank holds ``num_heads / N`` query heads — its rows of q/k/v (column-parallel) and the matching
  columns of ``o_proj`` (row-parallel) — and the K/V heads those query heads read: ``num_kv_heads / N`` of them, or,
  when there are fewer K/V heads than ranks, the one K/V head its query heads share (replicated on ``N /
  num_kv_heads`` ranks). Each rank's KV cache holds only its own K/V heads;
- MLP: ``intermediate_size / N`` rows of gate/up and columns of down on each rank; an MoE layer splits every
  expert the same way (each rank runs every expert on its slice), the router and Qwen2-MoE's shared-expert gate
  are replicated, its shared expert split like a dense MLP;
- one all-reduce (sum) after ``o_proj`` and one after the MLP (the whole MoE block) in every layer; a bias of a
  row-parallel projection is added on rank 0 only, so that the sum adds it once;
- replicated: the embedding, the norms (Qwen3's q/k norms too), the LM head and the RoPE tables.

Processes: the engine's own process is rank 0 — the scheduler, the sampler and the HTTP server live there — and it
spawns ranks 1..N-1 (``multiprocessing`` spawn). Every rank runs ``torch.distributed`` (NCCL on CUDA for the model's
all-reduces, gloo on CPU; the step's integer inputs always go over gloo, host to host). Each step, rank 0 tells every
worker the step's shape through a pipe and broadcasts its packed input buffer once (``input_buffers``); each rank
then runs the same forward, so their collectives pair up. Workers compute no logits.

Failure: collectives time out (``COLLECTIVE_TIMEOUT_S``); a watchdog thread on rank 0 waits on the workers'
processes and, when one dies, records one line saying which and how, stops the engine (:class:`WorkerDiedError`
from the next or the current step) and tells whoever asked (``on_death``: the server exits). A worker leaves when
rank 0 is gone (its pipe closes, or its parent changes).
"""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import os
import signal
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from accelkit.core import AccelkitError
from accelkit.core.device import usable_cores
from accelkit.distributed.loopback import loopback_interface
from accelkit.distributed.process_group import destroy_process_group, init_process_group
from accelkit.serve.isolation import EngineDeadError, describe
from accelkit.serve.models.args import ModelArgs

if TYPE_CHECKING:
    import torch

    from accelkit.serve.config import EngineConfig

log = logging.getLogger("accelkit.serve")

#: seconds a rank waits in one collective (or at the rendezvous) for the others before it fails: a worker that is
#: alive but stuck fails the engine after this; a worker that dies is seen at once by the watchdog
COLLECTIVE_TIMEOUT_S = 300.0
_HELLO_TIMEOUT_S = 300.0  # a worker's interpreter start and imports, before it joins the process group
_JOIN_S = 10.0  # a worker told to stop gets this long before it is killed
_DEATH_GRACE_S = 2.0  # a failed collective waits this long for the watchdog's account of a worker's death


class WorkerDiedError(EngineDeadError, AccelkitError):
    """A tensor-parallel worker process died (or could not start): the engine cannot run any more step."""


# ---- sizes ----------------------------------------------------------------------------------------------
def _divisors(n: int) -> str:
    return ", ".join(str(d) for d in range(1, n + 1) if n % d == 0)


def _kv_splits(kv: int, size: int) -> bool:
    """``kv`` K/V heads fit ``size`` ranks: split evenly, or replicated when fewer (one divides the other)."""
    return not (kv % size if kv >= size else size % kv)


def check_tensor_parallel_size(size: int, args: ModelArgs) -> None:
    """ValueError naming the value when ``size`` ranks cannot split this model evenly."""
    if size == 1:
        return
    kv = args.num_kv_heads
    if args.num_heads % size:
        raise ValueError(f"tensor_parallel_size={size} does not divide num_attention_heads={args.num_heads} of this "
                         f"model; use one of {_divisors(args.num_heads)}")
    if not _kv_splits(kv, size):
        raise ValueError(f"tensor_parallel_size={size} and num_key_value_heads={kv} of this model: one must divide the "
                         f"other (K/V heads split, or replicated when fewer); use one of {_divisors(args.num_heads)} "
                         f"that does")
    widths = []
    if args.moe is None or len(args.moe.sparse_layers) < args.num_layers:
        widths.append(("intermediate_size", args.intermediate_size))
    if args.moe is not None:  # (Mixtral's experts are intermediate_size wide: the field its config.json has)
        expert_field = "intermediate_size" if args.architecture == "MixtralForCausalLM" else "moe_intermediate_size"
        widths.append((expert_field, args.moe.intermediate_size))
        if args.moe.shared_expert_intermediate_size is not None:
            widths.append(("shared_expert_intermediate_size", args.moe.shared_expert_intermediate_size))
    for name, width in dict(widths).items():
        if width % size:  # (the sizes every check here takes: the heads' and every width's)
            fits = [d for d in range(1, args.num_heads + 1) if not args.num_heads % d and _kv_splits(kv, d)
                    and not any(w % d for _, w in widths)]
            raise ValueError(f"tensor_parallel_size={size} does not divide {name}={width} of this model; use one of "
                             f"{', '.join(map(str, fits))}")


def check_tensor_parallel_ranks(size: int, device: str) -> None:
    """ValueError when this machine has fewer than ``size`` ranks to give: GPUs from ``device`` on, or CPU cores."""
    if size == 1:
        return
    if device.startswith("cuda"):
        import torch

        first = int(device.partition(":")[2] or 0)
        count = torch.cuda.device_count()
        if first + size > count:
            raise ValueError(f"tensor_parallel_size={size} needs {size} GPUs from {device} on; torch sees {count} "
                             f"(cuda:0 … cuda:{count - 1}); lower it to at most {count - first}")
        return
    cores = usable_cores()
    if size > cores:
        raise ValueError(f"tensor_parallel_size={size} exceeds the {cores} CPU cores this process may use (one rank "
                         f"per core at least); lower it to at most {cores}")


def rank_device(device: str, rank: int) -> str:
    """Rank ``rank``'s device: the GPU ``rank`` places after ``device`` (``cuda:1`` → cuda:1, cuda:2, …), or the CPU."""
    if not device.startswith("cuda"):
        return device
    return f"cuda:{int(device.partition(':')[2] or 0) + rank}"


def shard_args(args: ModelArgs, size: int) -> ModelArgs:
    """The model one rank holds: its share of the heads and of every MLP width (same layers, same hidden size)."""
    if size == 1:
        return args
    moe = args.moe
    if moe is not None:
        shared = moe.shared_expert_intermediate_size
        moe = replace(moe, intermediate_size=moe.intermediate_size // size,
                      shared_expert_intermediate_size=None if shared is None else shared // size)
    return replace(args, num_heads=args.num_heads // size, num_kv_heads=max(1, args.num_kv_heads // size),
                   intermediate_size=args.intermediate_size // size, moe=moe)


_COLUMN = ("q_proj", "gate_proj", "up_proj", "w1", "w3")  # output rows split
_ROW = ("o_proj", "down_proj", "w2")  # input columns split; the bias kept on rank 0


def shard_tensor(name: str, tensor: torch.Tensor, *, args: ModelArgs, rank: int, size: int) -> torch.Tensor:
    """Rank ``rank``'s part of the checkpoint tensor ``name`` (the full model's ``args``); replicated ones whole."""
    import torch

    if size == 1:
        return tensor
    module, kind = name.split(".")[-2:]
    if module in _COLUMN:
        return tensor.chunk(size, 0)[rank].clone()
    if module in ("k_proj", "v_proj"):
        kv = args.num_kv_heads
        if kv >= size:
            return tensor.chunk(size, 0)[rank].clone()
        head = rank * kv // size  # fewer K/V heads than ranks: the one this rank's query heads read
        return tensor[head * args.head_dim : (head + 1) * args.head_dim].clone()
    if module in _ROW:
        if kind == "bias":
            return tensor.clone() if rank == 0 else torch.zeros_like(tensor)
        return tensor.chunk(size, 1)[rank].clone()
    return tensor


# ---- the ranks' communication ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class StepHeader:
    """What a worker needs besides the packed buffer to run the step rank 0 prepared."""

    num_tokens: int
    num_seqs: int
    width: int
    num_decodes: int
    max_query_len: int
    graph_size: int | None


class RankComm:
    """One rank's side of the group: the model's all-reduce, the broadcast of a step's inputs, a minimum."""

    def __init__(self, rank: int, size: int, cpu_group: Any) -> None:
        self.rank, self.size = rank, size
        self.cpu_group = cpu_group  # gloo: host tensors (the default group itself on CPU)

    def all_reduce(self, x: torch.Tensor) -> None:
        import torch.distributed as dist

        dist.all_reduce(x)

    def min_int(self, value: int) -> int:
        import torch
        import torch.distributed as dist

        t = torch.tensor([value], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN, group=self.cpu_group)
        return int(t.item())

    def broadcast_inputs(self, buffer: torch.Tensor) -> None:
        """Rank 0's packed step inputs into ``buffer`` (a host tensor) on every rank."""
        import torch.distributed as dist

        dist.broadcast(buffer, src=0, group=self.cpu_group)


def loopback_store(size: int, timeout: timedelta) -> Any:
    """Rank 0's rendezvous store, listening on 127.0.0.1 only: torch's TCPStore binds every interface, so a
    server's ranks offered an unauthenticated port to the network (found in review). The socket is ours, handed
    to the store (``master_listen_fd``), which owns it from then on."""
    import socket

    import torch.distributed as dist

    sock = socket.create_server(("127.0.0.1", 0), backlog=max(128, size))
    port = sock.getsockname()[1]
    fd = sock.detach()
    try:
        return dist.TCPStore(  # type: ignore[attr-defined]
            "127.0.0.1", port, size, is_master=True, timeout=timeout, wait_for_workers=False, master_listen_fd=fd)
    except BaseException:
        os.close(fd)
        raise


@contextlib.contextmanager
def _loopback_transport() -> Iterator[None]:
    """gloo and NCCL's sockets on the loopback interface while the group forms: both bind the address the host name
    resolves to (a LAN address on most servers), and every rank is on this host. A user's own GLOO_SOCKET_IFNAME /
    NCCL_SOCKET_IFNAME is kept; the variables are restored after (the engine may live in a user's process)."""
    interface = loopback_interface()
    names = [] if interface is None else [
        n for n in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME") if n not in os.environ]
    for name in names:
        os.environ[name] = interface  # type: ignore[assignment]
    try:
        yield
    finally:
        for name in names:
            os.environ.pop(name, None)


def init_rank(rank: int, size: int, store_port: int, device: str, timeout_s: float, *, store: Any = None) -> RankComm:
    """Join the group: the default process group on gloo (CPU) or NCCL (CUDA), plus a gloo group for host tensors
    on CUDA — all of it on the loopback interface."""
    import torch.distributed as dist

    if dist.is_initialized():
        raise ValueError("tensor_parallel_size > 1 needs this process's default torch.distributed group, and one "
                         "is already running; start the engine outside a distributed job")
    timeout = timedelta(seconds=timeout_s)
    if store is None:
        store = dist.TCPStore(  # type: ignore[attr-defined]
            "127.0.0.1", store_port, size, is_master=False, timeout=timeout)
    cuda = device.startswith("cuda")
    if cuda:
        import torch

        torch.cuda.set_device(device)
    with _loopback_transport():
        init_process_group("nccl" if cuda else "gloo", store=store, rank=rank, world_size=size, timeout=timeout)
        cpu_group = dist.new_group(backend="gloo", timeout=timeout) if cuda else None
    return RankComm(rank, size, cpu_group)


def destroy_group() -> None:
    """Leave the default group, if this process joined one."""
    import torch.distributed as dist

    if dist.is_initialized():
        destroy_process_group()


class TensorParallelLeader(RankComm):
    """Rank 0: starts the workers, sends each step, watches the workers' processes, stops them."""

    def __init__(self, config: EngineConfig, *, device: str, max_model_len: int,
                 worker: Callable[..., None]) -> None:
        """``worker``: what each spawned rank runs (``tensor_parallel_worker.worker_main``: it builds a ModelRunner,
        which imports this module, so it is handed in rather than imported here)."""
        size = config.tensor_parallel_size
        self._procs: list[multiprocessing.process.BaseProcess] = []
        self._conns: list[multiprocessing.connection.Connection] = []
        self._closing = False
        self._greeted: set[int] = set()  # the ranks that said hello (started: their module imports were done)
        self._dead: str | None = None
        self._death_callbacks: list[Callable[[str], None]] = []
        self._lock = threading.Lock()
        store = loopback_store(size, timedelta(seconds=COLLECTIVE_TIMEOUT_S))
        ctx = multiprocessing.get_context("spawn")
        for rank in range(1, size):
            parent, child = ctx.Pipe()
            proc = ctx.Process(target=worker, name=f"accelkit-tp{rank}", daemon=True, args=(
                rank, size, store.port, config, rank_device(device, rank), max_model_len, child, os.getpid()))
            proc.start()
            child.close()
            self._procs.append(proc)
            self._conns.append(parent)
        self._finalizer = weakref.finalize(self, _release, self._procs, self._conns)  # (also when dropped unclosed)
        # the watchdog holds the leader weakly: a dropped engine (an LLM that goes out of scope) is collected, and
        # its finalizer stops the workers — a bound method kept it, and its workers, alive to the process's end
        threading.Thread(target=_watch, args=(weakref.ref(self), self._procs), name="accelkit-tp-watchdog",
                         daemon=True).start()
        try:
            for rank, conn in enumerate(self._conns, start=1):
                self._expect(conn, rank, "hello", _HELLO_TIMEOUT_S)
            comm = self._join(size, store, device)
        except BaseException:
            self.shutdown()
            raise
        super().__init__(0, size, comm.cpu_group)

    def _join(self, size: int, store: Any, device: str) -> RankComm:
        """Rank 0 joins the group while the watchdog watches the workers: a worker that dies before it joins (its
        device cannot be set, it is killed as it starts) fails the start at once — the rendezvous itself waits
        for every rank until COLLECTIVE_TIMEOUT_S, and the engine's start hung for 300 s (found in review). The
        join thread is left to that timeout; it holds nothing but the store."""
        joined: list[RankComm] = []
        failed: list[BaseException] = []

        def join() -> None:
            try:
                joined.append(init_rank(0, size, store.port, device, COLLECTIVE_TIMEOUT_S, store=store))
            except BaseException as exc:
                failed.append(exc)

        thread = threading.Thread(target=join, name="accelkit-tp-join", daemon=True)
        thread.start()
        while thread.is_alive():
            thread.join(0.05)
            if self._dead is not None and thread.is_alive():
                raise WorkerDiedError(self._dead)
        if failed:
            raise failed[0]
        return joined[0]

    def _expect(self, conn: multiprocessing.connection.Connection, rank: int, what: str, timeout_s: float) -> None:
        """Wait for ``what`` from a worker; WorkerDiedError if it dies, says otherwise or stays silent."""
        proc = self._procs[rank - 1]
        ready = multiprocessing.connection.wait([conn, proc.sentinel], timeout_s)
        if conn in ready:
            with contextlib.suppress(EOFError, OSError):
                msg = conn.recv()
                if msg[0] == what:
                    if what == "hello":
                        self._greeted.add(rank)
                    return
        raise self.error(None)

    # ---- failure ------------------------------------------------------------------------------------
    def _worker_ended(self, rank: int) -> None:
        """Worker ``rank`` ended: if the engine was not stopping it, record why and tell the callbacks."""
        if self._closing:
            return
        proc, conn = self._procs[rank - 1], self._conns[rank - 1]
        proc.join(1.0)
        code = proc.exitcode
        if code is not None and code < 0:
            how = f"was killed by {signal.Signals(-code).name}"
        else:
            how = f"exited with code {code}"
        reason = None
        with contextlib.suppress(EOFError, OSError):
            while conn.poll():
                msg = conn.recv()
                if msg[0] == "error":
                    reason = msg[1]
        if reason is None and rank not in self._greeted and code == 1:
            # (a script without the main guard: the spawned worker ran the script's top level again and failed
            # there, before it could say anything — "restart it" pointed the wrong way)
            reason = ("it failed while starting, before it could say why (its traceback is on stderr above); a script "
                      "that starts tensor parallelism must run it under `if __name__ == \"__main__\":` — each worker "
                      "is spawned and imports the script again")
        message = (f"tensor-parallel worker rank {rank} (pid {proc.pid}) {how}"
                   + (f": {reason}" if reason else "") + "; the engine stopped — restart it")
        with self._lock:
            self._dead = message
            callbacks = list(self._death_callbacks)
        for callback in callbacks:
            try:
                callback(message)
            except Exception as exc:
                log.warning("a worker-death callback failed: %s", describe(exc))

    def on_death(self, callback: Callable[[str], None]) -> None:
        """Call ``callback(message)`` (from the watchdog's thread) when a worker dies; at once if one has."""
        with self._lock:
            dead = self._dead
            if dead is None:
                self._death_callbacks.append(callback)
        if dead is not None:
            callback(dead)

    @property
    def dead(self) -> str | None:
        return self._dead

    def error(self, exc: BaseException | None, *, wait_s: float = _DEATH_GRACE_S) -> WorkerDiedError:
        """The engine-ending error for a failed step (``exc``, if any): the watchdog's account of a dead worker when
        there is one within ``wait_s``, else what failed."""
        deadline = time.monotonic() + wait_s
        while self._dead is None and time.monotonic() < deadline:
            time.sleep(0.02)
        if self._dead is not None:
            return WorkerDiedError(self._dead)
        what = describe(exc) if exc is not None else "a worker did not answer"
        message = f"tensor-parallel step failed ({what}); the engine stopped — restart it"
        with self._lock:  # the ranks are out of step for good: the next call fails at once, as after a worker died
            if self._dead is None:  # (it hung in the next collective until its timeout: found in review)
                self._dead = message  # (a worker's death the watchdog recorded meanwhile is the better account)
            return WorkerDiedError(self._dead)

    def check_alive(self) -> None:
        if self._dead is not None:
            raise WorkerDiedError(self._dead)
        if self._closing:
            raise WorkerDiedError("the tensor-parallel workers were shut down; the engine is stopped")

    # ---- a step ----------------------------------------------------------------------------------------
    def send_step(self, header: StepHeader, buffer: torch.Tensor) -> None:
        """Start the step on every worker: its shape through each pipe, then its inputs in one broadcast."""
        self.check_alive()
        try:
            for conn in self._conns:
                conn.send(("step", header))
            self.broadcast_inputs(buffer)
        except Exception as exc:
            raise self.error(exc) from exc

    def shutdown(self) -> None:
        """Stop the workers (each leaves the group itself) and leave the group; safe to call twice."""
        if self._closing:
            return
        self._closing = True
        self._finalizer()  # (runs once: not again when collected)


def _watch(leader: weakref.ref[TensorParallelLeader], procs: list[multiprocessing.process.BaseProcess]) -> None:
    """The watchdog's thread: wait for any worker to end, then tell the leader, if it is still there."""
    sentinels = {p.sentinel: rank for rank, p in enumerate(procs, start=1)}
    ended = multiprocessing.connection.wait(list(sentinels))
    alive = leader()
    if alive is not None:
        alive._worker_ended(sentinels[ended[0]])  # type: ignore[index]  # (wait returns the sentinels it was given)
    del alive


def _release(procs: list[Any], conns: list[multiprocessing.connection.Connection]) -> None:
    """Stop the workers, then leave the group: a dropped engine stayed in it, and the next engine in the process was
    refused ("one is already running": found in review)."""
    for conn in conns:
        with contextlib.suppress(OSError, ValueError):
            conn.send(("stop",))
    deadline = time.monotonic() + _JOIN_S
    for proc in procs:
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(1.0)
    for conn in conns:
        conn.close()
    with contextlib.suppress(Exception):
        destroy_group()
