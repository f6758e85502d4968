"""Launch a job on every rank through torchrun (``python -m torch.distributed.run``).

The rendezvous is torchrun's, chosen from the flags:

- one node, no endpoint → ``--standalone`` (torchrun's c10d store on a free port; nothing hard-coded);
- a fixed ``--nnodes M`` with ``--node-rank R`` → static rendezvous at ``--rdzv-endpoint HOST:PORT``
  (the address of node 0; every node runs the same command with its own rank; node 0's torchrun hosts the store
  there, so a PORT already in use on node 0 is refused before torchrun starts: :func:`check_endpoint`);
- otherwise (``--nnodes M`` without a rank, or elastic ``--nnodes MIN:MAX``) → c10d rendezvous at the
  endpoint under ``--rdzv-id``; ranks are assigned when the nodes meet, and torchrun's elastic agent
  restarts the worker group (``--max-restarts``) when membership changes.

The rendezvous store is torch's TCPStore, unauthenticated, and it listens on **every interface** (torch binds ``::``,
or ``0.0.0.0``, whatever host it is given) — on one node too, ``--standalone`` included: anyone who can reach the
host can reach it while the launch runs. The ranks' own gloo sockets of a one-node CPU launch are kept on the
loopback interface (``GLOO_SOCKET_IFNAME``, :func:`worker_env`); the store's port is the user's to firewall.

The job travels as a JSON file; global rank 0 writes the result document to ``job['out']`` after the job's
last barrier (so it proves every rank finished), and may keep a partial one at ``job['progress']`` as it goes
(a bench: the variants stored so far), which is what Ctrl-C hands back (:class:`LaunchInterrupted`). On a
multi-node run only the node that hosts global rank 0 gets those files; the other nodes' launchers return
``None`` (the result is stored on that node).
"""

from __future__ import annotations

import contextlib
import errno
import json
import math
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import Any, Literal

import psutil

from accelkit.core import AccelkitError, UserError
from accelkit.core.device import usable_cores
from accelkit.core.spec import Spec, spec_field
from accelkit.distributed.loopback import loopback_interface
from accelkit.distributed.rank_failures import failed_ranks, failure_message

WORKER_MODULE = "accelkit.distributed.worker"
#: seconds a rank waits in one collective for its peers when ``collective_timeout_s`` is not given (torch's own
#: default is 30 min for gloo, 10 min for NCCL)
DEFAULT_COLLECTIVE_TIMEOUT_S = 600.0
#: the longest collective timeout taken: a week is past any real wait, and torch converts it to milliseconds
MAX_COLLECTIVE_TIMEOUT_S = 7 * 24 * 3600.0


@dataclass(frozen=True, slots=True, kw_only=True)
class DistConfig(Spec):
    """Where the ranks run and how the model is sharded across them."""

    nproc_per_node: int = spec_field(1, min=1, doc="Processes per node (one per GPU; on a CPU, per socket or core group).")
    nnodes: str = spec_field("1", doc="Nodes: N, or MIN:MAX for torchrun's elastic mode (c10d rendezvous).")
    node_rank: int | None = spec_field(
        None, min=0, doc="This node's rank with a fixed --nnodes (static rendezvous); None: assigned at rendezvous.")
    rdzv_endpoint: str | None = spec_field(
        None, doc="HOST:PORT every node can reach (node 0, or a c10d store); None on one node (--standalone).")
    rdzv_id: str = spec_field("accelkit", doc="Job id, the same on every node of one run (c10d rendezvous).")
    max_restarts: int = spec_field(0, min=0, doc="Worker-group restarts torchrun allows (elastic membership changes).")
    zero: Literal[0, 2, 3] = spec_field(
        0, doc="0: DDP; 2: FSDP2 fully_shard(reshard_after_forward=False); 3: fully_shard(reshard_after_forward=True).")
    backend: Literal["auto", "gloo", "nccl"] = spec_field("auto", doc="auto: NCCL on CUDA/ROCm, gloo on CPU.")
    collective_timeout_s: float | None = spec_field(
        None, min=1.0, max=MAX_COLLECTIVE_TIMEOUT_S,
        doc="Seconds a rank waits in one collective (or in setting up the process group) for its peers before it "
            "fails (1 to 604800; not given: 600). Raise it when some ranks legitimately lag (a big model's first FSDP "
            "all-gather, a slow checkpoint load); lower it to have a hang fail sooner.")

    def validate(self) -> None:
        lo, hi = self.nnodes_range
        if self.rdzv_endpoint is None and hi > 1:
            raise ValueError(f"nnodes={self.nnodes!r} needs rdzv_endpoint HOST:PORT (a node every node can reach)")
        if self.rdzv_endpoint is not None:
            host, sep, port = self.rdzv_endpoint.rpartition(":")
            # ASCII digits only: str.isdigit() takes '²' (int() then failed with a bare "invalid literal") and '٢٩٤٠٠'
            # (int() took it, and torchrun failed on it with a traceback; found in a hunt)
            if not sep or not host or not (port.isascii() and port.isdigit()):
                raise ValueError(f"rdzv_endpoint={self.rdzv_endpoint!r} is not valid; expected HOST:PORT")
            if not 1 <= int(port) <= 65535:
                raise ValueError(f"rdzv_endpoint={self.rdzv_endpoint!r} has port {int(port)}, out of range; expected "
                                 "HOST:PORT with PORT 1..65535")
        if self.node_rank is not None:
            if lo != hi:
                raise ValueError(f"node_rank applies to a fixed nnodes (static rendezvous); with nnodes={self.nnodes!r}"
                                 " (elastic) torchrun assigns ranks when the nodes meet — drop node_rank")
            if self.node_rank >= hi:
                raise ValueError(f"node_rank={self.node_rank} is out of range; expected 0..{hi - 1} for nnodes={hi}")

    @property
    def nnodes_range(self) -> tuple[int, int]:
        """(min, max) nodes; equal unless elastic."""
        lo, sep, hi = self.nnodes.partition(":")
        try:
            low, high = int(lo), int(hi) if sep else int(lo)
        except ValueError:
            raise ValueError(f"nnodes={self.nnodes!r} is not valid; expected N or MIN:MAX") from None
        if low < 1 or high < low:
            raise ValueError(f"nnodes={self.nnodes!r} is out of range; expected 1 <= MIN <= MAX")
        return low, high

    @property
    def effective_collective_timeout_s(self) -> float:
        """What each rank gives ``init_process_group`` as its ``timeout``."""
        return DEFAULT_COLLECTIVE_TIMEOUT_S if self.collective_timeout_s is None else self.collective_timeout_s

    @property
    def is_elastic(self) -> bool:
        lo, hi = self.nnodes_range
        return lo != hi

    @property
    def rendezvous(self) -> str:
        """standalone, static or c10d."""
        if self.rdzv_endpoint is None:
            return "standalone"
        return "static" if self.node_rank is not None else "c10d"


def torchrun_command(config: DistConfig, *args: str, module: str = WORKER_MODULE,
                     python: str = sys.executable, log_dir: str | None = None) -> list[str]:
    """The torchrun command line that starts ``python -m module *args`` on every rank of this node (with
    ``log_dir``: torchrun's ``--log-dir``, where each rank's error file is written)."""
    cmd = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(config.nproc_per_node),
           "--nnodes", config.nnodes]
    if log_dir is not None:
        cmd += ["--log-dir", log_dir]
    if config.rendezvous == "standalone":
        cmd.append("--standalone")
    elif config.rendezvous == "static":
        cmd += ["--rdzv-backend", "static", "--rdzv-endpoint", str(config.rdzv_endpoint),
                "--node-rank", str(config.node_rank)]
    else:
        cmd += ["--rdzv-backend", "c10d", "--rdzv-endpoint", str(config.rdzv_endpoint), "--rdzv-id", config.rdzv_id]
    if config.max_restarts:
        cmd += ["--max-restarts", str(config.max_restarts)]
    return [*cmd, "-m", module, *args]


def worker_env(config: DistConfig, base: dict[str, str] | None = None, *, device: str = "auto") -> dict[str, str]:
    """The ranks' environment (``device``: the job's, ``cpu`` or ``auto``). torchrun sets OMP_NUM_THREADS=1 when it is
    unset; on a CPU that starves a rank of the cores it has, so give each local rank an equal share of this process's
    usable cores. A one-node CPU launch's gloo sockets go on the loopback interface (``GLOO_SOCKET_IFNAME``): gloo
    binds the address the host name resolves to, a LAN address on most servers, and every rank is on this host — the
    ranks offered their ports to the network (found in review). A user's own GLOO_SOCKET_IFNAME is kept."""
    env = dict(os.environ if base is None else base)
    if "OMP_NUM_THREADS" not in env:
        usable = usable_cores()
        env["OMP_NUM_THREADS"] = str(max(1, usable // config.nproc_per_node))
    one_node_cpu = device == "cpu" and config.nnodes_range == (1, 1)
    if one_node_cpu and "GLOO_SOCKET_IFNAME" not in env and (interface := loopback_interface()) is not None:
        env["GLOO_SOCKET_IFNAME"] = interface
    return env


def check_processes(nproc_per_node: int, device: str) -> None:
    """One process per GPU, or per CPU core this process may use (``device``: resolved, ``cpu`` or ``cuda…``): more
    ranks than that share cores, and what they measure is the oversubscription."""
    if device.startswith("cuda"):
        import torch  # (lazy: only a GPU launch asks torch, and this module imports without it)

        if nproc_per_node > torch.cuda.device_count():
            raise UserError(f"--nproc-per-node {nproc_per_node} exceeds the {torch.cuda.device_count()} GPUs "
                            "this node has; use one process per GPU")
    elif nproc_per_node > (cores := usable_cores()):
        raise UserError(f"--nproc-per-node {nproc_per_node} exceeds the {cores} CPU cores this process may use; "
                        "a CPU rank needs a core of its own — give at most that many")


def check_rdzv_id(config: DistConfig) -> None:
    """``--rdzv-id`` names the job only at a c10d rendezvous: torchrun's ``--standalone`` draws its own id and a static
    rendezvous has none, so the launch command carries it only there. Given to another rendezvous it was dropped
    without a word (found in a hunt): a user who set a per-job id to keep two jobs apart had nothing keeping them."""
    if config.rdzv_id == DistConfig().rdzv_id or config.rendezvous == "c10d":
        return
    why = ("this launch is one node's --standalone rendezvous (no --rdzv-endpoint), which draws its own id — drop "
           "--rdzv-id, or give --rdzv-endpoint HOST:PORT for a c10d rendezvous" if config.rendezvous == "standalone"
           else "with --node-rank the rendezvous is static, where nodes meet by their ranks and no id is used — drop "
                "--rdzv-id, or drop --node-rank for a c10d rendezvous")
    raise UserError(f"--rdzv-id {config.rdzv_id} applies to a c10d rendezvous (--rdzv-endpoint without --node-rank); "
                    f"{why}")


def check_endpoint(config: DistConfig) -> None:
    """Node 0 of a static rendezvous hosts its store: torchrun's TCPStore listens on the endpoint's PORT on every
    interface, whatever HOST names. A PORT already in use there was a 1,759-character torchrun traceback (found in
    review): bind it as torch will (``::`` dual-stack, else ``0.0.0.0``; SO_REUSEADDR, so a closed connection's
    TIME_WAIT does not count) and say so in one line. Only EADDRINUSE is refused here; any other failure is left to
    torchrun's own error."""
    check_endpoint_host(config)
    if config.rendezvous == "c10d":
        _check_c10d_endpoint(config)
    if config.rendezvous != "static" or config.node_rank != 0:
        return
    endpoint = str(config.rdzv_endpoint)
    port = int(endpoint.rpartition(":")[2])
    if _port_in_use(port):
        raise UserError(_endpoint_in_use(endpoint, port))


def check_endpoint_host(config: DistConfig) -> None:
    """The ``--rdzv-endpoint`` HOST must resolve on this node: every node's torchrun connects to it (node 0's ranks
    too, through MASTER_ADDR). A HOST that does not (a typo, a short name outside the search domains) made torchrun
    retry its connection with a warning every few seconds, for as long as the launch was let run (minutes; and a
    name no resolver takes, ``a..b``, was an internal error; found in a hunt): say so in one line before it starts."""
    if config.rdzv_endpoint is None:
        return
    endpoint = config.rdzv_endpoint
    host = endpoint.rpartition(":")[0].strip("[]")
    try:
        socket.getaddrinfo(host, None)
    except (OSError, UnicodeError) as e:  # socket.gaierror; UnicodeError: a name IDNA cannot encode
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        raise UserError(f"--rdzv-endpoint {endpoint}: the host {host!r} does not resolve on this node ({why}), and "
                        "torchrun would keep retrying it instead of failing — give node 0's (or the c10d store's) host name or IP "
                        "address as every node resolves it") from None


def _port_in_use(port: int) -> bool:
    """Whether binding ``port`` as torch's TCPStore binds it (``::`` dual-stack, else ``0.0.0.0``; SO_REUSEADDR) fails
    with EADDRINUSE; any other failure is left to torchrun's own error."""
    dualstack = socket.has_dualstack_ipv6()
    try:
        socket.create_server(("", port), family=socket.AF_INET6 if dualstack else socket.AF_INET,
                             dualstack_ipv6=dualstack).close()
    except OSError as e:
        return e.errno == errno.EADDRINUSE
    return False


#: seconds a store on a c10d endpoint's taken port gets to answer as one (:func:`_check_c10d_endpoint`)
STORE_PROBE_TIMEOUT_S = 5.0
#: a TCPStore client against ``host port``; prints ``ready`` once torch is imported, so the deadline counts the connect
_STORE_PROBE = ("import sys, datetime\nfrom torch.distributed import TCPStore\nprint('ready', flush=True)\n"
                "TCPStore(sys.argv[1], int(sys.argv[2]), is_master=False, multi_tenant=True, "
                "timeout=datetime.timedelta(seconds=5))\nprint('store', flush=True)\n")


def _is_this_host(host: str) -> bool:
    """Whether ``host`` names this machine (as torchrun's c10d backend decides whether it hosts the store)."""
    host = host.strip("[]")
    if host == "localhost" or host == socket.gethostname():
        return True
    try:
        addresses = {str(info[4][0]) for info in socket.getaddrinfo(host, None)}
    except OSError:
        return False
    local = {a.address.split("%")[0] for nic in psutil.net_if_addrs().values() for a in nic}
    return any(a.startswith("127.") or a == "::1" or a in local for a in addresses)


def _check_c10d_endpoint(config: DistConfig) -> None:
    """A c10d endpoint on this machine whose port is taken by something other than a rendezvous store: torchrun
    cannot host the store there, falls back to joining it as a client, and that client waits for an answer that never
    comes — the launch hung, silently, for as long as it was let run (over 7 minutes; found in review). A port held by
    a store (another agent of the same job on this machine) is legitimate: ask it, as a TCPStore client in a
    subprocess that is killed past :data:`STORE_PROBE_TIMEOUT_S` (torch's client does not time out on its own)."""
    endpoint = str(config.rdzv_endpoint)
    host, _, port_text = endpoint.rpartition(":")
    port = int(port_text)
    if not _is_this_host(host) or not _port_in_use(port):
        return
    probe = subprocess.Popen([sys.executable, "-c", _STORE_PROBE, host.strip("[]"), str(port)], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        assert probe.stdout is not None
        lines = _read_lines(probe)
        answered = False
        with contextlib.suppress(queue.Empty):
            if lines.get(timeout=120) == "ready":  # torch's import: not the store's to answer for
                answered = lines.get(timeout=STORE_PROBE_TIMEOUT_S) == "store"
    finally:
        _signal_group(probe.pid, signal.SIGKILL)
        probe.wait()
        if probe.stdout is not None:
            probe.stdout.close()
    if not answered:
        raise UserError(
            f"the rendezvous endpoint {endpoint} (--rdzv-endpoint): port {port} on this node is held by a process "
            f"that is not a torch rendezvous store (it did not answer as one within {STORE_PROBE_TIMEOUT_S:g} s), "
            f"and torchrun would wait for it without end — stop what listens on it (`ss -ltnp 'sport = :{port}'`) "
            "or give every node another free port")


def _endpoint_in_use(endpoint: str | None, port: int) -> str:
    where = f"the rendezvous endpoint {endpoint} (--rdzv-endpoint)" if endpoint else "the rendezvous store"
    return (f"{where}: port {port} is already in use on this node (EADDRINUSE), and this node's torchrun hosts the "
            f"rendezvous store there — stop what listens on it (`ss -ltnp 'sport = :{port}'`) or give every node "
            "another free port")


#: torchrun's line when its store could not listen (torch.distributed.DistNetworkError … name: EADDRINUSE …)
_STORE_PORT_IN_USE = re.compile(r"DistNetworkError\b.*\bport: (\d+)\b.*\bEADDRINUSE\b")


def _store_port_in_use(output: list[str], config: DistConfig) -> str | None:
    """The one-line error for a torchrun that failed because its store's port was taken (another process took it
    after :func:`check_endpoint`, or an endpoint it does not check), or None."""
    for line in reversed(output):
        if match := _STORE_PORT_IN_USE.search(line):
            return _endpoint_in_use(config.rdzv_endpoint, int(match.group(1)))
    return None


#: lines of torchrun's output a LaunchResult keeps
OUTPUT_TAIL_LINES = 60


@dataclass(slots=True)
class LaunchResult:
    """What came back: rank 0's document (None when rank 0 ran on another node) and torchrun's output tail."""

    document: dict[str, Any] | None
    command: list[str]
    output_tail: list[str]
    #: a rank failed after every rank had finished the job (its document is whole): the failure, as a warning
    teardown_error: str | None = None


#: seconds torchrun gets, after SIGTERM, to stop its ranks before every process of the launch is SIGKILLed
STOP_GRACE_S = 15.0


class LaunchInterrupted(KeyboardInterrupt):
    """Ctrl-C stopped a launch; torchrun and every rank have been stopped. ``document``: rank 0's last word — its
    whole document when it had written it, else its latest progress document (a bench: the variants it stored),
    else None. A KeyboardInterrupt, so that a caller with nothing to keep is interrupted as before."""

    def __init__(self, document: dict[str, Any] | None):
        super().__init__()
        self.document = document

    def __reduce__(self) -> tuple[type[LaunchInterrupted], tuple[dict[str, Any] | None]]:
        """Picklable with its document (a process pool hands a worker's exception back pickled)."""
        return type(self), (self.document,)


class LaunchFailed(AccelkitError):
    """The ranks failed before rank 0 wrote its document (the message names every failed rank). ``document``: rank 0's
    latest progress document (a bench: the variants it had stored before the failure), or None — kept by the caller,
    as :class:`LaunchInterrupted`'s is."""

    def __init__(self, message: str, document: dict[str, Any] | None = None):
        super().__init__(message)
        self.document = document

    def __reduce__(self) -> tuple[type[LaunchFailed], tuple[str, dict[str, Any] | None]]:
        """Picklable with its document (a process pool hands a worker's exception back pickled)."""
        return type(self), (str(self), self.document)


class Terminated(BaseException):
    """SIGTERM, SIGHUP or SIGQUIT arrived while a launch ran (raised by the handler ``launch`` installs). A
    BaseException, like KeyboardInterrupt: no ``except Exception`` on the way out may swallow it."""


def launch(job: dict[str, Any], config: DistConfig, *, on_line: Callable[[str], None] | None = None,
           timeout_s: float | None = None) -> LaunchResult:
    """Run ``job`` (a JSON-ready dict the worker understands) on every rank; wait for torchrun.

    torchrun's and the ranks' output (stdout and stderr, merged) goes line by line to ``on_line``, never
    to this process's stdout (which `--json` keeps for the one document). A failed rank makes torchrun
    stop the group and exit non-zero: that is an AccelkitError naming every failed rank with its error, the
    first failure first (``rank_failures.py``) — unless every rank had finished the job (rank 0 wrote its
    document after the last barrier): then the document comes back with the failure in ``teardown_error``. Past ``timeout_s`` seconds the launch is stopped and that is an
    AccelkitError naming the timeout; Ctrl-C is :class:`LaunchInterrupted`, with what rank 0 had written. However
    the launch ends — failure, timeout, Ctrl-C, SIGTERM, SIGHUP, SIGQUIT — torchrun and every rank are stopped
    (SIGTERM, then SIGKILL after ``STOP_GRACE_S``) and the job's temporary directory is removed; such a signal is then
    handed to the handler that was installed before (by default: this process ends). A static rendezvous whose port is
    taken on node 0 is a UserError in one line, before torchrun starts (:func:`check_endpoint`) or from its output."""
    check_timeouts(config, timeout_s)
    check_rdzv_id(config)
    check_endpoint(config)
    with _stop_signals_raise():
        return _launch(job, config, on_line=on_line, timeout_s=timeout_s)


def check_timeouts(config: DistConfig, timeout_s: float | None) -> None:
    """The launch's ``timeout_s`` bounds the whole launch (torchrun's start, the rendezvous, every collective and the
    work between them); ``config.collective_timeout_s`` bounds one wait inside it. Given both, the launch's must be the
    longer: else the collective timeout could never fire, and a hang would end as "the ranks did not finish" instead of
    the ranks' own error naming the collective that waited. Without a collective timeout (600 s then) a shorter
    ``timeout_s`` is a whole-job budget and simply stops the launch first."""
    if timeout_s is None:
        return
    if not (math.isfinite(timeout_s) and timeout_s > 0):
        raise ValueError(f"timeout_s={timeout_s!r} is not valid; expected a positive number of seconds, or None for "
                         "no limit")
    if config.collective_timeout_s is not None and timeout_s <= config.collective_timeout_s:
        raise ValueError(
            f"timeout_s={timeout_s:g} s (the whole launch) is not longer than collective_timeout_s="
            f"{config.collective_timeout_s:g} s (one collective's wait for its peers): the launch would be stopped "
            "before a hung collective could fail and be named; give timeout_s above collective_timeout_s, with room "
            "for torchrun's start and the work between collectives, or lower collective_timeout_s")


def _launch(job: dict[str, Any], config: DistConfig, *, on_line: Callable[[str], None] | None,
            timeout_s: float | None) -> LaunchResult:
    with tempfile.TemporaryDirectory(prefix="accelkit-dist-") as tmp:
        job_path, out_path, log_dir = Path(tmp) / "job.json", Path(tmp) / "result.json", Path(tmp) / "logs"
        progress_path = Path(tmp) / "progress.json"
        job_path.write_text(json.dumps({**job, "out": str(out_path), "progress": str(progress_path),
                                        "collective_timeout_s": config.effective_collective_timeout_s}))
        # --log-dir: the ranks' error files (TORCHELASTIC_ERROR_FILE) land here, and go with the directory
        cmd = torchrun_command(config, str(job_path), log_dir=str(log_dir))
        output: list[str] = []  # all of it: torchrun's failure summary can sit above a long traceback
        # its own session: torchrun and anything left in its process group can be signalled at once (the ranks
        # get sessions of their own from torchrun; _stop snapshots them as descendants)
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1,
                                env=worker_env(config, device=str(job.get("device", "auto"))), start_new_session=True)
        try:
            lines = _read_lines(proc)
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            while True:
                try:
                    line = lines.get(timeout=None if deadline is None else max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    raise AccelkitError(
                        f"the ranks did not finish within timeout_s={timeout_s:g} s (a hung rank, or a peer it waits "
                        f"for); torchrun and every rank were stopped — raise timeout_s if the job needs longer"
                    ) from None
                if line is None:
                    break
                output.append(line)
                if on_line is not None:
                    on_line(line)
            rc = proc.wait()
        except KeyboardInterrupt:
            _stop(proc)  # every rank has ended: what rank 0 wrote last is its last word
            raise LaunchInterrupted(_document(out_path) or _document(progress_path)) from None
        finally:
            _stop(proc)
        document = _document(out_path)
        if rc == 0:
            return LaunchResult(document, cmd, output[-OUTPUT_TAIL_LINES:])
        if document is None and (in_use := _store_port_in_use(output, config)) is not None:
            raise UserError(in_use)  # the user's endpoint, not a rank: one line, not torchrun's traceback
        error = _failure(rc, log_dir, output, cmd, config)
        if document is None:  # what rank 0 had finished (its progress document) goes with the error
            raise LaunchFailed(error, _document(progress_path))
        # rank 0 writes the document after the job's last barrier: every rank had finished the job, and the failure
        # came as they shut down. The measurements are whole (and stored): kept, with the failure as a warning.
        return LaunchResult(document, cmd, output[-OUTPUT_TAIL_LINES:],
                            teardown_error=f"every rank finished the job, then {error} (while shutting down; the "
                                           "results are complete)")


def _document(path: Path) -> dict[str, Any] | None:
    """The JSON document rank 0 wrote at ``path`` (whole: it writes beside it and renames), or None."""
    return json.loads(path.read_text()) if path.exists() else None


def _failure(rc: int, log_dir: Path, output: list[str], cmd: list[str], config: DistConfig) -> str:
    """What went wrong, in one message: the failed ranks first failure first, else torchrun's last lines."""
    failures = failed_ranks(log_dir, output)
    if failures:
        hint = ""
        if any(f.is_timeout for f in failures):
            hint = (f"; a rank gave up waiting for its peers after collective_timeout_s="
                    f"{config.effective_collective_timeout_s:g} s — if some ranks legitimately take longer (a "
                    "big model's first all-gather, a slow checkpoint load) raise it (--collective-timeout), "
                    "else look at the rank that never arrived")
        return f"torchrun exited with code {rc}: {failure_message(failures, output)}{hint}"
    shown = "\n".join(output[-25:])
    return f"torchrun exited with code {rc} ({' '.join(cmd[1:4])} …); its last lines:\n{shown}"


def _read_lines(proc: subprocess.Popen[str]) -> queue.Queue[str | None]:
    """proc's output lines, then None at EOF, from a reader thread — so that the caller can wait with a deadline."""
    lines: queue.Queue[str | None] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        try:
            for line in proc.stdout:
                lines.put(line.rstrip("\n"))
        except (OSError, ValueError):  # the pipe closed under us while stopping
            pass
        lines.put(None)

    threading.Thread(target=pump, name="torchrun-output", daemon=True).start()
    return lines


def _stop(proc: subprocess.Popen[str]) -> None:
    """End torchrun and every process it started, if it is still running: SIGTERM (torchrun passes it to each
    rank's session), then after ``STOP_GRACE_S`` SIGKILL to torchrun and to every descendant seen."""
    if proc.poll() is None:
        family = _descendants(proc.pid)  # now, before torchrun exits and they are reparented
        _signal_group(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=STOP_GRACE_S)
        except subprocess.TimeoutExpired:
            family += _descendants(proc.pid)
            _signal_group(proc.pid, signal.SIGKILL)
            proc.wait()
        for p in family:  # each rank leads its own session and group, which holds its own children
            with contextlib.suppress(psutil.Error, OSError):
                if p.is_running():  # psutil checks the pid is still that process (no pid reuse)
                    if os.getpgid(p.pid) == p.pid:
                        _signal_group(p.pid, signal.SIGKILL)
                    else:
                        p.kill()
        psutil.wait_procs(family, timeout=STOP_GRACE_S)
    if proc.stdout is not None:
        proc.stdout.close()


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


#: the signals that end a launcher: a scheduler, `timeout` or `kill` (SIGTERM), a closed terminal or a dropped ssh
#: session (SIGHUP), Ctrl-\ (SIGQUIT). Each raises :class:`Terminated` while a launch runs, so that its cleanup runs —
#: SIGHUP and SIGQUIT once ended the launcher without it: the temporary directory stayed, and torchrun and the ranks
#: stopped only if the hang-up happened to reach them (found in review)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)


@contextlib.contextmanager
def _stop_signals_raise() -> Iterator[None]:
    """While the block runs, each of :data:`STOP_SIGNALS` raises :class:`Terminated` (so the launch's cleanup runs);
    afterwards the previous handlers are back, and the caught signal is passed on to its own. Only in the main thread
    (signal handlers live there); an ignored signal stays ignored (``nohup``: SIGHUP), and so does one whose handler
    was not installed from Python."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {sig: signal.getsignal(sig) for sig in STOP_SIGNALS}
    caught = [sig for sig, before in previous.items() if before is not None and before != signal.SIG_IGN]
    received: list[signal.Signals] = []

    def handler(signum: int, frame: FrameType | None) -> None:
        if not received:  # once: a second signal must not cut the cleanup the first one started
            received.append(signal.Signals(signum))
            raise Terminated(f"received signal {signum} ({signal.Signals(signum).name}) during a torchrun launch")

    def restore() -> None:
        for sig in caught:
            signal.signal(sig, previous[sig])

    for sig in caught:
        signal.signal(sig, handler)
    try:
        yield
    except Terminated:
        restore()
        sig = received[0]
        before = previous[sig]
        if callable(before):
            before(sig, None)
        elif before == signal.SIG_DFL:
            os.kill(os.getpid(), sig)  # end as the signal would have, now that nothing is left behind
        raise
    finally:
        restore()
