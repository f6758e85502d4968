"""The workload registry: name → class. The one place that knows every workload; adding one means a
module with a config and a BenchWorkload subclass, and a line here."""

from __future__ import annotations

import dataclasses
from typing import Any

from accelkit.bench.workloads.base import BenchWorkload, Prepared, Step
from accelkit.bench.workloads.bert import Bert, BertConfig
from accelkit.bench.workloads.custom import Custom, CustomConfig
from accelkit.bench.workloads.dataloader import DataLoaderBench, DataLoaderConfig
from accelkit.bench.workloads.diffusion import Diffusion, DiffusionConfig
from accelkit.bench.workloads.llm import LLM, LLMConfig
from accelkit.bench.workloads.llm_train import LLMTrain, LLMTrainConfig
from accelkit.bench.workloads.resnet import ResNet, ResNetConfig
from accelkit.core import UnknownNameError
from accelkit.core.spec import Spec

WORKLOADS: dict[str, type[BenchWorkload]] = {
    cls.name: cls for cls in (Bert, ResNet, LLM, LLMTrain, DataLoaderBench, Diffusion, Custom)
}


def get_workload(name: str) -> type[BenchWorkload]:
    """A workload class by name; unknown names suggest the closest."""
    if name not in WORKLOADS:
        raise UnknownNameError("workload", name, WORKLOADS)
    return WORKLOADS[name]


def config_fields(name: str) -> set[str]:
    """The field names of a workload's config: the workload flags it takes (``--seq-len`` is ``seq_len``)."""
    return {f.name for f in dataclasses.fields(get_workload(name).config_cls)}  # type: ignore[arg-type]


def make_workload(name: str, config: Spec | dict[str, Any] | None = None) -> BenchWorkload:
    """``make_workload("bert", {"size": "tiny"})`` — the config as a Spec or a dict of its fields."""
    cls = get_workload(name)
    if config is None or isinstance(config, dict):
        config = cls.config_cls.from_dict(config or {}) if cls is not Custom or config else cls.config_cls()
    return cls(config)


__all__ = [
    "WORKLOADS",
    "BenchWorkload",
    "BertConfig",
    "CustomConfig",
    "DataLoaderConfig",
    "DiffusionConfig",
    "LLMConfig",
    "LLMTrainConfig",
    "Prepared",
    "ResNetConfig",
    "Step",
    "config_fields",
    "get_workload",
    "make_workload",
]
