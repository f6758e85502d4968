"""`accelkit plan --task infer --batch B --max-serving-batch M` with B above M: the plan ran B sequences at once, past
the engine's max_num_seqs the user gave, without a word; now one error line (exit 2). B within M is planned as given."""

from __future__ import annotations

import json

from tests.conftest import main_in_process

_INFER = ["plan", "--model", "tiny-llama", "--task", "infer", "--hardware", "h100", "--num-devices", "1"]


def test_a_batch_above_the_serving_cap_is_one_error_line(capsys):
    code, out, err = main_in_process(capsys, *_INFER, "--batch", "300", "--max-serving-batch", "256")
    assert (code, out) == (2, "")
    assert err.strip().splitlines() == [
        "error: --batch 300 is above --max-serving-batch 256 (the engine's max_num_seqs: no more sequences run at "
        "once); use --batch 256 or less, or raise --max-serving-batch"]


def test_a_batch_within_the_cap_is_planned_as_given(capsys):
    code, out, err = main_in_process(capsys, *_INFER, "--batch", "8", "--max-serving-batch", "8", "--json")
    assert code == 0, err
    assert json.loads(out)["batch"] == 8
