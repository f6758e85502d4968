"""What the launcher checks and sets before torchrun starts, and how it ends on a signal — in this process, without a
launch: a static rendezvous port already taken on node 0 (a real listening socket), the ranks' gloo interface of a
one-node CPU launch, more CPU ranks than cores for the collective probe, `hw probe`'s launch flags without
--collectives, and SIGHUP / SIGQUIT handled as SIGTERM is (the launch's cleanup runs, then the signal goes on)."""

from __future__ import annotations

import signal
import socket

import pytest

from accelkit.core import UserError
from accelkit.core.device import usable_cores
from accelkit.distributed.collectives import CollectiveConfig, probe_collectives
from accelkit.distributed.launch import (
    DistConfig,
    Terminated,
    _stop_signals_raise,
    _store_port_in_use,
    check_endpoint,
    launch,
    worker_env,
)
from accelkit.distributed.loopback import loopback_interface
from tests.conftest import accelkit


def _static(port: int, node_rank: int = 0) -> DistConfig:
    return DistConfig(nproc_per_node=2, nnodes="2", node_rank=node_rank, rdzv_endpoint=f"127.0.0.1:{port}")


# ---- a static rendezvous port already in use on node 0 ------------------------------------------------------
def test_a_static_endpoint_in_use_on_node_0_is_one_line_before_torchrun():
    """It was torchrun's 1,759-character traceback, exit 1. A listener on 127.0.0.1 only still takes the port from
    torch's store, which binds every interface."""
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        with pytest.raises(UserError) as error:
            check_endpoint(_static(port))
        message = str(error.value)
        assert message.startswith(f"the rendezvous endpoint 127.0.0.1:{port} (--rdzv-endpoint): port {port} is "
                                  "already in use on this node (EADDRINUSE)"), message
        assert "\n" not in message and "another free port" in message
        job = {"task": "collectives", "device": "cpu"}  # never read: refused before torchrun
        with pytest.raises(UserError, match="EADDRINUSE"):
            launch(job, _static(port))
        check_endpoint(_static(port, node_rank=1))  # node 1 only connects to it
        check_endpoint(DistConfig(nproc_per_node=2))  # --standalone: torchrun picks a free port
    check_endpoint(_static(port))  # free again: no error (the check's own socket is closed)


def test_torchruns_store_error_is_the_same_line():
    """Torch's own failure (the port taken after the check) as it prints it, found among torchrun's last lines."""
    output = ["    result = agent.run()", "torch.distributed.DistNetworkError: The server socket has failed to listen "
              "on any local network address. port: 29411, useIpv6: false, code: -98, name: EADDRINUSE, message: "
              "address already in use"]
    assert _store_port_in_use(output, _static(29411)) == (
        "the rendezvous endpoint 127.0.0.1:29411 (--rdzv-endpoint): port 29411 is already in use on this node "
        "(EADDRINUSE), and this node's torchrun hosts the rendezvous store there — stop what listens on it (`ss "
        "-ltnp 'sport = :29411'`) or give every node another free port")
    assert _store_port_in_use([output[0], "RuntimeError: address already in use"], _static(29411)) is None


# ---- the ranks' environment ----------------------------------------------------------------------------------
def test_a_one_node_cpu_launch_keeps_gloo_on_the_loopback_interface():
    """gloo binds the address the host name resolves to (a LAN address on most servers): the ranks of a one-node CPU
    launch offered their ports to the network."""
    lo = loopback_interface()
    assert lo is not None and lo.startswith("lo")
    one_node = DistConfig(nproc_per_node=2)
    assert worker_env(one_node, {}, device="cpu")["GLOO_SOCKET_IFNAME"] == lo
    assert worker_env(one_node, {"GLOO_SOCKET_IFNAME": "eth9"}, device="cpu")["GLOO_SOCKET_IFNAME"] == "eth9"
    assert "GLOO_SOCKET_IFNAME" not in worker_env(one_node, {}, device="auto")  # a GPU launch: NCCL's business
    two_nodes = DistConfig(nproc_per_node=2, nnodes="2", node_rank=0, rdzv_endpoint="127.0.0.1:29400")
    assert "GLOO_SOCKET_IFNAME" not in worker_env(two_nodes, {}, device="cpu")  # the peers are elsewhere


# ---- the collective probe's processes and flags ------------------------------------------------------------
def test_the_collective_probe_refuses_more_cpu_ranks_than_cores():
    """As the bench does: the probe ran oversubscribed and stored that as this host's bus bandwidth."""
    cores = usable_cores()
    with pytest.raises(UserError) as error:
        probe_collectives(CollectiveConfig(device="cpu"), DistConfig(nproc_per_node=cores + 1), save=False)
    assert str(error.value) == (f"--nproc-per-node {cores + 1} exceeds the {cores} CPU cores this process may use; "
                                "a CPU rank needs a core of its own — give at most that many")
    proc = accelkit("hw", "probe", "--collectives", "--nproc-per-node", str(cores + 1), "--device", "cpu", "--quick",
                    "--no-save")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == f"error: {error.value}"


def test_hw_probe_refuses_nproc_per_node_without_collectives():
    """It was ignored: `hw probe --nproc-per-node 7` ran the one-process matmul probe and said nothing."""
    proc = accelkit("hw", "probe", "--nproc-per-node", "7", "--device", "cpu", "--quick", "--no-save")
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.strip() == ("error: --nproc-per-node applies to --collectives (the torchrun launch); add "
                                   "--collectives or drop it")


# ---- signals ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT], ids=lambda s: s.name)
def test_a_stop_signal_raises_in_the_launch_then_goes_to_the_previous_handler(sig):
    """A closed terminal (SIGHUP) or Ctrl-\\ (SIGQUIT) went straight to the default action: the launch's temporary
    directory stayed and torchrun's ranks were stopped only by accident."""
    seen: list[int] = []
    previous = signal.signal(sig, lambda signum, frame: seen.append(signum))
    try:
        mine = signal.getsignal(sig)
        with pytest.raises(Terminated, match=sig.name), _stop_signals_raise():
            signal.raise_signal(sig)  # (its Python handler runs before raise_signal returns)
            raise AssertionError("the signal did not raise")
        assert seen == [sig]  # passed on once, after the cleanup
        assert signal.getsignal(sig) is mine  # and the handler is back
    finally:
        signal.signal(sig, previous)


def test_an_ignored_hangup_stays_ignored():
    """Under nohup SIGHUP is ignored: the launch must not make it fatal."""
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        with _stop_signals_raise():
            assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
            signal.raise_signal(signal.SIGHUP)
        assert signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
    finally:
        signal.signal(signal.SIGHUP, previous)
