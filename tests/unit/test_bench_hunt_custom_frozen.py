"""`bench custom` whose factory returns a loss_fn (a training step) with a model that has nothing to train: no
parameters failed every variant at load ("optimizer got an empty parameter list"), only frozen ones (and inputs
without grad) in their first call ("element 0 of tensors does not require grad"), exit 1 either way; and a loss_fn
that is not callable failed every variant too. Refused before any variant runs, in one line naming the factory and
the fix (exit 2)."""

from __future__ import annotations

import pytest

from accelkit.core import UserError

torch = pytest.importorskip("torch")
MODULE = "tests.unit.test_bench_hunt_custom_frozen"


def make_no_params():
    return torch.nn.ReLU(), torch.randn(4, 8, requires_grad=True), lambda out: out.sum()


def make_frozen():
    model = torch.nn.Linear(8, 8).requires_grad_(False)
    return model, torch.randn(4, 8), lambda out: out.sum()


def make_partly_frozen():
    model = torch.nn.Sequential(torch.nn.Linear(8, 8).requires_grad_(False), torch.nn.Linear(8, 2))
    return model, torch.randn(4, 8), lambda out: out.sum()


@pytest.mark.parametrize(("factory", "has"), [("make_no_params", "no parameters"),
                                              ("make_frozen", r"only frozen parameters \(requires_grad=False\)")])
def test_a_training_factory_with_nothing_to_train_is_refused_naming_it(factory: str, has: str):
    from accelkit.bench.workloads import make_workload

    workload = make_workload("custom", {"module": f"{MODULE}:{factory}"})
    with pytest.raises(UserError, match=rf"^--module '{MODULE}:{factory}' returns a loss_fn \(a training step\) but a "
                                        rf"model with {has}, so SGD has nothing to train; return a model with "
                                        r"trainable parameters, or .* without the loss_fn to measure inference$"):
        workload.is_training  # noqa: B018  (the factory's first result is checked here, before any variant)


def test_a_partly_frozen_model_still_trains():
    from accelkit.bench.workloads import make_workload

    assert make_workload("custom", {"module": f"{MODULE}:make_partly_frozen"}).is_training


def test_cli_refuses_it_with_exit_2_in_one_line(cli):
    proc = cli("bench", "custom", "--module", f"{MODULE}:make_no_params", "--no-save", "--quick", "--no-probe",
               "--no-predict")
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines()[-1].startswith(f"error: --module '{MODULE}:make_no_params' returns a loss_fn")
    assert "FAILED" not in proc.stderr and "Traceback" not in proc.stderr


def make_loss_not_callable():
    return torch.nn.Linear(8, 2), torch.randn(4, 8), 3


def test_a_loss_fn_that_is_not_callable_is_refused_naming_it():
    """It failed every variant in its first call ("TypeError: 'int' object is not callable"), exit 1."""
    from accelkit.bench.workloads import make_workload

    workload = make_workload("custom", {"module": f"{MODULE}:make_loss_not_callable"})
    with pytest.raises(UserError, match=rf"^--module '{MODULE}:make_loss_not_callable' returns a loss_fn that is not "
                                        r"callable \(int\); give a function loss_fn\(output\) -> scalar tensor to train"):
        workload.is_training  # noqa: B018
