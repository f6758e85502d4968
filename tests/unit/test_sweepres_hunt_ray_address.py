"""`accelkit sweep --ray ADDRESS` with nothing listening there: one line, exit 2, in seconds (ray.init retried the
address for minutes without a word); `--ray auto` with no cluster found: the same, not an 'internal error'."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest

from tests.conftest import run_cli

PLAN = "name: t\nkind: plan\nworkloads:\n  llama-3-8b: {}\nhardware: h100\nbatch_sizes: [1]\n"


def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.timeout(30)  # without the check ray.init retried the closed port for minutes
def test_sweep_on_a_closed_ray_port_is_refused_at_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    path = tmp_path / "s.yaml"
    path.write_text(PLAN)
    address = f"127.0.0.1:{closed_port()}"
    start = time.monotonic()
    r = run_cli("sweep", str(path), "--ray", address, "--no-progress")
    assert time.monotonic() - start < 10
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith(f"error: --ray {address}: cannot connect to {address} (")
    assert "ray start --head" in line


@pytest.mark.timeout(30)
def test_auto_checks_the_address_in_ray_address(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    address = f"127.0.0.1:{closed_port()}"
    monkeypatch.setenv("RAY_ADDRESS", address)  # what ray.init("auto") connects to first
    path = tmp_path / "s.yaml"
    path.write_text(PLAN)
    r = run_cli("sweep", str(path), "--ray", "auto", "--no-progress")
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() .startswith(f"error: --ray auto (RAY_ADDRESS={address}): cannot connect to {address}")


@pytest.mark.parametrize("address", ["head", "head:port", "head:0", "head:70000", "ray://:10001"])
def test_an_address_without_a_port_is_named(address: str):
    from accelkit.core import UserError
    from accelkit.sweep.executors import check_reachable

    with pytest.raises(UserError, match=f"--ray {address}: '{address}' is not a Ray address; give HOST:PORT"):
        check_reachable(address, f"--ray {address}")


@pytest.mark.timeout(30)
def test_auto_with_no_cluster_is_a_user_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """No RAY_ADDRESS, no cluster file: ray.init('auto') raises ConnectionError — was 'internal error', exit 1."""
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "ray"))  # no ray_current_cluster of another run
    path = tmp_path / "s.yaml"
    path.write_text(PLAN)
    r = run_cli("sweep", str(path), "--ray", "auto", "--no-progress")
    assert r.returncode == 2, r.stderr
    (line,) = r.stderr.strip().splitlines()
    assert line.startswith("error: --ray auto: ") and "--ray local" in line


@pytest.mark.parametrize("given", ["", " "])
def test_an_empty_ray_address_is_refused_not_run_locally(tmp_path: Path, given: str):
    """`--ray "$HEAD"` with HEAD unset: the sweep ran in the local pool without a word."""
    path = tmp_path / "s.yaml"
    path.write_text(PLAN)
    r = run_cli("sweep", str(path), "--ray", given, "--no-progress")
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr == (f"error: --ray {given!r} names no Ray cluster; give auto, HOST:PORT, ray://HOST:10001 or "
                        "local, or leave --ray out to run in the local process pool\n")
