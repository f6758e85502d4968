"""A c10d rendezvous endpoint on this node (`--nproc-per-node 2 --rdzv-endpoint 127.0.0.1:PORT`) whose PORT is held by
a process that is not a rendezvous store: torchrun could not host the store, joined the port as a client and waited
for ever (the bench printed "still running" for minutes; torchrun alone was still waiting after 450 s). Now one line
naming the endpoint, exit 2, before torchrun starts — and a port held by a real store (another agent of the same job
on this machine) is still accepted."""

from __future__ import annotations

import socket
from datetime import timedelta

import pytest

from accelkit.core import UserError
from accelkit.distributed.launch import DistConfig, check_endpoint


def test_a_c10d_endpoint_held_by_a_rendezvous_store_is_accepted():
    from torch.distributed import TCPStore

    store = TCPStore("127.0.0.1", 0, is_master=True, multi_tenant=True, timeout=timedelta(seconds=30))
    check_endpoint(DistConfig(nproc_per_node=2, rdzv_endpoint=f"127.0.0.1:{store.port}"))  # no error


def test_a_c10d_endpoint_held_by_another_program_is_refused_in_one_line():
    """A plain socket that listens, accepts and never answers: not a store (the CLI prints the UserError's line,
    exit 2)."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(UserError) as error:
            check_endpoint(DistConfig(nproc_per_node=2, rdzv_endpoint=f"127.0.0.1:{port}"))
    assert str(error.value).startswith(f"the rendezvous endpoint 127.0.0.1:{port} (--rdzv-endpoint): port {port} on "
                                       "this node is held by a process that is not a torch rendezvous store"), error
