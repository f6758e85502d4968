"""The tables of docs/validation.md, rendered from the harness's JSON (tests/unit/test_plan_validation.py checks
that the page shows exactly these lines)."""

from __future__ import annotations

from typing import Any


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{x:+.1%}" if signed else f"{x:.1%}"


def _layout(fields: dict[str, Any]) -> str:
    """The published layout; '?' marks a field the source does not give."""
    def f(key: str, label: str) -> str:
        v = fields[key]
        return f"{label}{'?' if v is None else v}"
    parts = [f("tp", "tp"), f("pp", "pp"), f("cp", "cp"), f("ep", "ep"), f("vp", "vp"), f("micro_batch", "mb"),
             f("zero", "zero"), f("recompute", "rc=")]
    every = fields.get("recompute_every", 1)  # one block in n checkpointed
    if every != 1:
        parts[-1] += f"/{'?' if every is None else every}"
    sp = fields["sequence_parallel"]
    return " ".join(parts) + (" sp?" if sp is None else " sp" if sp else "")


def _rate(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}"


def headline(doc: dict[str, Any]) -> list[str]:
    s, st = doc["summary"], doc["set"]
    out = ["| evaluation | runs | mean of the sources' means | pooled mean \\|error\\| | pooled worst | worst source |",
           "|---|---:|---:|---:|---:|---|"]
    names = {"in_sample_shipped": "in-sample, shipped parameters (fitted.py)",
             "in_sample_refit": "in-sample, parameters fitted on every source",
             "leave_one_source_out": "**leave-one-source-out**",
             "leave_one_organisation_out": "leave-one-organisation-out"}
    for key, name in names.items():
        h = s[key]
        out.append(f"| {name} | {st['expressible']} | {_pct(h['mean_of_source_means'])} | "
                   f"{_pct(h['pooled']['mean_abs_error'])} | {_pct(h['pooled']['worst_abs_error'])} | "
                   f"{h['worst_source']} {_pct(h['worst_source_mean'])} |")
    return out


def parameters(doc: dict[str, Any]) -> list[str]:
    fp = doc["free_parameters"]
    folds = doc["summary"]["loso_factors"]
    out = ["| parameter | shipped (fitted.py) | fitted on the shipped calibration runs (expressible) | fitted on every source "
           "| range over the leave-one-source-out folds |", "|---|---:|---:|---:|---:|"]
    for fam, value in fp["shipped"].items():
        vals = [f[fam] for f in folds.values() if fam in f]
        out.append(f"| sustained_tensor[{fam}] | {value:g} | {fp['fit_on_shipped_calibration_runs'].get(fam, '-'):g} "
                   f"| {fp['fit_on_all_sources'].get(fam, value):g} | {min(vals):g} – {max(vals):g} |")
    for key, value in fp.get("serving_shipped", {}).items():  # serving: fitted on serving points only
        fam = key.split(":", 1)[1]
        folds_s = {src: f[key] for src, f in fp["serving_loso"].items() if f.get(key) != value}
        spread = ", ".join(f"{v:g} without {src}" for src, v in folds_s.items()) or "-"
        out.append(f"| serving_attained[{fam}] | {value:g} | - (serving) | {fp['serving_fit_on_all_sources'][key]:g} "
                   f"| {spread} |")
    return out


def per_source(doc: dict[str, Any]) -> list[str]:
    s = doc["summary"]
    rows = doc["training"]
    out = ["| source | organisation | runs (expressible / recorded) | in-sample mean / worst (shipped) | LOSO "
           "factors A100 / H100 | **LOSO mean** / worst | LOSO signed |", "|---|---|---:|---:|---:|---:|---:|"]
    for key, src in doc["sources"].items():
        mine = [r for r in rows if r["source"] == key]
        if not mine:
            continue
        ok = [r for r in mine if r["status"] == "expressible"]
        if not ok:
            out.append(f"| {key} | {src['organisation']} | 0 / {len(mine)} | - | - | - | - |")
            continue
        ins, lo = s["in_sample_shipped"]["by_source"][key], s["leave_one_source_out"]["by_source"][key]
        f = s["loso_factors"][key]
        out.append(f"| {key} | {src['organisation']} | {len(ok)} / {len(mine)} | {_pct(ins['mean_abs_error'])} / "
                   f"{_pct(ins['worst_abs_error'])} | {f.get('A100', '-'):g} / {f.get('H100', '-'):g} | "
                   f"**{_pct(lo['mean_abs_error'])}** / {_pct(lo['worst_abs_error'])} | "
                   f"{_pct(lo['mean_signed_error'], True)} |")
    return out


def not_expressible(doc: dict[str, Any]) -> list[str]:
    """The runs kept out, by the feature that would unlock them; no table when every recorded run is expressible."""
    features = doc["summary"]["not_expressible_by_feature"]
    if not features:
        return []
    out = ["| feature the planner needs | runs it would unlock | runs |", "|---|---:|---|"]
    for feature, ids in features.items():
        out.append(f"| {feature} | {len(ids)} | {', '.join(f'`{i}`' for i in ids)} |")
    return out


def serving_summary(doc: dict[str, Any]) -> list[str]:
    sv = doc["serving"]["summary"]
    out = ["| serving source | points | mean \\|error\\| / worst (shipped, in-sample) | mean / worst (every "
           "parameter refitted) | **leave-one-source-out** mean / worst | LOSO signed |", "|---|---:|---:|---:|---:|---:|"]
    for src, st in sv["shipped"]["by_source"].items():
        rf, lo = sv["refit"]["by_source"][src], sv["loso"]["by_source"][src]
        out.append(f"| {src} | {st['n']} | {_pct(st['mean_abs_error'])} / {_pct(st['worst_abs_error'])} | "
                   f"{_pct(rf['mean_abs_error'])} / {_pct(rf['worst_abs_error'])} | "
                   f"**{_pct(lo['mean_abs_error'])}** / {_pct(lo['worst_abs_error'])} | "
                   f"{_pct(lo['mean_signed_error'], True)} |")
    a, r, lo = sv["shipped"]["all"], sv["refit"]["all"], sv["loso"]["all"]
    out.append(f"| **all** | {a['n']} | {_pct(a['mean_abs_error'])} / {_pct(a['worst_abs_error'])} | "
               f"{_pct(r['mean_abs_error'])} / {_pct(r['worst_abs_error'])} | **{_pct(lo['mean_abs_error'])}** / "
               f"{_pct(lo['worst_abs_error'])} | {_pct(lo['mean_signed_error'], True)} |")
    return out


def per_run(doc: dict[str, Any]) -> list[str]:
    out = ["| run | source | devices | prec | layout as published (? = not given) | published tok/s/dev | "
           "band (shipped) | error | LOSO error |", "|---|---|---:|---|---|---:|---:|---:|---:|"]
    for r in doc["training"]:
        dev = f"{r['num_devices']} × {r['device'] or r['hardware'].split(',')[0]}"
        head = (f"| `{r['id']}` | {r['source']} | {dev} | {r['precision']} | {_layout(r['fields'])} | "
                f"{_rate(r['published']['tokens_per_s_per_device'])} |")
        if r["status"] != "expressible":
            out.append(f"{head} not expressible | - | - |")
            continue
        b = r["shipped"]["band"]
        band = _rate(b["low"]) if b["low"] == b["high"] else f"{_rate(b['low'])} – {_rate(b['high'])}"
        fit = "" if b["fitting"] else " (no fit)"
        out.append(f"{head} {band}{fit} | {_pct(r['shipped_error'], True)} | {_pct(r['loso_error'], True)} |")
    return out


def serving_points(doc: dict[str, Any]) -> list[str]:
    out = ["| point | metric | published | band (shipped) | error | LOSO error |", "|---|---|---:|---:|---:|---:|"]
    for p in doc["serving"]["points"]:
        b = p["shipped"]["band"]
        fmt = _rate if p["metric"] == "output_tokens_per_s" else (lambda x: f"{x * 1e3:,.1f} ms")
        band = fmt(b["low"]) if b["low"] == b["high"] else f"{fmt(b['low'])} – {fmt(b['high'])}"
        out.append(f"| `{p['id']}` | {p['metric']} | {fmt(p['published'])} | {band} | "
                   f"{_pct(p['shipped']['error'], True)} | {_pct(p['loso']['error'], True)} |")
    return out


def markdown(doc: dict[str, Any]) -> str:
    """Every table docs/validation.md shows, separated by blank lines."""
    parts = [headline(doc), parameters(doc), per_source(doc), not_expressible(doc), serving_summary(doc),
             per_run(doc), serving_points(doc)]
    return "\n\n".join("\n".join(p) for p in parts if p)
