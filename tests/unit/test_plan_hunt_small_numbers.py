"""`accelkit plan`'s tables print the figures `--json` has: a value below what the table's fixed decimals can show is
printed to 3 significant digits, not rounded to 0 (a 70B long-prompt plan's 0.128 tokens/s printed as "0 tokens/s (0
per device)"; a tiny model's 0.35 ms prefill and 37 µJ/token as 0.000 in the --top rows)."""

from __future__ import annotations

import json
import re

import pytest

from accelkit.cli.plan import _row
from tests.conftest import main_in_process

_LONG_PROMPT = ["plan", "--model", "llama-3.1-70b", "--task", "infer", "--hardware", "h100", "--num-devices", "8",
                "--prompt-len", "100000", "--output-len", "1", "--batch", "1"]
_TINY = ["plan", "--model", "tiny-llama", "--task", "infer", "--hardware", "h100", "--num-devices", "1"]


def _doc(capsys, *argv: str) -> dict:
    code, out, err = main_in_process(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _number(cell: str) -> float:
    return float(cell.replace(",", ""))


def test_throughput_below_one_token_per_second_is_printed_not_zero(capsys):
    doc = _doc(capsys, *_LONG_PROMPT)
    assert doc["tokens_per_s"] < 1  # the case: prefill-bound, one output token
    code, out, _ = main_in_process(capsys, *_LONG_PROMPT)
    assert code == 0
    line = next(line for line in out.splitlines() if "throughput" in line)
    total, per_device = re.search(r"([\d.,e-]+) tokens/s \(([\d.,e-]+) per device\)", line).groups()  # type: ignore[union-attr]
    assert _number(total) == pytest.approx(doc["tokens_per_s"], rel=5e-3)
    assert _number(per_device) == pytest.approx(doc["tokens_per_s_per_device"], rel=5e-3)


def test_row_cells_equal_the_json_figures(capsys):
    doc = _doc(capsys, *_TINY)
    _, _, _, _, prefill, decode_ms, _, tps, tps_dev, _, energy, _, _ = _row(doc, infer=True, by_hardware=False)
    assert doc["prefill_time_s"] < 1e-3 and doc["energy_j_per_token"] < 1e-3  # what 3 decimals printed as 0.000
    for cell, value in ((prefill, doc["prefill_time_s"]), (decode_ms, doc["decode_time_per_token_s"] * 1e3),
                        (tps, doc["tokens_per_s"]), (tps_dev, doc["tokens_per_s_per_device"]),
                        (energy, doc["energy_j_per_token"])):
        assert _number(cell) == pytest.approx(value, rel=5e-3), (cell, value)


def test_a_training_step_under_a_millisecond_keeps_its_digits(capsys):
    argv = ["plan", "--model", "tiny-resnet", "--hardware", "h100", "--num-devices", "1"]
    doc = _doc(capsys, *argv)
    assert doc["step_time_s"] < 1e-3  # printed as "0.001 s" at 3 decimals
    code, out, _ = main_in_process(capsys, *argv)
    assert code == 0
    line = next(line for line in out.splitlines() if "│ step" in line)
    step = re.search(r"([\d.,e-]+) s for", line).group(1)  # type: ignore[union-attr]
    assert _number(step) == pytest.approx(doc["step_time_s"], rel=5e-3)
