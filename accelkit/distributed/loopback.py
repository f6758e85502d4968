"""The loopback interface's name, for the variables that pin a transport to it (``GLOO_SOCKET_IFNAME``,
``NCCL_SOCKET_IFNAME``): a one-node launch's ranks and a tensor-parallel server's ranks all run on this host.
Imports no torch."""

from __future__ import annotations


def loopback_interface() -> str | None:
    """The name of the interface that holds 127.0.0.1 (``lo`` on Linux, ``lo0`` on macOS), if one does."""
    import psutil

    for name, addresses in psutil.net_if_addrs().items():
        if any(a.address == "127.0.0.1" for a in addresses):
            return str(name)
    return None
