"""`accelkit serve` shows its start-up (weights, KV cache, engine loop) as progress lines on stderr before the ready
line, where stderr is a pipe (#29 acceptance 6); ``--no-progress`` silences them; the one-line errors of a bad flag
or model directory (tests/integration/test_serve_robustness.py) come before any of it. The ready line says torch's
threads on a CPU (by default the usable cores less one). The heap the start-up built is frozen while it serves."""

import re

import pytest

from accelkit.core.device import usable_cores
from accelkit.serve.testing import save_tiny_model
from tests.integration.serve_server_util import serve_in_process

PROGRESS_LINE = re.compile(r"^\[ *\d+\.\d s\] serve")
READY_LINE = re.compile(r"^serving 'tiny' on (http://127\.0\.0\.1:\d+)/v1 ")


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return str(save_tiny_model(tmp_path_factory.mktemp("serve-progress") / "tiny", "tiny-llama"))


def _lines_until_ready(model_dir, *args: str) -> list[str]:
    """stderr's lines of `accelkit serve --port 0 ARGS` up to its ready line; then SIGTERM, which must end it with 0.
    Through the CLI's entry point in this process, its stderr no terminal (as a pipe is not): what the flags do to
    stderr needs no new interpreter (the serve process itself: test_serve_server.py's SIGTERM test and
    test_serve_robustness.py's shutdown test)."""
    proc = serve_in_process(model_dir, *args)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stderr.splitlines()
    ready = next(i for i, line in enumerate(lines) if READY_LINE.match(line))
    return lines[: ready + 1]


def test_serve_shows_each_start_up_step_before_the_ready_line(model_dir):
    head = _lines_until_ready(model_dir, "--progress")
    before = head[:-1]
    assert before and all(PROGRESS_LINE.match(line) for line in before), head
    steps = [line.split("] ", 1)[1] for line in before]
    said = [next(i for i, step in enumerate(steps) if step.startswith(start)) for start in (
        "serve: loading the weights onto cpu", "serve: allocating the KV cache", "serve: starting the engine loop",
        "serve: done")]
    assert said == sorted(said), steps  # in the order they run


def test_no_progress_leaves_the_ready_line_alone_and_the_default_only_adds_progress_lines(model_dir, monkeypatch):
    # torch's threads by default on a CPU: the usable cores less one, read back from the engine's own thread (two
    # more cores than this machine's said here, so that the default differs from any count torch takes by itself)
    cores = usable_cores() + 2
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setattr("accelkit.serve.config.usable_cores", lambda: cores)
    head = _lines_until_ready(model_dir, "--no-progress", "--structured-outputs-backend", "xgrammar")
    assert len(head) == 1 and "structured outputs by xgrammar" in head[0], head  # (the line says which engine)
    assert f"; torch on {cores - 1} CPU threads)" in head[0], head
    # the default shows a step only once start-up has run 0.5 s (how long a tiny model takes varies): whatever
    # comes before the ready line is progress; --cpu-threads is taken as given
    head = _lines_until_ready(model_dir, "--cpu-threads", "1")
    assert all(PROGRESS_LINE.match(line) for line in head[:-1]), head
    assert "structured outputs by llguidance; torch on 1 CPU thread)" in head[-1], head


def test_the_start_up_heap_is_frozen_while_it_serves_and_handed_back_after(model_dir):
    import gc

    frozen: list[int] = []
    proc = serve_in_process(model_dir, "--no-progress", then=lambda _url: frozen.append(gc.get_freeze_count()))
    assert proc.returncode == 0, proc.stderr[-2000:]
    # torch, transformers, the model and the web stack (hundreds of thousands of objects): no full collection
    # walks them while requests run (accelkit.serve.heap); this process goes on after, so they are handed back
    assert frozen and frozen[0] > 100_000, frozen
    assert gc.get_freeze_count() == 0
