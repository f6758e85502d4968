"""A model whose every run raises (its output holds no tensor, its forward fails) made `accelkit tune` print its table
and "No recipe passed the accuracy gate." with exit 0 — nothing was measured, no gate was applied. It now says no
recipe was measured, with the first error, and exits 1 as `accelkit bench` does (the --json document still printed)."""

from __future__ import annotations

import json

import torch

from tests.conftest import main_in_process

FLAGS = ("--no-save", "--no-progress", "--no-compile", "--max-trials", "2", "--warmup", "1", "--warmup-time", "0",
         "--min-iterations", "2", "--min-time", "0")


class _NoTensor(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 8)

    def forward(self, x):
        return 3


def no_tensor():
    return _NoTensor().eval(), (torch.randn(2, 8),)


def working():
    return torch.nn.Linear(8, 8).eval(), (torch.randn(2, 8),)


def test_every_recipe_failing_is_no_verdict_and_exit_1(capsys):
    code, out, err = main_in_process(capsys, "tune", "--module", f"{__name__}:no_tensor", *FLAGS)
    assert code == 1
    assert "No verdict: every recipe tried failed" in out and "passed the accuracy gate" not in out
    assert err.strip().splitlines()[-1] == (
        "error: no recipe was measured: all 2 tried failed (fp32 — first call: UserError: cannot find a tensor in the "
        "model output of type int; the others: see the why column)")
    code, out, err = main_in_process(capsys, "tune", "--module", f"{__name__}:no_tensor", *FLAGS, "--json")
    assert code == 1 and [t["status"] for t in json.loads(out)["trials"][:2]] == ["failed", "failed"]


def test_a_measured_recipe_still_exits_0(capsys):
    code, out, err = main_in_process(capsys, "tune", "--module", f"{__name__}:working", *FLAGS, "--json")
    assert code == 0, err
    assert json.loads(out)["winner"] is not None
