"""The grid of a sweep: its points (the product of the file's axes) and what each point builds — the planner's
workload of a plan point, the LoadTestConfig of a loadtest point. Pure bookkeeping: the spec that is expanded
(``accelkit.sweep.spec``) and the processes that run a point (``accelkit.sweep.point``) sit above it."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from accelkit.core import Recipe, Workload
from accelkit.loadtest import LoadTestConfig
from accelkit.loadtest.config import parse_rate as parse
from accelkit.models import resolve_model


class Axes(Protocol):
    """What :func:`expand` reads of a sweep file (``SweepSpec`` has these fields)."""

    @property
    def kind(self) -> str: ...
    @property
    def workloads(self) -> Mapping[str, Mapping[str, Any]]: ...
    @property
    def precisions(self) -> tuple[str, ...] | None: ...
    @property
    def batch_sizes(self) -> tuple[int, ...] | None: ...
    @property
    def layouts(self) -> tuple[dict[str, Any], ...] | None: ...
    @property
    def rates(self) -> tuple[float | str, ...] | None: ...


def parse_rate(value: float | str, field_name: str) -> float:
    """A request rate as the sweep file gives it (a number, or inf), checked as ``loadtest --request-rate`` is."""
    return parse(str(value), field=field_name)


@dataclass(frozen=True, slots=True)
class Point:
    """One cell of the grid."""

    index: int
    kind: str
    workload: str
    config: dict[str, Any]
    precision: str | None
    batch_size: int | None
    layout: dict[str, Any]
    rate: float | None

    @property
    def key(self) -> str:
        """A stable label: the same grid gives the same keys, whatever ran it."""
        parts = [self.workload + "".join(f" {k}={v}" for k, v in sorted(self.config.items()))]
        if self.precision:
            parts.append(self.precision)
        if self.batch_size is not None:
            parts.append(f"b{self.batch_size}")
        if self.layout:
            parts.append(",".join(f"{k}={v}" for k, v in sorted(self.layout.items())))
        if self.rate is not None:
            parts.append(f"rate {self.rate:g}")
        return " · ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "kind": self.kind, "workload": self.workload, "config": self.config,
                "precision": self.precision, "batch_size": self.batch_size, "layout": self.layout,
                "rate": None if self.rate is None else ("inf" if math.isinf(self.rate) else self.rate),
                "key": self.key}


def expand(spec: Axes) -> list[Point]:
    """The product workloads × precisions × batch sizes × layouts × rates, in that nesting order."""
    default_precision = {"bench": "fp32", "plan": "bf16", "loadtest": None}[spec.kind]
    precisions = spec.precisions or (default_precision,)
    batches = spec.batch_sizes or (None,)
    layouts = spec.layouts or ({},)
    rates = [parse_rate(r, f"rates[{i}]") for i, r in enumerate(spec.rates)] if spec.rates else [None]
    cells = itertools.product(spec.workloads.items(), precisions, batches, layouts, rates)
    return [Point(i, spec.kind, name, dict(config), p, b, dict(layout), r)
            for i, ((name, config), p, b, layout, r) in enumerate(cells)]


def plan_workload(p: Point) -> Workload:
    """The planner's workload for a plan point (also built when the file loads, to check it)."""
    model = resolve_model(p.workload)
    c = dict(p.config)
    task = c.pop("task", "train")
    seq = c.pop("seq_len", None)
    if seq is None:  # not `or`: seq_len 0 ran at 4096 instead of being refused as `plan --seq-len 0` is (found in review)
        seq = min(4096, model.max_seq_len or 4096)
    layout = dict(p.layout)
    batch = p.batch_size or 1
    recipe = Recipe(precision=p.precision, micro_batch=batch if task == "train" else 1, **layout)  # type: ignore[arg-type]
    return Workload(model=model, task=task, seq_len=seq, batch_size=batch, recipe=recipe, **c)


def loadtest_config(name: str, config: Mapping[str, Any], loadtest: Mapping[str, Any], rate: float) -> LoadTestConfig:
    """A loadtest point's config: the sweep's ``loadtest`` fields, then the served model's own, at ``rate``."""
    return LoadTestConfig.from_dict({**loadtest, "model": name, **config, "request_rate": rate})
