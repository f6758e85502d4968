"""Inputs that gave tracebacks (issue #15, "CLI"): each now gets one `error:` line naming the value and the
fix, exit 2, before any work starts."""

import re

import pytest


@pytest.fixture
def files(tmp_path):
    (tmp_path / "latin1").mkdir()
    (tmp_path / "latin1" / "config.json").write_bytes(b'{"model_type": "llama", "name": "caf\xe9"}')
    (tmp_path / "sweep-latin1.yaml").write_bytes(b"name: caf\xe9\nkind: plan\n")
    (tmp_path / "sweep-dir").mkdir()
    (tmp_path / "sweep-keys.yaml").write_text("1: x\nworkloads: {llama-3.1-8b: {}}\n")
    (tmp_path / "a-file").write_text("x")
    (tmp_path / "huge-int").mkdir()
    (tmp_path / "huge-int" / "config.json").write_text('{"model_type": "llama", "hidden_size": ' + "9" * 5000 + "}")
    return tmp_path


@pytest.mark.parametrize(("args", "needle"), [
    (("models", "show", "{t}/latin1"), "config.json: not UTF-8 text"),
    (("models", "show", "{t}/huge-int"), "config.json: not a usable JSON document"),
    (("hw", "probe", "--size", "99999999999"), "--size"),
    (("hw", "probe", "--copy-size", "100TiB"), "--copy-size 100TiB is out of range; give 1MiB to 64GiB"),
    (("hw", "probe", "--dtype", ","), "--dtype ',' names no dtype"),
    (("sweep", "{t}/sweep-latin1.yaml"), "is not UTF-8 text"),
    (("sweep", "{t}/sweep-dir"), "is a directory; give the YAML file itself"),
    (("sweep", "{t}/sweep-keys.yaml"), "sweep-keys.yaml: 1 is not a field name"),
    (("sweep", "--workers", "100000", "{t}/sweep-dir"), "--workers"),
    (("profile", "bert", "--out", "{t}/a-file/trace"), "is a file, not a folder"),
    # no layout fits 1000 devices: the message names the flag (a fuzz case gave '1_000', which the message
    # spelled 1000, naming neither the value as typed nor the option)
    (("plan", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "1_000"),
     "on 1000 × H100-SXM5-80GB (--num-devices 1000) with no layout flags and global batch 1024 (--global-batch)"),
    (("monitor", "--once", "--interval", "nan"), "--interval': 'nan' is not a number (NaN)"),
    (("loadtest", "--base-url", "http://127.0.0.1:9", "--model", "m", "--num-prompts", "1000000",
      "--random-input-len", "1000000"), "words of prompts to build in memory"),
])
def test_bad_input_gets_one_error_line(cli, files, args, needle):
    proc = cli(*(a.format(t=files) for a in args))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == "" and "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and needle in lines[0], proc.stderr


def test_an_unexpected_error_is_one_line_unless_debugging():
    """The last resort in main(): a bug prints one line (and how to see the traceback), exit 1."""
    import subprocess
    import sys

    from tests.conftest import REPO

    code = ("import sys\nfrom accelkit.cli.app import app, main\n"
            "@app.command('boom')\ndef boom():\n    raise RuntimeError('kaboom')\n"
            "main(sys.argv[1:])\n")
    proc = subprocess.run([sys.executable, "-c", code, "boom"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert "internal error (RuntimeError: kaboom)" in proc.stderr and "ACCELKIT_DEBUG=1" in proc.stderr
    proc = subprocess.run([sys.executable, "-c", code, "boom"], capture_output=True, text=True, cwd=REPO, timeout=60,
                          env={**__import__("os").environ, "ACCELKIT_DEBUG": "1"})
    assert "Traceback" in proc.stderr and "RuntimeError: kaboom" in proc.stderr


@pytest.mark.parametrize("command", ["profile", "tune"])
def test_a_failing_module_factory_is_one_line(cli, command):
    """`--module json:loads`: the user's factory raises TypeError — a --module that is not a factory, reported as one
    line naming it and what a factory must be, exit 2 (the same as `bench custom`, tests/integration/test_bench_cli.py)."""
    proc = cli(command, "--module", "json:loads", "--no-save")
    assert proc.returncode == 2 and proc.stdout == "" and "Traceback" not in proc.stderr
    # before it, at most the progress of the run that called the factory (#29: shown on a pipe too)
    *progress, error = proc.stderr.strip().splitlines()
    assert all(re.match(r"\[ *\d+\.\d s\] ", line) for line in progress), progress
    assert error == ("error: --module 'json:loads': calling loads() raised TypeError: loads() missing 1 "
                     "required positional argument: 's'; the factory takes no arguments and returns "
                     "(model, example_inputs[, loss_fn])")
