import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings

REPO = Path(__file__).resolve().parent.parent

# Property tests are judged on what they find, not on how fast a shared CI machine runs an example: no per-example
# deadline and no too-slow health check (a test's own @settings still overrides both).
settings.register_profile("accelkit", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("accelkit")

# The engine's Triton kernels read TRITON_INTERPRET once, when their module is first imported: a test that
# imports the engine before the kernel tests do would leave them compiled for a GPU this machine lacks. Set it
# here, before any test module is imported; on a machine with CUDA the kernels compile for it.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# `make test` runs the suite in pytest-xdist workers sharing the machine's cores: torch's intra-op threads in each
# worker (and in the CLI processes the tests start) would spin against each other, making small ops many times
# slower. One thread each; behaviour is the same.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own results store."""
    home = tmp_path / "accelkit-home"
    monkeypatch.setenv("ACCELKIT_HOME", str(home))
    return home


def run_cli(*args: str, check: bool = False, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the real `accelkit` entry point in a subprocess (as a user would)."""
    proc = subprocess.run(
        [sys.executable, "-m", "accelkit", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=REPO,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"accelkit {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


def accelkit(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real CLI (as a user runs it) in a subprocess; the exit code is the caller's to check."""
    return run_cli(*args, timeout=timeout, env=env)


def accelkit_popen(*args: str) -> subprocess.Popen:
    """The real CLI as a running process, with line-buffered text pipes (progress is on stderr)."""
    return subprocess.Popen([sys.executable, "-m", "accelkit", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, bufsize=1, cwd=REPO)


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(scope="session")
def probe_db(tmp_path_factory) -> Path:
    """One quick `hw probe` (fp32, bf16) shared by the tests, so MFU has a measured CPU peak and the
    planner a description of this CPU."""
    home = tmp_path_factory.mktemp("probe-home")
    proc = accelkit("hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32,bf16", "--size", "512",
                    "--copy-size", "16MiB", env={"ACCELKIT_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    return home / "results.db"


@pytest.fixture
def probed(probe_db, _isolated_home) -> Path:
    """This test's store, starting with the shared probe."""
    _isolated_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(probe_db, _isolated_home / "results.db")
    return _isolated_home
