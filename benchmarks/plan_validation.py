"""Validation of `accelkit plan` against published runs (issues 14 and 32; docs/validation.md).

The set (benchmarks/validation_runs/): published training runs and serving points, each with its citation and
only the fields its source gives. The harness plans every record through the public API — a band over the
plausible values of what the source leaves out (plan_validation_eval.py) — and reports:

* in-sample errors with the shipped free parameters (accelkit/plan/fitted.py) and with the parameters the fitting
  procedure (plan_validation_fit.py) returns on every source;
* leave-one-source-out (the headline): each source predicted with parameters fitted on all the others; and
  leave-one-organisation-out, since several sources share a publisher;
* the serving points against `plan --task infer` at the published lengths, batch, precision and TP;
* the runs the planner cannot express today, grouped by the feature that would unlock them.

    PYTHONPATH=. python benchmarks/plan_validation.py             # → benchmarks/results/plan_validation.json
    PYTHONPATH=. python benchmarks/plan_validation.py --markdown  # the tables of docs/validation.md (committed JSON)
    PYTHONPATH=. python benchmarks/plan_validation.py --fit       # the fitted free parameters (writes nothing)

Pure arithmetic, no torch, no GPU: well under a minute on one core (the fits re-plan every record about 60 times).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from plan_validation_eval import SERVING as SERVING_KEY
from plan_validation_eval import Predictor, published_tokens_per_device, speed_error
from plan_validation_fit import errors, fit, fit_serving, loso, loso_serving
from plan_validation_report import markdown
from validation_runs import SERVING, SOURCES, TRAINING
from validation_runs.schema import LAYOUT_FIELDS, ServingPoint, TrainingRun

from accelkit.hardware.detect import environment
from accelkit.plan import fitted

OUT = Path(__file__).parent / "results" / "plan_validation.json"


def stats(errs: Iterable[float]) -> dict[str, Any]:
    """Mean and worst |error| and the mean signed error (positive = the planner is optimistic)."""
    e = list(errs)
    if not e:
        return {"n": 0}
    return {"n": len(e), "mean_abs_error": statistics.fmean(abs(x) for x in e), "worst_abs_error": max(abs(x) for x in e),
            "mean_signed_error": statistics.fmean(e)}


def _grouped(rows: list[dict[str, Any]], key: str, err: str) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[float]] = {}
    for r in rows:
        groups.setdefault(r[key], []).append(r[err])
    return {k: stats(v) for k, v in groups.items()}


def _headline(by_source: dict[str, dict[str, Any]], rows: list[dict[str, Any]], err: str) -> dict[str, Any]:
    """Mean of the sources' means (each source weighs the same), the pooled figures, and the worst source."""
    worst = max(by_source, key=lambda s: by_source[s]["mean_abs_error"])
    return {"mean_of_source_means": statistics.fmean(s["mean_abs_error"] for s in by_source.values()),
            "pooled": stats(r[err] for r in rows), "worst_source": worst,
            "worst_source_mean": by_source[worst]["mean_abs_error"], "by_source": by_source}


def _training_row(run: TrainingRun) -> dict[str, Any]:
    src = SOURCES[run.source]
    return {
        "id": run.id, "source": run.source, "organisation": src.organisation, "where": run.where,
        "model": run.model.name, "params": run.model.num_params(), "moe": run.model.num_experts is not None,
        "hardware": run.hardware, "device": run.device, "num_devices": run.num_devices, "seq_len": run.seq_len,
        "global_batch": run.global_batch, "precision": run.precision,
        "published": {"kind": run.published.kind, "value": run.published.value, "text": run.published.text,
                      "tokens_per_s_per_device": published_tokens_per_device(run)},
        "fields": {k: getattr(run, k) for k in LAYOUT_FIELDS}, "stack": run.stack, "scaleout_gbps": run.scaleout_gbps,
        "unknown": {k: list(v) for k, v in run.unknown.items()},
        "status": "expressible" if run.expressible else "not expressible",
        "not_expressible": run.not_expressible or None, "unlocks": run.unlocks or None,
        "shipped_calibration": run.shipped_calibration,
    }


def _serving_row(point: ServingPoint, pred: Predictor, sets: dict[str, dict[str, float]]) -> dict[str, Any]:
    row: dict[str, Any] = {
        "id": point.id, "source": point.source, "where": point.where, "model": point.model.name,
        "hardware": point.hardware, "device": point.device, "tp": point.tp, "engine": point.engine,
        "weights": point.weights, "kv_cache_dtype": point.kv_cache_dtype, "prompt_len": point.prompt_len,
        "output_len": point.output_len, "batch": point.batch, "max_batch": point.max_batch,
        "memory_fraction": point.memory_fraction, "metric": point.metric, "published": point.value,
        "text": point.text, "unknown": {k: list(v) for k, v in point.unknown.items()}}
    if pred.ruled_out(point):  # plan_validation_eval.kv_ruled_out: dtypes the published figures rule out
        row["kv_ruled_out"] = pred.ruled_out(point)
    for name, factors in sets.items():
        b = pred.serving(point, factors)
        row[name] = {"band": b.to_json(), "error": speed_error(point, b.centre)}
    return row


def build(pred: Predictor | None = None) -> dict[str, Any]:
    """Everything the JSON holds but the environment."""
    pred = pred or Predictor()
    counted = [r for r in TRAINING if r.expressible]
    shipped = dict(fitted.SUSTAINED_TENSOR)
    refit = fit(pred, counted)
    calib = fit(pred, [r for r in TRAINING if r.shipped_calibration])  # fit() keeps the expressible
    rows = [_training_row(r) for r in TRAINING]
    at_shipped = errors(pred, counted, {})
    at_refit = errors(pred, counted, refit)
    by_source = loso(pred, TRAINING)
    by_org = loso(pred, TRAINING, group=lambda r: SOURCES[r.source].organisation)
    for row in rows:
        if row["status"] != "expressible":
            continue
        row["shipped"] = at_shipped[row["id"]]
        row["in_sample_error"] = at_refit[row["id"]]["error"]
        row["loso_error"] = by_source[row["source"]]["runs"][row["id"]]["error"]
        row["loso_factors"] = by_source[row["source"]]["factors"]
        row["leave_organisation_out_error"] = by_org[row["organisation"]]["runs"][row["id"]]["error"]
    ok = [r for r in rows if r["status"] == "expressible"]
    for r in ok:
        r["shipped_error"] = r["shipped"]["error"]
    unlocks: dict[str, list[str]] = {}
    for r in TRAINING:
        if not r.expressible:
            unlocks.setdefault(r.unlocks, []).append(r.id)
    serving_refit = fit_serving(pred, SERVING)
    serving_sets = {"shipped": shipped, "refit": {**refit, **serving_refit}}
    serving = [_serving_row(p, pred, serving_sets) for p in SERVING]
    serving_loso = loso_serving(pred, SERVING)
    for row in serving:
        fold = serving_loso[row["source"]]
        row["loso"] = {**fold["points"][row["id"]], "factors": fold["factors"]}
    return {
        "benchmark": "plan_validation",
        "what": "accelkit.plan.plan() on published training runs and serving points; each figure the source leaves "
                "out is a band over its plausible values, predicted by the band's centre √(low·high); training "
                "error = predicted tokens/s per device / published − 1, serving error = the same as a speed "
                "(positive = the planner is optimistic)",
        "free_parameters": {"shipped": shipped, "fit_on_shipped_calibration_runs": calib, "fit_on_all_sources": refit,
                            "serving_shipped": {SERVING_KEY + k: v for k, v in fitted.SERVING_ATTAINED.items()},
                            "serving_fit_on_all_sources": serving_refit,
                            "serving_loso": {k: v["factors"] for k, v in serving_loso.items()}},
        "set": {
            "training_runs": len(TRAINING), "expressible": len(counted), "not_expressible": len(TRAINING) - len(counted),
            "sources": sorted({r.source for r in TRAINING}), "sources_with_expressible_runs":
                sorted({r.source for r in counted}), "organisations": sorted({SOURCES[r.source].organisation
                                                                              for r in TRAINING}),
            "devices": sorted({r.hardware if r.device is None else r.device for r in TRAINING}),
            "precisions": {p: sum(r.precision == p for r in TRAINING) for p in ("bf16", "fp8")},
            "moe_runs": sum(r.model.num_experts is not None for r in TRAINING),
            "serving_points": len(SERVING), "serving_sources": sorted({p.source for p in SERVING})},
        "summary": {
            "in_sample_shipped": _headline(_grouped(ok, "source", "shipped_error"), ok, "shipped_error"),
            "in_sample_refit": _headline(_grouped(ok, "source", "in_sample_error"), ok, "in_sample_error"),
            "leave_one_source_out": _headline(_grouped(ok, "source", "loso_error"), ok, "loso_error"),
            "leave_one_organisation_out": _headline(_grouped(ok, "organisation", "leave_organisation_out_error"), ok,
                                                    "leave_organisation_out_error"),
            "inside_band_shipped": sum(r["shipped"]["inside_band"] for r in ok),
            "planner_says_does_not_fit": [r["id"] for r in ok if r["shipped"]["band"]["fitting"] == 0],
            "by_precision_loso": _grouped(ok, "precision", "loso_error"),
            "loso_factors": {s: d["factors"] for s, d in by_source.items()},
            "not_expressible_by_feature": unlocks,
        },
        "serving": {
            "summary": {name: {"all": stats(r[name]["error"] for r in serving),
                               "by_source": _grouped([{**r, "e": r[name]["error"]} for r in serving], "source", "e")}
                        for name in (*serving_sets, "loso")},
            "points": serving},
        "sources": {k: vars(s) for k, s in SOURCES.items()},
        "training": rows,
        "reproduce": "PYTHONPATH=. python benchmarks/plan_validation.py",
    }


def _print(doc: dict[str, Any]) -> None:
    s, st = doc["summary"], doc["set"]
    print(f"training: {st['training_runs']} runs from {len(st['sources'])} sources ({len(st['organisations'])} "
          f"organisations); {st['expressible']} expressible from {len(st['sources_with_expressible_runs'])} sources")
    fp = doc["free_parameters"]
    print(f"free parameters: shipped {fp['shipped']}, fitted on all sources {fp['fit_on_all_sources']}")
    for key in ("in_sample_shipped", "in_sample_refit", "leave_one_source_out", "leave_one_organisation_out"):
        h = s[key]
        print(f"{key:27} mean of source means {h['mean_of_source_means']:.1%}; pooled mean "
              f"{h['pooled']['mean_abs_error']:.1%} worst {h['pooled']['worst_abs_error']:.1%}; worst source "
              f"{h['worst_source']} {h['worst_source_mean']:.1%}")
    for src, v in s["leave_one_source_out"]["by_source"].items():
        print(f"  LOSO {src:18} n={v['n']:3} mean {v['mean_abs_error']:6.1%} worst {v['worst_abs_error']:6.1%} "
              f"signed {v['mean_signed_error']:+.1%}")
    print(f"serving free parameters: shipped {fp['serving_shipped']}, fitted on all sources "
          f"{fp['serving_fit_on_all_sources']}, leave-one-source-out {fp['serving_loso']}")
    for name, v in doc["serving"]["summary"].items():
        print(f"serving ({name}): n={v['all']['n']} mean {v['all']['mean_abs_error']:.1%} worst "
              f"{v['all']['worst_abs_error']:.1%}; " + "; ".join(
                  f"{src} {b['mean_abs_error']:.1%}/{b['worst_abs_error']:.1%}" for src, b in v["by_source"].items()))
    print(f"not expressible: {st['not_expressible']} runs; features: {list(s['not_expressible_by_feature'])}")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--markdown", action="store_true", help="print the tables of docs/validation.md from the "
                                                                "committed JSON")
    parser.add_argument("--fit", action="store_true", help="print the fitted free parameters (on the shipped "
                                                           "calibration runs, and on every source); write nothing")
    args = parser.parse_args()
    if args.markdown:
        print(markdown(json.loads(OUT.read_text())))
        return
    if args.fit:
        pred, counted = Predictor(), [r for r in TRAINING if r.expressible]
        print(f"SUSTAINED_TENSOR fitted on the shipped calibration runs: "
              f"{fit(pred, [r for r in counted if r.shipped_calibration])}; on every source: {fit(pred, counted)} "
              f"(accelkit/plan/fitted.py has {fitted.SUSTAINED_TENSOR})")
        print(f"SERVING_ATTAINED fitted on every serving point: {fit_serving(pred, SERVING)} (accelkit/plan/fitted.py "
              f"has {fitted.SERVING_ATTAINED})")
        return
    doc = build()
    doc["environment"] = environment(with_torch=False)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    _print(doc)
    print(f"→ {OUT}")


if __name__ == "__main__":
    main()
