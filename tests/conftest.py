import gc
import io
import json
import os
import shutil
import signal
import socket
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


# A run started in the background (`cmd &`, nohup) inherits SIGINT ignored, and so does every process it starts:
# the Ctrl-C tests' commands would never see their SIGINT. Handle it as a foreground run does, so that what those
# tests send reaches the commands whatever started the run.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(scope="module", autouse=True)
def _heap_frozen_between_modules():
    """What the process holds as each test module starts — pytest, torch, transformers, every module imported so far,
    the session's fixtures: over 500,000 objects in a test worker — collected once and frozen (``gc.freeze``), so that
    the full collections the code under test runs (a bench variant ends in one: accelkit.bench.reference.free) or
    Python starts by itself walk only what came after: one walk of that heap took about 0.2 s, and tests ran hundreds.
    Collected first, and only at a module's start (the last module's fixtures are gone by then), so that no garbage is
    frozen; a frozen object is only out of the collector's walks, and an in-process server's ``frozen_heap`` hands
    the heap back unfrozen on its way out, which the next module's start freezes again. transformers and the
    commands' modules are imported first: most modules' first test would import them (over 250,000 objects), and
    the freeze would miss them."""
    from transformers import PreTrainedModel  # noqa: F401  (transformers and its modelling stack)

    import accelkit.bench.runner
    import accelkit.cli.app
    import accelkit.serve.engine  # noqa: F401

    gc.collect()
    gc.freeze()
    yield


def pytest_sessionfinish(session, exitstatus):
    """The heap handed back to the collector before the interpreter's shutdown, which finalizes only what the collector
    sees (native modules report what it leaves alive as leaks: nanobind's at the end of every run)."""
    gc.unfreeze()


@pytest.fixture(autouse=True)
def _isolated_home(tmp_path, monkeypatch):
    """Every test gets its own results store."""
    home = tmp_path / "accelkit-home"
    monkeypatch.setenv("ACCELKIT_HOME", str(home))
    return home


@pytest.fixture(autouse=True)
def _consoles_follow_sys_streams():
    """The CLI's rich consoles must write to whatever ``sys.stdout``/``sys.stderr`` is at the time: a test that sets
    ``console.file`` (and monkeypatch's undo, which sets it back to the stream it read) pins the console to one
    stream for every later test in the worker — later in-process commands then read an empty stderr."""
    yield
    from accelkit.cli import output

    pinned = [name for name in ("out", "err") if getattr(output, name)._file is not None]
    for name in pinned:
        getattr(output, name)._file = None
    assert not pinned, f"this test left accelkit.cli.output.{pinned[0]} writing to one fixed file; swap `_file` instead"


#: set to 0 to run every `run_cli`/`accelkit` call as a subprocess (the default runs the console script's entry point
#: in this process, ``_in_process``: no new interpreter importing torch per call)
IN_PROCESS_ENV = "ACCELKIT_TEST_IN_PROCESS"


class _Capture(io.TextIOWrapper):
    """A text stream like a pipe's (not a terminal, with a ``buffer`` for bytes) whose text can be read back."""

    def __init__(self) -> None:
        super().__init__(io.BytesIO(), encoding="utf-8", errors="backslashreplace", write_through=True)

    def text(self) -> str:
        self.flush()
        return self.buffer.getvalue().decode("utf-8", errors="backslashreplace")  # type: ignore[attr-defined]


def empty_stdin() -> io.TextIOWrapper:
    """An empty standard input, as a subprocess started with stdin from /dev/null reads (pytest's own stdin raises
    OSError on a read while output is captured: `results import -` in-process would report an internal error)."""
    return io.TextIOWrapper(io.BytesIO(b""), encoding="utf-8")


def _in_process(args: tuple[str, ...], env: dict | None) -> subprocess.CompletedProcess:
    """`accelkit.cli.app.main` in this process, with its own stdout/stderr and environment: the same entry point
    and exit codes as the console script, without a new interpreter importing torch for every call."""
    from accelkit.cli.app import main  # (imported on first use: conftest is imported before any test module)

    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    out, err = _Capture(), _Capture()
    streams = sys.stdin, sys.stdout, sys.stderr
    sys.stdin, sys.stdout, sys.stderr = empty_stdin(), out, err
    try:
        main(list(args))
        code = 0
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return subprocess.CompletedProcess(["accelkit", *args], code, out.text(), err.text())


def accelkit_subprocess(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """The real `accelkit` entry point in a new process, as a user runs it: for what only a process shows (its
    warnings on a fresh start, signals, exit on a crash, the console script itself)."""
    return subprocess.run(
        [sys.executable, "-m", "accelkit", *args],
        capture_output=True, text=True, timeout=timeout, env={**os.environ, **(env or {})}, cwd=REPO,
    )


#: runs each argv of the JSON list in argv[1] through the CLI's entry point, one after another in this one process;
#: prints [[exit code, stdout, stderr], …]
_COMMANDS = """import contextlib, io, json, sys
from accelkit.cli.app import main
runs = []
for argv in json.loads(sys.argv[1]):
    out, err, code = io.StringIO(), io.StringIO(), 0
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    runs.append([code, out.getvalue(), err.getvalue()])
print(json.dumps(runs))
"""


def accelkit_in_one_process(home: Path, commands: list[list[str]], preexec_fn) -> list[subprocess.CompletedProcess]:
    """Each of ``commands`` through the CLI's entry point, one after another in one new process started with
    ``preexec_fn`` (a resource limit, dropped capabilities: what only a new process can have) and ``home`` as
    ACCELKIT_HOME — one interpreter importing torch for them all, not one per command."""
    proc = subprocess.run([sys.executable, "-c", _COMMANDS, json.dumps(commands)], capture_output=True, text=True,
                          timeout=300, cwd=REPO, env={**os.environ, "ACCELKIT_HOME": str(home)},
                          preexec_fn=preexec_fn)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [subprocess.CompletedProcess(["accelkit", *argv], code, out, err)
            for argv, (code, out, err) in zip(commands, json.loads(proc.stdout), strict=True)]


def _needs_a_new_interpreter(env: dict | None) -> bool:
    """Variables read only when an interpreter or its libraries start (PYTHONPATH, LD_PRELOAD, thread counts)."""
    return any(k.startswith("PYTHON") or k in ("LD_PRELOAD", "OMP_NUM_THREADS", "MKL_NUM_THREADS") for k in env or {})


def run_cli(*args: str, check: bool = False, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run the CLI through the console script's entry point in this process (its own stdout, stderr and
    environment), or in a subprocess where ``env`` holds a variable only a new interpreter reads or
    ``ACCELKIT_TEST_IN_PROCESS=0``; a CompletedProcess either way (``timeout`` applies to a subprocess)."""
    if os.environ.get(IN_PROCESS_ENV) != "0" and not _needs_a_new_interpreter(env):
        proc = _in_process(args, env)
    else:
        proc = accelkit_subprocess(*args, timeout=timeout, env=env)
    if check and proc.returncode != 0:
        raise AssertionError(f"accelkit {' '.join(args)} exited {proc.returncode}:\n{proc.stderr}")
    return proc


@pytest.fixture
def busy_port():
    """A port on 127.0.0.1 that a socket listens on: a server told to bind it stops there, after every check made
    before its bind (`accelkit serve` refuses it in one line naming the port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def main_in_process(capsys, *args: str) -> tuple[int, str, str]:
    """`accelkit ARGS` through ``accelkit.cli.app.main`` in this process, read back with pytest's ``capsys``:
    (exit code, stdout, stderr)."""
    from accelkit.cli.app import main

    code = 0
    try:
        main(list(args))
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def serve_in_process(capsys, *args: str) -> tuple[int, list[str]]:
    """`accelkit serve ARGS` in this process (:func:`main_in_process`): (exit code, stderr's lines); stdout stays
    empty (serve writes nothing there)."""
    code, out, err = main_in_process(capsys, "serve", *args)
    assert out == ""
    return code, err.strip().splitlines()


def accelkit(*args: str, timeout: float = 300, env: dict | None = None) -> subprocess.CompletedProcess:
    """The CLI (see ``run_cli``); the exit code is the caller's to check."""
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
    """One quick `hw probe` (fp32, bf16; 0.1 s loops) shared by the tests, so MFU has a measured CPU peak and the
    planner a description of this CPU."""
    home = tmp_path_factory.mktemp("probe-home")
    proc = accelkit("hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32,bf16",
                    "--copy-size", "16MiB", "--min-time", "0.1", env={"ACCELKIT_HOME": str(home)})
    assert proc.returncode == 0, proc.stderr
    return home / "results.db"


@pytest.fixture
def probed(probe_db, _isolated_home) -> Path:
    """This test's store, starting with the shared probe."""
    _isolated_home.mkdir(parents=True, exist_ok=True)
    shutil.copy(probe_db, _isolated_home / "results.db")
    return _isolated_home
