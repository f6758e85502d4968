"""Workload: a model, a task and the shapes it runs at, with the Recipe that says how."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from accelkit.core.model import ModelSpec
from accelkit.core.recipe import Recipe
from accelkit.core.spec import Spec, spec_field

Task = Literal["train", "infer", "serve"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload(Spec):
    """What to run. Training uses ``seq_len`` and the recipe's batch layout; inference uses
    ``batch_size``, ``prompt_len`` and ``output_len``."""

    model: ModelSpec = spec_field(doc="The architecture.")
    task: Task = spec_field("train", doc="train, infer (offline batch) or serve (online).")
    recipe: Recipe = spec_field(default_factory=Recipe, doc="Numerics and parallel layout.")
    batch_size: int = spec_field(1, min=1, doc="Global batch in sequences (training) or concurrent sequences.")
    seq_len: int = spec_field(2048, min=1, doc="Training sequence length (tokens; images: patches or pixels side).")
    prompt_len: int = spec_field(512, min=1, doc="Inference prompt tokens.")
    output_len: int = spec_field(128, min=0, doc="Inference generated tokens.")
    optimizer: Literal["adam", "sgd"] = spec_field("adam", doc="Optimizer (decides optimizer-state bytes).")
