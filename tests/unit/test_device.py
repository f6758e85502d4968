"""``--device`` is read in one place (accelkit.hardware.device.resolve_device): what it accepts and refuses,
and that no other module picks a device on its own."""

import re
from pathlib import Path

import pytest
import torch

from accelkit.core import UserError
from accelkit.hardware.device import resolve_device

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CPU-only answers (this machine has a GPU)")
def test_cpu_only_machine():
    assert resolve_device("auto") == "cpu"
    assert resolve_device(" CPU ") == "cpu"
    for name in ("cuda", "cuda:0", "cuda:3"):
        with pytest.raises(UserError, match=rf"device '{name}' was asked for but torch sees no CUDA.*--device cpu"):
            resolve_device(name)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)")
def test_gpu_machine():
    n = torch.cuda.device_count()
    assert resolve_device("auto") == "cuda:0"
    assert resolve_device("cuda", index=n - 1) == f"cuda:{n - 1}"
    with pytest.raises(UserError, match=rf"'cuda:{n}' does not exist: torch sees {n} GPU"):
        resolve_device(f"cuda:{n}")


@pytest.mark.parametrize("name", ["tpu", "gpu", "cuda:x", "cuda:-1", "cuda:0:1", "", "mps:0"])
def test_invalid_names_are_refused_with_the_values_that_work(name):
    with pytest.raises(UserError, match=r"is not valid; use auto, cpu, cuda or cuda:N"):
        resolve_device(name)


def test_no_other_module_picks_a_device_itself():
    pattern = re.compile(r"""["']cuda(:0)?["'] if torch\.cuda\.is_available\(\) else""")
    offenders = [str(p.relative_to(REPO)) for folder in ("accelkit", "benchmarks")
                 for p in (REPO / folder).rglob("*.py") if pattern.search(p.read_text())]
    assert offenders == [], f"use accelkit.hardware.device.resolve_device in {offenders}"
