"""Issue 29 item 9: `plan --compare-compression` tables hid that the layouts do not fit (only `--json` said so):
a 70B full fine-tune at dp8 zero0 on 8 H100s needs over a TiB per device, and the table printed step times as if
nothing were wrong."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from accelkit.cli.app import app

PLAN = ["plan", "--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "8", "--dp", "8", "--zero", "0",
        "--micro-batch", "1", "--compare-compression"]


def test_the_table_says_which_layouts_do_not_fit():
    doc = json.loads(CliRunner().invoke(app, [*PLAN, "--json"]).stdout)
    timed = [r for r in doc["rows"] if "fits" in r]
    assert timed and not any(r["fits"] for r in timed)
    assert all(r["memory_total_bytes"] > r["memory_capacity_bytes"] for r in timed)
    result = CliRunner().invoke(app, PLAN)
    assert result.exit_code == 0, result.output
    words = " ".join(result.stdout.replace("│", " ").split())
    assert words.count("NO: 1.") == len(timed) and "> 79.65 GiB" in words  # the fits column, row by row
    assert "⚠ none of the layouts fits in the device's memory" in result.stdout


def test_a_layout_that_fits_says_yes_and_no_warning():
    fits = ["plan", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "8", "--dp", "8", "--zero", "1",
            "--micro-batch", "1", "--compare-compression"]
    result = CliRunner().invoke(app, fits)
    assert result.exit_code == 0, result.output
    doc = json.loads(CliRunner().invoke(app, [*fits, "--json"]).stdout)
    assert all(r["fits"] for r in doc["rows"] if "fits" in r)
    assert "⚠" not in result.stdout and "NO:" not in result.stdout
