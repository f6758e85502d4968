"""Flags a bench run cannot honour are one line and exit 2, not dropped without a word: `bench llm-train
--fp8-scaling rowwise --precision fp32` measured plain fp32 (exit 0), and `bench custom --lr 0.1` with a factory that
returns no loss_fn (an inference step, no optimizer) ran as if --lr had not been given."""

import json

import pytest

from tests.conftest import main_in_process

SHORT = ("--warmup", "0", "--warmup-time", "0", "--min-iterations", "1", "--min-time", "0", "--no-save", "--no-probe",
         "--no-predict", "--no-progress")


@pytest.mark.parametrize("workload", [("llm-train", "--model", "tiny-llama"), ("resnet", "--size", "tiny")])
def test_fp8_scaling_without_fp8_is_refused(capsys, workload):
    code, out, err = main_in_process(capsys, "bench", *workload, "--fp8-scaling", "rowwise",
                                     "--precision", "fp32,bf16", *SHORT)
    text = " ".join(err.split())
    assert code == 2 and out == "", err
    assert err.count("\n") == 1, err
    assert "--fp8-scaling rowwise applies to --precision fp8, not fp32,bf16" in text, err
    assert "--precision fp32,bf16,fp8" in text, err


def test_fp8_scaling_with_fp8_still_builds_its_variants():
    from accelkit.bench.variants import Matrix

    names = [v.name for v in Matrix(precisions=("fp32", "fp8"), fp8_scalings=("tensorwise", "rowwise")).variants()]
    assert names == ["fp32", "fp8", "fp8-rowwise"]
    assert [v.name for v in Matrix(precisions=("fp32",)).variants()] == ["fp32"]  # the default scaling: no refusal


FACTORY = """
import torch

def infer():
    return torch.nn.Linear(4, 2), (torch.ones(3, 4),)

def chatty():
    print("building the model")
    return torch.nn.Linear(4, 2), (torch.ones(3, 4),)

def empty():
    return torch.nn.Linear(4, 2), (torch.ones(0, 4),)

def typo():
    return {"model": torch.nn.Linear(4, 2), "input": (torch.ones(3, 4),)}

def no_inputs():
    return torch.nn.Linear(4, 2), None

def bf16():
    return torch.nn.Linear(4, 2).to(torch.bfloat16), (torch.ones(3, 4, dtype=torch.bfloat16),)
"""


def test_lr_on_an_inference_factory_is_refused(capsys, tmp_path, monkeypatch):
    (tmp_path / "hunt_lr_factory.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = main_in_process(capsys, "bench", "custom", "--module", "hunt_lr_factory:infer", "--lr", "0.1",
                                     *SHORT)
    text = " ".join(err.split())
    assert code == 2 and out == "", err
    assert "Traceback" not in err
    assert "--lr 0.1 sets the SGD step of a training run, but hunt_lr_factory:infer returns no loss_fn" in text, err


@pytest.mark.parametrize(("args", "line"), [
    (("bert", "--model", "tiny-llama"), "--model tiny-llama is a llama model; bert needs a BERT-family encoder: give "
                                         "--size tiny|base|large or --model tiny-bert, bert-base, bert-large"),
    (("resnet", "--model", "tiny-bert"), "--model tiny-bert is a bert model; resnet needs a ResNet: give "
                                         "--size tiny|50|152 or --model tiny-resnet, resnet-50, resnet-152"),
])
def test_a_model_of_another_family_names_the_ones_that_fit(capsys, args, line):
    """It said `bert needs a BERT-family model; tiny-llama is llama`: no flag, no model to give instead."""
    code, out, err = main_in_process(capsys, "bench", *args, *SHORT)
    assert code == 2 and out == "", err
    assert err.count("\n") == 1 and line in " ".join(err.split()), err


def test_a_model_that_is_not_fp32_is_refused_not_measured_as_fp32(capsys, tmp_path, monkeypatch):
    """A factory's bf16 model ran as the `fp32` variant: bf16 matmuls, MFU 329% of the fp32 peak, blamed on the probe."""
    (tmp_path / "hunt_dtype_factory.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = main_in_process(capsys, "bench", "custom", "--module", "hunt_dtype_factory:bf16",
                                     "--precision", "fp32,bf16", *SHORT)
    text = " ".join(err.split())
    assert code == 2 and out == "", err
    assert "--module 'hunt_dtype_factory:bf16' returns a model with bfloat16 parameters" in text, err
    assert "model.float()" in text and "Traceback" not in err


@pytest.mark.parametrize(("factory", "line"), [
    ("typo", "returned a dict with the keys 'model', 'input'; it needs 'model' and 'inputs'"),
    ("no_inputs", "example_inputs is a NoneType; give a tensor, a tuple of tensors or a dict of keyword tensors"),
    ("empty", "the batch input (positional input 0) has 0 rows, so a step processes no items"),  # ZeroDivisionError
])
def test_a_factory_without_usable_inputs_is_one_line_exit_2(capsys, tmp_path, monkeypatch, factory, line):
    """A misspelt 'inputs' key (read as None) or None inputs failed every variant (`FAILED fp32 (load): UserError …`,
    twice, and a FLOPs note with it), exit 1: the user's input, found at the factory's first call."""
    (tmp_path / "hunt_inputs_factory.py").write_text(FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = main_in_process(capsys, "bench", "custom", "--module", f"hunt_inputs_factory:{factory}",
                                     "--precision", "fp32,bf16", *SHORT)
    text = " ".join(err.split())
    assert code == 2 and out == "", err
    assert f"--module 'hunt_inputs_factory:{factory}'" in text and line in text, err
    assert "FAILED" not in err and "Traceback" not in err


@pytest.mark.parametrize(("args", "line"), [
    (("suite", "nope"), "error: unknown suite 'nope'; known: quick, reference"),
    (("suite", "quick", "--precision", "fp64"), "error: --precision 'fp64' is not valid; choose from fp32"),
])
def test_a_bad_suite_or_precision_is_refused_before_the_starting_line(capsys, args, line):
    """Both printed `bench suite …: starting` above the refusal, as if a run had begun."""
    code, out, err = main_in_process(capsys, "bench", *args)
    assert code == 2 and out == "", err
    assert "starting" not in err and err.count("\n") == 1 and line in err, err


def test_json_stdout_is_the_document_alone_when_the_users_code_prints(capsys, tmp_path, monkeypatch):
    """A factory's print came out on stdout before the document, and `bench custom --json | jq` failed to parse."""
    (tmp_path / "hunt_chatty_factory.py").write_text("print('importing')\n" + FACTORY)
    monkeypatch.syspath_prepend(str(tmp_path))
    code, out, err = main_in_process(capsys, "bench", "custom", "--module", "hunt_chatty_factory:chatty", "--json",
                                     *SHORT)
    assert code == 0, err
    assert json.loads(out)["variants"][0]["name"] == "fp32"
    assert "importing" in err and "building the model" in err
