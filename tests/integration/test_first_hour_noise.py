"""Issue #29 item 12 / acceptance 6: the docs' commands print no third-party warnings (checked on the stderr of a
fresh process, where the C++ and import-time lines land), their output reads as tables with units and whole cells,
and a long command shows progress on a pipe too — within a second of starting and then at least every few
seconds — unless --no-progress."""

from __future__ import annotations

import io
import json
import os
import re
import shlex
import subprocess
import sys
import threading
import time

from rich.console import Console
from typer.testing import CliRunner

from accelkit.cli.app import app
from accelkit.cli.bench import shared_footnotes
from accelkit.cli.output import FIRST_LINE_S, HEARTBEAT_S, Heartbeat, table, whole_words
from accelkit.loadtest.testing import FakeOpenAIServer, FakeServerConfig
from tests.conftest import REPO, accelkit_subprocess

#: what a warning looks like on stderr: Python's warnings module, a logger's WARNING, c10's "[W1205 12:00:00 …]",
#: torch's logging ("W1205 12:00:00.16 123 torch/utils/_pytree.py:630] …"), torchao's "Failed to load …so"
WARNING_LINE = re.compile(r"Warning\b|warnings\.warn|^WARNING|^\[W\d{4} |^W\d{4} \d\d:\d\d|Failed to load|"
                          r"excessive worker", re.M)
PROGRESS_LINE = re.compile(r"^\[ *\d+\.\d s\] ")


def _warnings(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if WARNING_LINE.search(line)]


def test_profile_of_a_training_step_prints_tables_and_no_warnings(tmp_path):
    """docs/monitor.md's example, smaller: c10's CPU allocator warned that blocks made before the profiled window
    were freed in it (every training step does that), and the peak memory was a raw dict."""
    proc = accelkit_subprocess("profile", "llm-train", "--model", "tiny-llama", "--seq-len", "32", "--wait", "1", "--warmup", "1",
               "--steps", "2", "--out", str(tmp_path / "prof"), "--no-save")
    assert proc.returncode == 0, proc.stderr
    assert not _warnings(proc.stderr), proc.stderr
    assert "{'" not in proc.stdout and "Peak memory" in proc.stdout
    assert re.search(r"process peak RSS\s+│\s+[\d.]+ [MG]iB", proc.stdout), proc.stdout
    assert re.search(r"what it is\s+│\s+CPU: peak resident set size", proc.stdout), proc.stdout


def test_the_docs_dataloader_example_prints_no_torch_warning():
    """docs/bench.md runs --num-workers 0,2,4: on a machine with fewer cores torch warned about "excessive worker
    creation". The bench says it in its own words, once, as a note of the variant."""
    cores = len(os.sched_getaffinity(0))
    proc = accelkit_subprocess("bench", "dataloader", "--num-workers", f"0,{cores + 1}", "--image-size", "16", "--batch-size", "4",
               "--quick", "--no-save", "--no-probe", "--no-predict", "--min-time", "0", "--warmup-time", "0")
    assert proc.returncode == 0, proc.stderr
    assert not _warnings(proc.stderr), proc.stderr
    assert f"{cores + 1} worker processes on {cores} usable CPU core(s)" in proc.stdout, proc.stdout


def test_models_show_gives_a_tiny_models_kv_per_token_in_bytes():
    result = CliRunner().invoke(app, ["models", "show", "tiny-llama"], terminal_width=200)
    (line,) = [line for line in result.output.splitlines() if "KV cache / token" in line]
    assert result.exit_code == 0 and "256 B in bf16" in line
    big = CliRunner().invoke(app, ["models", "show", "llama-3.1-70b"], terminal_width=200).output
    assert "320 KiB in bf16" in big  # whole KiB stay as they were


def test_loadtest_tables_say_their_units():
    with FakeOpenAIServer(FakeServerConfig(ttft_s=0.002, itl_s=0.001)) as server:
        base = ["loadtest", "--base-url", server.base_url, "--model", "fake-model", "--num-prompts", "6",
                "--random-input-len", "4", "--random-output-len", "2", "--no-save", "--no-progress"]
        one = CliRunner().invoke(app, base, terminal_width=250)
        sweep = CliRunner().invoke(app, [*base, "--sweep-rates", "100,inf"], terminal_width=250)
    assert one.exit_code == 0 and sweep.exit_code == 0, (one.output, sweep.output)
    assert re.search(r"successful requests\s+│\s+6 │ requests", one.output), one.output
    header = next(line for line in sweep.output.splitlines() if "TTFT" in line)
    for unit in ("rate req/s", "goodput req/s", "TTFT p50 ms", "TTFT p99 ms", "TPOT p50 ms", "E2E p50 ms"):
        assert unit in header, header


def test_no_cell_is_cut():
    """A bench table wider than the console cut "[14.02–23.03]" to "[14.02–23.…"."""
    def render(width: int, whole: bool) -> str:
        t = table(None, ["variant", "vs first [p25–p75]"], [("workers=4 pin=off prefetch=2", "11.03× [6.73–78.30]")])
        console = Console(width=width, record=True, file=io.StringIO())
        console.print(whole_words(t, width) if whole else t)
        return console.export_text()

    assert "…" in render(29, whole=False)  # what rich does to a column narrower than its words
    assert "…" not in render(29, whole=True) and "[6.73–78.30]" in render(29, whole=True)  # whole words when they fit
    narrow = render(22, whole=True)  # else folded, every character kept
    assert "…" not in narrow and "78.30]" in "".join(line.split("│")[2].strip() for line in narrow.splitlines()[3:-1]), narrow


def test_a_suites_shared_footnotes_print_once():
    notes = [["bert: fastest", "energy: null", "timer: perf_counter_ns", "MFU peak: 0.01"],
             ["resnet: fastest", "timer: perf_counter_ns", "energy: null", "MFU peak: 0.01"],
             ["llm: fastest", "energy: null", "timer: perf_counter_ns", "MFU peak: 0.02"]]
    assert shared_footnotes(notes) == ["energy: null", "timer: perf_counter_ns"]  # what two of three share stays
    assert shared_footnotes([["one run: every line its own"]]) == []


def test_a_long_command_shows_progress_on_a_pipe_unless_silenced(cli):
    """stderr a pipe and no flag: the old default printed nothing until the end (a CI log looked hung)."""
    # 4 timed loops of at least 0.15 s, each after a warm-up as long: at least 1.2 s, past the 0.5 s before a first
    # line (so that the quiet run too runs long enough to have shown one)
    args = ("hw", "probe", "--quick", "--device", "cpu", "--dtype", "fp32", "--size", "256", "--copy-size", "1MiB",
            "--min-time", "0.15", "--no-save", "--json")
    shown = cli(*args)
    assert shown.returncode == 0 and json.loads(shown.stdout)["kind"] == "probe"
    lines = shown.stderr.splitlines()
    assert lines and all(PROGRESS_LINE.match(line) for line in lines), shown.stderr
    assert lines[-1].endswith("probing: done") and not _warnings(shown.stderr)
    quiet = cli(*args, "--no-progress")
    assert quiet.returncode == 0 and quiet.stderr == ""


def test_the_heartbeat_repeats_while_a_step_runs_on():
    beats: list[float] = []
    done = threading.Event()

    def beat() -> None:
        beats.append(time.perf_counter())
        if len(beats) == 3:
            done.set()

    heart = Heartbeat(beat, every_s=0.05, first_s=0.0)
    assert done.wait(60)
    heart.printed()  # a line of the owner's own puts the next beat off
    heart.close()
    count = len(beats)
    time.sleep(0.2)
    assert len(beats) == count  # closed: no beat after
    assert HEARTBEAT_S <= 10 and FIRST_LINE_S <= 2  # acceptance 6: a line within 2 s, then one every ≤ 10 s


def test_make_demos_commands_print_no_warnings(tmp_path):
    """`make demo`'s commands as a fresh process runs them (the probe and the quick suite, minutes on a CPU, are
    the bench tests'); each stderr free of warnings."""
    makefile = (REPO / "Makefile").read_text()
    demo = makefile.split("\ndemo:", 1)[1].split("\n\n", 1)[0]
    commands = [shlex.split(line.strip())[1:] for line in demo.splitlines() if "$(BIN)/accelkit" in line]
    assert len(commands) == 7, commands
    for args in commands:
        if args[:2] == ["hw", "probe"] or args[0] == "bench":
            continue
        args = [str(tmp_path / a) if a.endswith(".html") else a for a in args]
        proc = accelkit_subprocess(*args)
        assert proc.returncode == 0, (args, proc.stderr)
        assert not _warnings(proc.stderr), (args, proc.stderr)


def test_python_api_use_prints_no_import_noise():
    """torchao's "Failed to load …_C_mxfp8…so" (twice) and torch's _pytree deprecation came with every use of the
    Python API that reached the recipes (torchao) — the README's "From Python" imports, then a recipe's import."""
    code = ("from accelkit.core import Recipe, Cluster\nfrom accelkit.hardware import get_device\n"
            "from accelkit.models import get_preset\nfrom accelkit.recipes import apply\n"
            "import torchao.quantization\nprint(get_preset('llama-3.1-70b').num_params())\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=300)
    assert proc.returncode == 0 and proc.stdout.strip() == "70553706496", proc.stderr
    assert not _warnings(proc.stderr), proc.stderr
