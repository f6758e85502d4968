"""A tensor-parallel worker: ranks 1..N-1, each in a process that ``TensorParallelLeader`` spawns — join the group,
load this rank's shard, then run every step rank 0 sends until told to stop (``tensor_parallel.py`` says how the
model splits and how a failure is handled). A module of its own, above both ``tensor_parallel`` and
``model_runner``: the runner imports the former, and the worker builds a runner."""

from __future__ import annotations

import contextlib
import multiprocessing.connection
import os
import signal
import threading
import time
from pathlib import Path

import torch

from accelkit.serve import preflight
from accelkit.serve.config import EngineConfig
from accelkit.serve.heap import frozen_heap
from accelkit.serve.isolation import describe
from accelkit.serve.model_runner import ModelRunner
from accelkit.serve.models.args import ModelArgs
from accelkit.serve.tensor_parallel import COLLECTIVE_TIMEOUT_S, destroy_group, init_rank


def _watch_parent(parent_pid: int) -> None:
    """Leave when rank 0 is gone (a worker blocked in an NCCL collective would otherwise wait for its timeout)."""
    while os.getppid() == parent_pid:
        time.sleep(1.0)
    os._exit(1)


def worker_main(rank: int, size: int, store_port: int, config: EngineConfig, device: str, max_model_len: int,
                conn: multiprocessing.connection.Connection, parent_pid: int) -> None:
    """Rank ``rank``: join the group, load this rank's shard, then run every step rank 0 sends until told to stop."""
    threading.Thread(target=_watch_parent, args=(parent_pid,), daemon=True).start()
    # Ctrl-C and SIGTERM are rank 0's to handle: it drains its requests, then stops the workers (a SIGTERM to the
    # whole process group — systemd's default, a shell's kill %1 — killed a worker first, and a graceful stop
    # became a crash: found in review); a worker whose rank 0 is gone stops by itself (_watch_parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    code = 0
    try:
        if not device.startswith("cuda"):  # the cores are shared by the ranks
            torch.set_num_threads(max(1, torch.get_num_threads() // size))
        conn.send(("hello",))
        comm = init_rank(rank, size, store_port, device, COLLECTIVE_TIMEOUT_S)
        args = ModelArgs.from_config(preflight.read_config(Path(config.model)))
        runner = ModelRunner(config, args, max_model_len=max_model_len, device=device, tp=comm)
        with torch.inference_mode(), frozen_heap():  # (the shard and torch: never walked by a collection again)
            while True:
                msg = conn.recv()
                if msg[0] == "stop":
                    break
                runner.run_received(msg[1])
    except (EOFError, KeyboardInterrupt):  # rank 0 is gone: nothing to tell
        code = 1
    except BaseException as exc:
        code = 1
        with contextlib.suppress(Exception):
            conn.send(("error", describe(exc)))
    finally:
        with contextlib.suppress(Exception):
            conn.close()
    if code == 0:
        with contextlib.suppress(Exception):
            destroy_group()
    os._exit(code)  # no interpreter teardown racing gloo's threads (process_group's docstring)
