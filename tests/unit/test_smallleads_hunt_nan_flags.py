"""A float flag given NaN says so: `tune bert --max-accuracy-drop nan` said "Input should be less than or equal to 1
(got 'nan')" (NaN compares false with every bound, so typer's range check worded it as too big), and an unbounded
flag (`loadtest --burstiness nan`) went on to the spec. Every generated float flag now names NaN and the fix; a
bounded flag's out-of-range value (inf included) keeps typer's words."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import typer
from typer.testing import CliRunner

from accelkit.cli.app import _command
from accelkit.cli.spec_options import spec_options
from accelkit.core.spec import Spec, spec_field
from tests.unit.cli_refusal_util import one_error


def test_the_reported_case_names_nan(cli):
    assert one_error(cli("tune", "bert", "--size", "tiny", "--max-accuracy-drop", "nan")) == \
        "error: Invalid value for '--max-accuracy-drop': 'nan' is not a number (NaN); give a number from 0 to 1 " \
        "such as 0.01"


def test_tunes_own_lr_flag_names_nan_too(cli):
    """--lr is declared by tune itself, not generated: it takes the same reader."""
    assert one_error(cli("tune", "bert", "--size", "tiny", "--lr", "nan")) == \
        "error: Invalid value for '--lr': 'nan' is not a number (NaN); give a learning rate ≥ 0 such as 1e-3"


def _generated_float_flags() -> list[tuple[list[str], str]]:
    """(command path, flag) of every float flag that ``spec_options`` generates, across the whole CLI."""
    found = []

    def walk(command, path):
        if hasattr(command, "commands"):
            for name, sub in command.commands.items():
                walk(sub, [*path, name])
            return
        generated = {o.param: o for _, opts in getattr(command.callback, "spec_options", []) for o in opts}
        for p in command.params:
            o = generated.get(p.name)
            annotation = getattr(getattr(p, "type_descriptor", None), "annotation", None)
            if o is not None and o.parse is None and annotation in (float, float | None):
                found.append((path, p.opts[0]))

    walk(_command(), [])
    return found


def test_every_generated_float_flag_names_nan(cli):
    flags = _generated_float_flags()
    assert len(flags) > 20 and (["tune"], "--max-accuracy-drop") in flags
    for path, flag in flags:
        line = one_error(cli(*path, flag, "NaN"))
        assert line.startswith(f"error: Invalid value for '{flag}': 'NaN' is not a number (NaN); give "), line


def test_bounds_keep_their_words_and_a_number_passes():
    @dataclass(frozen=True, slots=True, kw_only=True)
    class Demo(Spec):
        drop: float = spec_field(0.01, min=0.0, max=1.0, doc="Bounded.")
        shape: float = spec_field(1.0, doc="Unbounded.")
        cap: float | None = spec_field(None, min=0.5, doc="Optional, bounded below.")

    seen: dict = {}
    app = typer.Typer()

    @app.command()
    @spec_options(Demo, into="demo")
    def cmd(*, demo: dict) -> None:
        seen.update(demo)

    runner = CliRunner()

    def error(*args: str) -> str:
        result = runner.invoke(app, list(args))
        assert result.exit_code == 2, result.output
        return " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())  # typer's box, unwrapped

    assert "Input should be less than or equal to 1" in error("--drop", "inf")
    assert "Input should be greater than or equal to 0.5" in error("--cap", "0.1")
    assert "Input should be a valid number" in error("--drop", "abc")
    assert error("--shape", "nan").endswith("'nan' is not a number (NaN); give a number such as 1")
    assert error("--cap", "-nan").endswith("'-nan' is not a number (NaN); give a number ≥ 0.5 such as 1")
    result = runner.invoke(app, ["--drop", "0.5", "--shape", "-inf"])
    assert result.exit_code == 0, result.output
    assert seen == {"drop": 0.5, "shape": -math.inf, "cap": None}
    assert runner.invoke(app, ["--cap", "2"]).exit_code == 0 and seen["cap"] == 2.0 and seen["drop"] == 0.01
