"""A static rendezvous (`--nnodes 1 --node-rank 0 --rdzv-endpoint HOST:PORT`) whose PORT is already in use on node 0
(a real listening socket): it was torchrun's 1,759-character traceback in one error line, exit 1. Now one line that
names the endpoint and EADDRINUSE, exit 2 — refused before torchrun starts, and the same line when it is torchrun
that finds the port taken (its real output; no rank starts, so this costs one torchrun start-up)."""

from __future__ import annotations

import socket

import pytest

from accelkit.core import UserError
from accelkit.distributed.launch import DistConfig, _launch
from tests.conftest import accelkit

BENCH = ("bench", "resnet", "--size", "tiny", "--batch-size", "2", "--image-size", "32", "--device", "cpu",
         "--quick", "--no-probe", "--no-predict", "--no-save", "--nproc-per-node", "2", "--nnodes", "1",
         "--node-rank", "0")


def test_the_cli_refuses_a_taken_port_in_one_line():
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        proc = accelkit(*BENCH, "--rdzv-endpoint", f"127.0.0.1:{port}")
    assert proc.returncode == 2 and proc.stdout == "", proc.stderr[-3000:]
    (line,) = proc.stderr.strip().splitlines()[-1:]
    assert line.startswith(f"error: the rendezvous endpoint 127.0.0.1:{port} (--rdzv-endpoint): port {port} is "
                           "already in use on this node (EADDRINUSE)"), line
    assert "DistNetworkError" not in proc.stderr and "Traceback" not in proc.stderr  # torchrun never started


def test_torchruns_own_failure_on_a_taken_port_is_the_same_line():
    """The port taken after the check (or an endpoint the check does not cover): torchrun's DistNetworkError,
    read from its output. ``_launch`` is the launch without the up-front check."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        config = DistConfig(nproc_per_node=2, nnodes="1", node_rank=0, rdzv_endpoint=f"127.0.0.1:{port}")
        job = {"task": "collectives", "device": "cpu"}  # never reaches a rank
        with pytest.raises(UserError) as error:
            _launch(job, config, on_line=None, timeout_s=120)
    assert str(error.value).startswith(f"the rendezvous endpoint 127.0.0.1:{port} (--rdzv-endpoint): port {port} "
                                       "is already in use on this node (EADDRINUSE)"), error.value
