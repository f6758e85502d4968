"""One real process per command, as a user starts it (`python -m accelkit …`): the rest of the suite calls the CLI's
entry point in-process (tests/conftest.py ``run_cli``), so this file is what shows every command also works as its
own process — the exit code, stdout kept for the answer, one ``error:`` line on stderr. Commands that take
minutes are started with a mistake they must refuse before any work (exit 2, one line)."""

import json

import pytest
import typer

from accelkit.cli.app import app
from tests.conftest import accelkit_subprocess


def _leaves() -> set[str]:
    names: set[str] = set()

    def walk(cmd, prefix):
        if hasattr(cmd, "commands"):
            for name, sub in cmd.commands.items():
                walk(sub, [*prefix, name])
        else:
            names.add(" ".join(prefix))

    walk(typer.main.get_command(app), [])
    return names


# (the command, its arguments, the exit code, what stdout (0) or the one stderr line (2) must hold)
RUNS = {
    "plan": (["--model", "llama-3.1-8b", "--hardware", "h100", "--json"], 0, '"memory"'),
    "report": (["--out", "{tmp}/report.html"], 0, ""),
    "tune": (["bert", "--size", "huge"], 2, "size='huge' is not valid"),
    "sweep": (["--points", "0"], 2, "No such option: --points"),
    "serve": (["--model", "{tmp}/none"], 2, "has no config.json"),
    "loadtest": (["--base-url", "http://127.0.0.1:9", "--model", "m", "--num-prompts", "0"], 2, "--num-prompts"),
    "monitor": (["--interval", "0"], 2, "--interval"),
    "profile": (["bert", "--size", "huge"], 2, "--size 'huge' is not valid"),
    "hw list": (["--json"], 0, "H100-SXM5-80GB"),
    "hw show": (["h100", "--json"], 0, "H100-SXM5-80GB"),
    "hw detect": (["--json"], 0, "cpu"),
    "hw probe": (["--size", "0"], 2, "--size"),
    "models list": (["--json"], 0, "llama-3.1-8b"),
    "models show": (["tiny-llama", "--json"], 0, "tiny-llama"),
    "results list": (["--json"], 0, "[]"),
    "results show": (["999"], 2, "no result with id 999"),
    "results export": (["--out", "{tmp}/out.json"], 0, ""),
    "results import": (["{tmp}/none.json"], 2, "does not exist"),
    "results delete": (["1"], 2, "add --yes"),
    "bench suite": (["nope"], 2, "unknown suite 'nope'"),
    "bench bert": (["--size", "huge"], 2, "'huge' is not one of"),
    "bench llm": (["--batch-size", "0"], 2, "--batch-size"),
    "bench llm-train": (["--batch-size", "0"], 2, "--batch-size"),
    "bench resnet": (["--size", "huge"], 2, "'huge' is not one of"),
    "bench diffusion": (["--size", "huge"], 2, "'huge' is not one of"),
    "bench custom": (["--module", "nope"], 2, "--module 'nope' is not valid"),
    "bench dataloader": (["--batch-size", "0"], 2, "--batch-size"),
}


def test_every_command_has_a_process_run_here():
    assert set(RUNS) == _leaves()


@pytest.mark.parametrize("command", sorted(RUNS))
def test_each_command_runs_as_its_own_process(command, tmp_path):
    args, code, needle = RUNS[command]
    proc = accelkit_subprocess(*command.split(), *(a.format(tmp=tmp_path) for a in args), timeout=120)
    assert proc.returncode == code, proc.stderr
    if code == 0:
        assert needle in proc.stdout
        if "--json" in args:
            json.loads(proc.stdout)
    else:
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        assert len(errors) == 1 and needle in errors[0], proc.stderr
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr
