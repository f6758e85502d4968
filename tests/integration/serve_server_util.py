"""A real `accelkit serve` HTTP server on 127.0.0.1 for the server tests: in a background thread, or as the
CLI in its own process."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import psutil
from prometheus_client import CollectorRegistry

from accelkit.serve.server import EngineConfig, ServerConfig, build_server


def on_event_loop() -> bool:
    """Whether the calling code runs on an event loop's thread (the server's work placement tests)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def running_server(model_dir: str, *, name: str = "tiny", api_key: str | None = None, max_queue: int = 256,
                   server: dict[str, Any] | None = None, registry: CollectorRegistry | None = None, **engine: Any):
    """(base URL, ServingState) of a server with accelkit's own shutdown (``ServeServer``) on a free port;
    its metrics in ``registry`` (a fresh one by default)."""
    from accelkit.serve.server.lifecycle import ServeServer, server_config

    engine.setdefault("kv_cache_memory_bytes", 8 << 20)
    app, state = build_server(EngineConfig(model=str(model_dir), **engine),
                              ServerConfig(served_model_name=name, api_key=api_key, max_queue=max_queue, **(server or {})),
                              registry=registry if registry is not None else CollectorRegistry())
    sock = socket.socket()  # bound here and handed over: no other process can take the port in between
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server_ = ServeServer(server_config(app, state, host="127.0.0.1", port=port, log_level="warning"), state)
    thread = threading.Thread(target=server_.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server_.started:
        if time.monotonic() > deadline:
            raise RuntimeError("server did not start")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}", state
    finally:
        server_.should_exit = True
        thread.join(timeout=30)
        sock.close()


def serve_process(model_dir: str, home: Path, *args: str) -> subprocess.Popen[str]:
    """`accelkit serve` of the tiny model as its own process (8 MiB of KV, results under ``home``); stderr piped."""
    return subprocess.Popen([sys.executable, "-m", "accelkit", "serve", "--model", model_dir, "--served-model-name",
                             "tiny", "--kv-cache-memory", "8MiB", *args], stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "ACCELKIT_HOME": str(home)})


def serve_on_a_free_port(model_dir: str, home: Path, *args: str,
                         timeout_s: float = 120) -> tuple[subprocess.Popen[str], str]:
    """`serve_process` on ``--port 0``: (the process, its base URL) once it says where it serves. The server binds
    the port itself, so no other test process can take it in between (a port picked beforehand can be)."""
    proc = serve_process(model_dir, home, "--port", "0", *args)
    head: list[str] = []
    found: list[str] = []

    def read_until_serving() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            head.append(line)
            match = re.search(r"serving .* on (http://[^/\s]+)/v1", line)
            if match:
                found.append(match.group(1))
                return

    reader = threading.Thread(target=read_until_serving, daemon=True)
    reader.start()
    reader.join(timeout_s)
    if not found:
        proc.kill()
        raise RuntimeError(f"`accelkit serve` did not say where it serves within {timeout_s} s: {''.join(head)[-2000:]}")
    return proc, found[0]


def _listening_ports() -> set[int]:
    return {c.laddr.port for c in psutil.Process().net_connections(kind="tcp") if c.status == psutil.CONN_LISTEN}


def serve_in_process(model_dir: str, *args: str, then: Callable[[str], None] | None = None,
                     timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """`accelkit serve --port 0 ARGS` of the tiny model (8 MiB of KV) through the console script's entry point in
    this process (tests/conftest.py ``run_cli``: the CLI's code, without a new interpreter importing torch), until
    SIGTERM stops it as it stops the process: once it answers /health, ``then(base_url)`` runs on another thread,
    and SIGTERM follows. The CompletedProcess (exit code, stdout, stderr) of the whole run; what ``then`` raised is
    raised here. On the main thread only, where the server installs its signal handlers (pytest and its xdist
    workers run tests there)."""
    from tests.conftest import run_cli

    assert threading.current_thread() is threading.main_thread(), "serve_in_process needs the main thread"
    before = _listening_ports()
    ended = threading.Event()
    raised: list[BaseException] = []

    def wait_for(what: Callable[[], Any], failing: str) -> Any:
        """``what()`` once it is truthy; None if the command ends first (an error line, which the caller reads)."""
        deadline = time.monotonic() + timeout_s
        while not ended.is_set():
            found = what()
            if found:
                return found
            if time.monotonic() > deadline:
                raise RuntimeError(f"{failing} within {timeout_s} s")
            time.sleep(0.05)
        return None

    def drive() -> None:
        try:
            # its socket is bound and listening before the model loads; /health answers once uvicorn runs, with
            # its signal handlers in place
            port = wait_for(lambda: _listening_ports() - before, "`accelkit serve` listened on no port")
            url = f"http://127.0.0.1:{min(port)}" if port else None
            if url is None or not wait_for(lambda: is_healthy(url), "/health did not answer 200"):
                return
        except BaseException as exc:
            raised.append(exc)
            return
        try:
            if then is not None:
                then(url)
        except BaseException as exc:  # raised on the main thread, once the server has stopped
            raised.append(exc)
        finally:
            os.kill(os.getpid(), signal.SIGTERM)

    # the server's log handler (`log_to_stderr`, installed once per process) is put back as it was after the run:
    # left in place, the next in-process serve would log its start-up steps, which a new process does not
    logger = logging.getLogger("accelkit.serve")
    saved = logger.handlers[:], logger.level, logger.propagate
    thread = threading.Thread(target=drive, daemon=True)
    thread.start()
    try:
        proc = run_cli("serve", "--model", model_dir, "--served-model-name", "tiny", "--kv-cache-memory", "8MiB",
                       "--port", "0", *args)
    finally:
        ended.set()
        thread.join(30)
        logger.handlers[:], logger.propagate = saved[0], saved[2]
        logger.setLevel(saved[1])
    if raised:
        raise raised[0]
    return proc


def is_healthy(base_url: str) -> bool:
    """/health answers 200 (a server loading its model refuses connections first)."""
    try:
        return httpx.get(f"{base_url}/health", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def wait_healthy(base_url: str, timeout_s: float) -> None:
    """Poll /health until it answers 200."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if is_healthy(base_url):
            return
        time.sleep(0.2)
    raise RuntimeError(f"{base_url}/health did not answer 200 within {timeout_s} s")


def metric(base_url: str, name: str) -> float:
    """Sum of a metric's samples in /metrics (0 when absent)."""
    text = urllib.request.urlopen(f"{base_url}/metrics", timeout=10).read().decode()
    values = [float(m.group(1)) for m in re.finditer(rf"^{re.escape(name)}(?:{{[^}}]*}})? (\S+)$", text, re.M)]
    return sum(values)


def settled_metric(base_url: str, name: str, expected: float, timeout_s: float = 30) -> float:
    """``metric`` once it equals ``expected``, or its value when ``timeout_s`` runs out. The engine loop counts a
    step's tokens and finished requests after the step, and a response can reach its client before that: a
    /metrics read right after a response may see the step before it."""
    deadline = time.monotonic() + timeout_s
    value = metric(base_url, name)
    while value != expected and time.monotonic() < deadline:
        time.sleep(0.05)
        value = metric(base_url, name)
    return value
