"""Fitting the planner's free parameters on published runs, and leave-one-source-out cross-validation.

The free parameters are ``accelkit.plan.fitted.SUSTAINED_TENSOR``: one factor per GPU generation (A100, H100; H200
and GH200 share H100's, every other device takes the unfitted DEFAULT_SUSTAINED). ``fit`` sets each factor to the
value, on a 0.005 grid over [0.50, 1.00], with the smallest loss on the given runs of that generation, where the
loss is the mean over sources of each source's mean |log(band centre / published)| — a source weighs the same
whether it publishes 2 runs or 30. The search is a 0.01 grid, then the two 0.005 neighbours of its best; ties go to
the first value found. Deterministic, no randomness, nothing set by hand.

``loso`` leaves each source out in turn: the factors are fitted on every other source and the left-out source's
runs are predicted with them. Its per-source errors are what a user planning a run from an unseen source should
expect; the in-sample errors are only a lower bound on that.

Serving has its own free parameter, ``SERVING_ATTAINED`` (one fraction per device family that has one: MI300X),
fitted the same way on the serving points of that family (``fit_serving``: the same per-source loss of
|log(band centre / published)|, on a 0.005 grid over [0.20, 1.00]); ``loso_serving`` leaves each serving source out
in turn. A family's fit needs a source other than the one left out: MI300X has two, so each is predicted with the
value the other one gives.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Iterable
from typing import Any

from plan_validation_eval import (
    SERVING,
    Predictor,
    factor_family,
    published_tokens_per_device,
    serving_family,
    speed_error,
)
from validation_runs.schema import ServingPoint, TrainingRun

from accelkit.plan import fitted

COARSE = [round(0.50 + 0.01 * i, 3) for i in range(51)]
SERVING_COARSE = [round(0.20 + 0.01 * i, 3) for i in range(81)]


def _log_error(pred: Predictor, run: TrainingRun, factors: dict[str, float]) -> float:
    return abs(math.log(pred.training(run, factors).centre / published_tokens_per_device(run)))


def _source_loss(pred: Predictor, runs: list[TrainingRun], fam: str, value: float) -> float:
    by_source: dict[str, list[float]] = {}
    for r in runs:
        by_source.setdefault(r.source, []).append(_log_error(pred, r, {fam: value}))
    return statistics.fmean(statistics.fmean(v) for v in by_source.values())


def _argmin(values: Iterable[float], loss: Callable[[float], float]) -> tuple[float, float]:
    best: tuple[float, float] | None = None
    for v in values:
        current = loss(v)
        if best is None or current < best[1] - 1e-12:
            best = (v, current)
    assert best is not None
    return best


def _coarse_then_fine(coarse: Iterable[float], loss: Callable[[float], float], lo: float, hi: float) -> float:
    """The value of least ``loss`` on the ``coarse`` grid, then refined to ±0.005 of it (kept within [lo, hi])."""
    best, _ = _argmin(coarse, loss)
    return _argmin([v for v in (round(best - 0.005, 3), best, round(best + 0.005, 3)) if lo <= v <= hi], loss)[0]


def fit(pred: Predictor, runs: Iterable[TrainingRun]) -> dict[str, float]:
    """Each generation's factor fitted on the given (expressible, planned) runs of that generation; a generation
    with no run keeps its shipped value."""
    found: dict[str, float] = {}
    usable = [r for r in runs if r.expressible and r.device is not None]
    for fam in fitted.SUSTAINED_TENSOR:
        mine = [r for r in usable if factor_family(r.device) == fam
                and not math.isnan(pred.training(r, {}).centre)]
        if not mine:
            continue

        def loss(v: float, mine: list[TrainingRun] = mine, fam: str = fam) -> float:
            return _source_loss(pred, mine, fam, v)

        found[fam] = _coarse_then_fine(COARSE, loss, 0.5, 1.0)
    return found


def errors(pred: Predictor, runs: Iterable[TrainingRun], factors: dict[str, float]) -> dict[str, dict[str, Any]]:
    """Per run: the band at ``factors`` and the error of its centre (positive = the planner is optimistic)."""
    out = {}
    for r in runs:
        b = pred.training(r, factors)
        pub = published_tokens_per_device(r)
        out[r.id] = {"band": b.to_json(), "published_tokens_per_s_per_device": pub, "error": b.centre / pub - 1,
                     "inside_band": b.low <= pub <= b.high}
    return out


def loso(pred: Predictor, runs: list[TrainingRun],
         group: Callable[[TrainingRun], str] = lambda r: r.source) -> dict[str, dict[str, Any]]:
    """For each group (a source; or an organisation) with expressible runs: the factors fitted without it and its
    runs' errors with them."""
    counted = [r for r in runs if r.expressible]
    out: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys(group(r) for r in counted):
        factors = fit(pred, [r for r in counted if group(r) != key])
        mine = [r for r in counted if group(r) == key]
        out[key] = {"factors": factors, "runs": errors(pred, mine, factors)}
    return out


def _serving_loss(pred: Predictor, points: list[ServingPoint], key: str, value: float) -> float:
    by_source: dict[str, list[float]] = {}
    for p in points:
        by_source.setdefault(p.source, []).append(abs(math.log(pred.serving(p, {key: value}).centre / p.value)))
    return statistics.fmean(statistics.fmean(v) for v in by_source.values())


def fit_serving(pred: Predictor, points: Iterable[ServingPoint]) -> dict[str, float]:
    """Each SERVING_ATTAINED family's fraction fitted on the given serving points of that family (keys
    ``"serving:<family>"``); a family with no point keeps its shipped value."""
    found: dict[str, float] = {}
    usable = list(points)
    for fam in fitted.SERVING_ATTAINED:
        key = SERVING + fam
        mine = [p for p in usable if serving_family(p.device) == fam and not math.isnan(pred.serving(p, {}).centre)]
        if not mine:
            continue

        def loss(v: float, mine: list[ServingPoint] = mine, key: str = key) -> float:
            return _serving_loss(pred, mine, key, v)

        found[key] = _coarse_then_fine(SERVING_COARSE, loss, 0.2, 1.0)
    return found


def loso_serving(pred: Predictor, points: list[ServingPoint]) -> dict[str, dict[str, Any]]:
    """For each serving source: the SERVING_ATTAINED values fitted without it (the training factors as shipped) and
    its points' errors with them (positive = the planner is optimistic)."""
    out: dict[str, dict[str, Any]] = {}
    for key in dict.fromkeys(p.source for p in points):
        factors = fit_serving(pred, [p for p in points if p.source != key])
        out[key] = {"factors": factors, "points": {p.id: {"band": pred.serving(p, factors).to_json(),
                                                          "error": speed_error(p, pred.serving(p, factors).centre)}
                                                   for p in points if p.source == key}}
    return out
