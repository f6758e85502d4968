"""A failed point's error in the sweep table was cut at 80 characters without a mark, mid-word and before its fix (a
plan point on an unprobed CPU showed "… run `accelkit hw probe --d"). A cut error now ends in … and names the row
that holds the whole text; a short one is shown whole."""

from __future__ import annotations

import json

from accelkit.cli.sweep import ERROR_CELL, _cell
from tests.conftest import main_in_process


def test_a_long_point_error_names_the_row_with_the_whole_text(capsys, tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text("kind: plan\nhardware: cpu\nworkloads: {tiny-llama: {task: train}}\n")  # no probe stored: fails
    code, out, err = main_in_process(capsys, "sweep", str(path), "--no-progress", "--json")
    assert code == 1, err
    (point,) = json.loads(out)["points"]
    assert len(point["error"]) > ERROR_CELL and "`accelkit hw probe --device cpu`" in point["error"]
    code, out, err = main_in_process(capsys, "sweep", str(path), "--no-progress")
    cell = " ".join(line.split("│")[-2].strip() for line in out.splitlines() if line.count("│") > 2)  # (wrapped)
    shown = point["error"][:ERROR_CELL - 1] + "… (whole error: `accelkit results show 3`)"
    assert cell.split() == shown.split(), cell
    code, out, err = main_in_process(capsys, "results", "show", "3", "--json")
    assert json.loads(out)["details"]["error"] == point["error"]


def test_a_short_error_is_shown_whole_and_one_without_a_stored_row_points_at_json():
    assert _cell("ValueError: x", {"result_ids": []}, {}, None) == "ValueError: x"
    assert _cell("E" * 200, {"result_ids": []}, {}, None) == "E" * (ERROR_CELL - 1) + "… (whole error: --json)"
