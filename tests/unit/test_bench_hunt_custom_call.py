"""`bench custom`: example inputs the model's forward cannot take are one line naming the factory and forward's
signature, exit 2, before any variant runs. A factory returning `(nn.Linear(4, 2), ())` failed every variant in its
first call (`FAILED fp32 (first call): TypeError: Linear.forward() missing 1 required positional argument`, twice
per variant with the table's copy) and exited 1."""

import sys

import pytest

from tests.conftest import main_in_process

FACTORY = """
import torch

def no_inputs():
    return torch.nn.Linear(4, 2), ()

def two_for_one():
    return torch.nn.Linear(4, 2), (torch.ones(3, 4), torch.ones(3, 4))

def wrong_keyword():
    return torch.nn.Linear(4, 2), {"x": torch.ones(3, 4)}
"""

SHORT = ("--warmup", "0", "--warmup-time", "0", "--min-iterations", "1", "--min-time", "0", "--no-save", "--no-probe",
         "--no-predict", "--no-progress", "--device", "cpu")


@pytest.fixture
def factories(tmp_path, monkeypatch):
    (tmp_path / "hunt_call_factories.py").write_text(FACTORY)
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "hunt_call_factories"
    sys.modules.pop("hunt_call_factories", None)


@pytest.mark.parametrize(("factory", "why"), [("no_inputs", "missing a required argument: 'input'"),
                                              ("two_for_one", "too many positional arguments"),
                                              ("wrong_keyword", "(0 positional and keyword 'x') do not fit")])
def test_inputs_forward_cannot_take_are_refused(capsys, factories, factory, why):
    code, out, err = main_in_process(capsys, "bench", "custom", "--module", f"{factories}:{factory}",
                                     "--precision", "fp32,bf16", *SHORT)
    text = " ".join(err.split())
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and "FAILED" not in err, err
    assert f"--module '{factories}:{factory}': the example inputs" in text and why in text, err
    assert "Linear.forward(input: torch.Tensor)" in text, err
