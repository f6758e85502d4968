"""`bench custom`'s items per step: dim 0 of the input that carries the batch, not of whichever input comes first
(a 1-element mask listed before ``x`` made throughput and FLOPs per sample those of the whole 6-row batch)."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn


class KeywordModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32)

    def forward(self, mask: torch.Tensor | None = None, x: torch.Tensor | None = None,
                input_ids: torch.Tensor | None = None, bias: torch.Tensor | None = None) -> torch.Tensor:
        if input_ids is not None:
            x = nn.functional.one_hot(input_ids, 32).float() + bias
        return self.proj(x) * mask  # type: ignore[arg-type]


class ScaledModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(8, 8)

    def forward(self, scale: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * scale


def mask_first() -> dict[str, Any]:
    return {"model": KeywordModel(), "inputs": {"mask": torch.ones(1), "x": torch.randn(6, 32)}}


def named_batch() -> dict[str, Any]:  # a (1, 5, 32) bias comes first and has more dimensions; input_ids is the batch
    return {"model": KeywordModel(), "inputs": {"mask": torch.ones(1), "bias": torch.zeros(1, 5, 32),
                                                "input_ids": torch.randint(0, 32, (3, 5))}}


def scalar_first() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return ScaledModel(), (torch.tensor(2.0), torch.randn(5, 8))


def scalars_only() -> tuple[nn.Module, tuple[torch.Tensor, ...]]:
    return ScaledModel(), (torch.tensor(2.0), torch.randn(8))


def no_batch() -> tuple[nn.Module, torch.Tensor]:
    return nn.Identity(), torch.tensor(2.0)


def one_input() -> tuple[nn.Module, torch.Tensor]:
    return nn.Linear(8, 8), torch.randn(4, 8)


def _prepared_items(factory: str) -> tuple[int, list[str]]:
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload

    prepared = make_workload("custom", {"module": f"{__name__}:{factory}"}).prepare(Variant(), "cpu", seed=0)
    (step,) = prepared.steps
    step.fn()  # the inputs it found run through the model
    return step.items, prepared.notes


@pytest.mark.parametrize(("factory", "items", "note"), [
    ("mask_first", 6, "items per step: 6, dim 0 of keyword input 'x'"),
    ("named_batch", 3, "items per step: 3, dim 0 of keyword input 'input_ids'"),
    ("scalar_first", 5, "items per step: 5, dim 0 of positional input 1"),
    ("scalars_only", 8, "items per step: 8, dim 0 of positional input 1"),
    ("one_input", 4, None),  # one input: no doubt, no note
    ("no_batch", 1, "no input has a batch dimension: 1 item per step (give --items-per-step)"),
])
def test_items_are_dim_0_of_the_input_that_carries_the_batch(factory: str, items: int, note: str | None) -> None:
    found, notes = _prepared_items(factory)
    assert found == items
    if note is not None and note.startswith("items per step"):
        note += " (--items-per-step sets another)"
    assert notes == ([note] if note else [])


def test_flops_per_sample_divide_by_the_batch_rows() -> None:
    """Linear(32, 32) over 6 rows: 2·32·32 FLOPs per sample (the mask's single element gave 6× that)."""
    from accelkit.bench.reference import count_on_meta
    from accelkit.bench.workloads import make_workload

    flops, why = count_on_meta(make_workload("custom", {"module": f"{__name__}:mask_first"}), seed=0)
    assert why is None and flops == {"forward": 2 * 32 * 32}


def test_items_per_step_overrides_and_is_not_noted() -> None:
    from accelkit.bench.variants import Variant
    from accelkit.bench.workloads import make_workload

    workload = make_workload("custom", {"module": f"{__name__}:mask_first", "items_per_step": 12})
    prepared = workload.prepare(Variant(), "cpu", seed=0)
    assert prepared.steps[0].items == 12 and prepared.notes == []
