"""The published runs `accelkit plan` is validated against (docs/validation.md): one module per family of
sources, each record with its citation and only the fields its source gives."""

from __future__ import annotations

from validation_runs import flash_attention, megatron, mosaic, nvidia, pytorch, serving
from validation_runs.schema import ServingPoint, Source, TrainingRun

_MODULES = (nvidia, pytorch, mosaic, megatron, flash_attention)

SOURCES: dict[str, Source] = {s.key: s for m in (*_MODULES, serving) for s in m.SOURCES}
TRAINING: list[TrainingRun] = [r for m in _MODULES for r in m.RUNS]
SERVING: list[ServingPoint] = list(serving.POINTS)


def _check() -> None:
    ids = [r.id for r in TRAINING] + [p.id for p in SERVING]
    dup = {i for i in ids if ids.count(i) > 1}
    if dup:
        raise ValueError(f"duplicate record ids: {sorted(dup)}")
    unknown = {r.source for r in TRAINING} | {p.source for p in SERVING}
    if unknown - SOURCES.keys():
        raise ValueError(f"records name undeclared sources: {sorted(unknown - SOURCES.keys())}")


_check()
__all__ = ["SERVING", "SOURCES", "TRAINING", "ServingPoint", "Source", "TrainingRun"]
