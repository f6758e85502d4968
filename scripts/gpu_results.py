"""Turn the $OUT folder of scripts/gpu_check.sh into a summary and into committed files.

    python3 scripts/gpu_results.py summarize OUT [--seconds S]   # OUT/gpu_check.json (gpu_check.sh runs this)
    python3 scripts/gpu_results.py commit OUT                   # → benchmarks/results/gpu/<gpu>/ + the git command

``summarize`` reads what each part wrote (exit status and seconds from OUT/parts.tsv, the JSON documents) and
writes one ``gpu_check.json``: per part its status and seconds, the pytest counts, the fp8-vs-bf16 training
comparison (tokens/s, MFU against the datasheet and the probe, the first steps' losses, the verdicts, the whole
run's peak memory against its largest variant's), the reference suite (per workload, and the published figures
beside ours) and the engine benchmark's headline. It exits 1 when any part failed.

``commit`` copies the JSON (not the store, not the HTML) to ``benchmarks/results/gpu/<gpu-name>/`` with a
SUMMARY.md of the headline numbers, and prints the ``git add`` line: the next GPU session commits in one step.
Standard library only (the GPU image may lack the project's dependencies when this runs).
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import shutil
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
#: what `commit` copies (source name in OUT → name under benchmarks/results/gpu/<gpu>/)
KEEP = {
    "gpu_check.json": "gpu_check.json",
    "hw_probe.json": "hw_probe.json",
    "bench_llm_train_1b_fp8.json": "bench_llm_train_1b_fp8.json",
    "bench_reference_quick.json": "bench_reference_quick.json",
    "bench_sd3_medium_fp8.json": "bench_sd3_medium_fp8.json",
    "serve_throughput_cuda.json": "serve_throughput_cuda.json",
    "serve_qwen3_moe.json": "serve_qwen3_moe.json",
    "serve_fp8_checkpoint.json": "serve_fp8_checkpoint.json",
    "attention_backends.json": "serve_attention_backends.json",
    "structured_outputs_cuda_smollm2-135m.json": "structured_outputs_cuda_smollm2-135m.json",
    "nvidia-smi.csv": "nvidia-smi.csv",
    "pytest_gpu.out": "pytest_gpu.txt",
}


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def parts(out: Path) -> dict[str, dict[str, Any]]:
    found: dict[str, dict[str, Any]] = {}
    table = out / "parts.tsv"
    if table.exists():
        for name, rc, seconds in csv.reader(table.read_text().splitlines(), delimiter="\t"):
            status = ("absent" if rc == "absent" else "skipped (time budget)" if rc == "skipped" else "ok" if rc == "0"
                      else "timed out" if rc in ("124", "137") else f"failed (exit {rc})")
            found[name] = {"status": status, "seconds": int(seconds)}
    return found


def pytest_counts(out: Path) -> dict[str, Any] | None:
    try:
        suite = ET.parse(out / "pytest-gpu.xml").getroot()
    except (OSError, ET.ParseError):
        return None
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")  # type: ignore[assignment]
    if suite is None:
        return None
    failed = [f"{case.get('classname')}::{case.get('name')}" for case in suite.iter("testcase")
              if case.find("failure") is not None or case.find("error") is not None]
    skipped = [f"{case.get('name')}: {case.find('skipped').get('message')}"  # type: ignore[union-attr]
               for case in suite.iter("testcase") if case.find("skipped") is not None]
    return {"tests": int(suite.get("tests", 0)), "failures": int(suite.get("failures", 0)),
            "errors": int(suite.get("errors", 0)), "skipped": skipped, "failed": failed}


def _variant(v: dict[str, Any]) -> dict[str, Any]:
    mfu = v.get("mfu") or {}
    return {
        "name": v["name"], "step": v["step"], "throughput": (v.get("throughput") or {}).get("value"),
        "unit": (v.get("throughput") or {}).get("unit"),
        "mfu_vs_datasheet": (mfu.get("datasheet") or {}).get("value"), "mfu_vs_probe": (mfu.get("probe") or {}).get("value"),
        "peak_memory_bytes": (v.get("memory_bytes") or {}).get("peak"),
        "loss_first_steps": v.get("loss_first_steps"),
        "ratio_vs_first": (v.get("comparison") or {}).get("ratio"),
        "measured_over_predicted": (v.get("predicted") or {}).get("ratio"),
        "drift_sqnr_db": (v.get("accuracy") or {}).get("sqnr_db"),
    }


def training(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    """The fp8-vs-bf16 comparison: each variant, the verdicts, and the memory criterion of issue 13."""
    if not doc:
        return None
    variants = [_variant(v) for v in doc.get("variants", [])]
    largest = max((v["peak_memory_bytes"] or 0 for v in variants), default=0)
    whole = doc.get("peak_memory_bytes")
    return {
        "label": doc.get("label"), "hardware": doc.get("hardware"), "variants": variants,
        "failed": doc.get("failed", []), "refused": doc.get("refused", []), "verdicts": doc.get("verdicts", []),
        "peak_memory": {"whole_run_bytes": whole, "largest_variant_bytes": largest or None,
                        "ratio": whole / largest if whole and largest else None, "bound": 1.2,
                        "scope": doc.get("peak_memory_scope")},
        "all_variants_completed": not doc.get("failed") and {v["name"] for v in variants} >= {"bf16", "fp8"},
    }


def text_to_image(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    """The SD3-medium bf16-vs-fp8 run: images/s, J/image, the denoiser's MFU and the image gate per variant, and
    fp8 ÷ bf16 (the claim docs/bench.md says how to check: images/s × 2.4, energy per image × 0.6)."""
    if not doc:
        return None
    rows = []
    for v in doc.get("variants", []):
        phases = {p["phase"]: p for p in v.get("phase_breakdown") or []}
        den = (phases.get("denoiser") or {}).get("mfu") or {}
        gate = v.get("gate") or {}
        rows.append({**_variant(v), "j_per_image": (v.get("energy") or {}).get("j_per_item"),
                     "denoiser_mfu_vs_datasheet": (den.get("datasheet") or {}).get("value"),
                     "denoiser_share": (phases.get("denoiser") or {}).get("share"),
                     "gate_passed": gate.get("passed"), "gate_figures": gate.get("figures")})
    by = {r["name"]: r for r in rows}
    bf16, fp8 = by.get("bf16"), by.get("fp8")

    def ratio(key: str) -> float | None:
        a, b = (fp8 or {}).get(key), (bf16 or {}).get(key)
        return a / b if a and b else None

    return {"label": doc.get("label"), "hardware": doc.get("hardware"), "variants": rows,
            "fp8_over_bf16": {"images_per_s": ratio("throughput"), "j_per_image": ratio("j_per_image")},
            "failed": doc.get("failed", []), "refused": doc.get("refused", []), "verdicts": doc.get("verdicts", [])}


def suite(doc: dict[str, Any] | None) -> dict[str, Any] | None:
    if not doc:
        return None
    return {
        "runs": [{"workload": r.get("label"), "variants": [_variant(v) for v in r.get("variants", [])],
                  "failed": r.get("failed", []), "refused": r.get("refused", []), "verdicts": r.get("verdicts", [])}
                 for r in doc.get("runs", [])],
        "skipped": doc.get("skipped", []), "failed": doc.get("failed", []), "published": doc.get("published", []),
    }


def summarize(out: Path, seconds: int | None) -> dict[str, Any]:
    serve = _json(out / "serve_throughput_cuda.json")
    summary = {
        "seconds": seconds, "parts": parts(out), "pytest_gpu": pytest_counts(out),
        "hw_probe": (_json(out / "hw_probe.json") or {}).get("details", {}).get("matmul"),
        "fp8_vs_bf16_training_1b": training(_json(out / "bench_llm_train_1b_fp8.json")),
        "reference_suite_quick": suite(_json(out / "bench_reference_quick.json")),
        "fp8_vs_bf16_sd3_medium": text_to_image(_json(out / "bench_sd3_medium_fp8.json")),
        "serve_throughput_cuda": {k: serve[k] for k in ("summary", "results", "headline", "goals", "failed") if k in serve}
        if isinstance(serve, dict) else None,
        "serve_qwen3_moe": _runs(_json(out / "serve_qwen3_moe.json")),
        "serve_fp8_checkpoint": _runs(_json(out / "serve_fp8_checkpoint.json")),
        "gpu": (out / "nvidia-smi.csv").read_text().strip() if (out / "nvidia-smi.csv").exists() else None,
    }
    summary["ok"] = all(p["status"] in ("ok", "absent") for p in summary["parts"].values())
    return summary


def _runs(doc: Any) -> dict[str, Any] | None:
    """benchmarks/serve_real_shapes.py's document: each run's tok/s, weight vs checkpoint bytes, FP8 matmul layers."""
    if not isinstance(doc, dict) or not isinstance(doc.get("runs"), dict):
        return None
    return {"runs": doc["runs"], **({"fp8_vs_bf16": doc["fp8_vs_bf16"]} if "fp8_vs_bf16" in doc else {})}


def gpu_slug(out: Path) -> str:
    """'NVIDIA H200' → 'nvidia-h200' (from nvidia-smi.csv), else 'gpu'."""
    try:
        rows = list(csv.reader((out / "nvidia-smi.csv").read_text().splitlines()))
        name = rows[1][0]
    except (OSError, IndexError):
        return "gpu"
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "gpu"


def commit(out: Path, root: Path = REPO / "benchmarks" / "results" / "gpu") -> list[Path]:
    dest = root / gpu_slug(out)
    dest.mkdir(parents=True, exist_ok=True)
    written = []
    for src, name in KEEP.items():
        if (out / src).exists():
            shutil.copyfile(out / src, dest / name)
            written.append(dest / name)
    summary = _json(out / "gpu_check.json")
    if summary:
        (dest / "SUMMARY.md").write_text(markdown(summary, dest))
        written.append(dest / "SUMMARY.md")
    return written


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x * 100:.1f}%"


def _num(x: float | None) -> str:
    return "-" if x is None else f"{x:,.0f}"


def markdown(summary: dict[str, Any], dest: Path) -> str:
    lines = [f"# GPU check on {summary.get('gpu') or 'a GPU'}", "",
             "Measured by `scripts/gpu_check.sh` (issue 13); JSON beside this file. "
             f"Total {summary.get('seconds')} s.", "", "| part | status | seconds |", "|---|---|---:|"]
    lines += [f"| {k} | {v['status']} | {v['seconds']} |" for k, v in summary.get("parts", {}).items()]
    train = summary.get("fp8_vs_bf16_training_1b")
    if train:
        lines += ["", f"## fp8 vs bf16 training, {train['label']}", "",
                  "| variant | tokens/s | MFU (datasheet) | MFU (probe) | loss, first → last of the first steps |",
                  "|---|---:|---:|---:|---|"]
        for v in train["variants"]:
            losses = v["loss_first_steps"] or []
            loss = f"{losses[0]:.4g} → {losses[-1]:.4g} ({len(losses)} steps)" if losses and None not in losses else "-"
            lines.append(f"| {v['name']} | {_num(v['throughput'])} | {_pct(v['mfu_vs_datasheet'])} | "
                         f"{_pct(v['mfu_vs_probe'])} | {loss} |")
        lines += [""] + [f"- {line}" for line in train["verdicts"]]
        mem = train["peak_memory"]
        if mem.get("ratio") is not None:
            lines.append(f"- whole run's peak memory {mem['whole_run_bytes'] / 1e9:.1f} GB = {mem['ratio']:.2f}× the "
                         f"largest variant's {mem['largest_variant_bytes'] / 1e9:.1f} GB (bound 1.2×)")
    t2i = summary.get("fp8_vs_bf16_sd3_medium")
    if t2i:
        lines += ["", f"## fp8 vs bf16 text-to-image, {t2i['label']}", "",
                  "| variant | images/s | J/image | denoiser MFU (datasheet) | image gate |", "|---|---:|---:|---:|---|"]
        for v in t2i["variants"]:
            gate = "-" if v["gate_passed"] is None else ("pass" if v["gate_passed"] else "FAIL")
            lines.append(f"| {v['name']} | {v['throughput'] or 0:.3g} | {_num(v['j_per_image'])} | "
                         f"{_pct(v['denoiser_mfu_vs_datasheet'])} | {gate} |")
        r = t2i["fp8_over_bf16"]
        lines.append(f"- fp8 ÷ bf16: images/s {r['images_per_s'] or 0:.2f}×, J/image {r['j_per_image'] or 0:.2f}× "
                     "(the claim: 2.4× and 0.6×)")
    ref = summary.get("reference_suite_quick")
    if ref and ref.get("published"):
        lines += ["", "## Reference suite (quick), published per-GPU figures beside ours", "",
                  "| workload | published | what | source | ours (best variant) |", "|---|---:|---|---|---:|"]
        for p in ref["published"]:
            lines.append(f"| {p['key']} | {p['value']:,} {p['unit']} | {p['what']} | {p['source']} | "
                         f"{_num(p.get('ours_best'))} {p.get('ours_unit') or ''} ({p.get('ours_variant')}) |")
    lines += ["", f"Reproduce: `OUT=/tmp/out scripts/gpu_check.sh && python3 scripts/gpu_results.py commit /tmp/out` "
              f"(files: {dest.relative_to(REPO) if dest.is_relative_to(REPO) else dest})."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    s = sub.add_parser("summarize", help="write OUT/gpu_check.json and print it")
    s.add_argument("out", type=Path)
    s.add_argument("--seconds", type=int, default=None)
    c = sub.add_parser("commit", help="copy the results to benchmarks/results/gpu/<gpu>/")
    c.add_argument("out", type=Path)
    args = parser.parse_args(argv)
    if not args.out.is_dir():
        print(f"error: {args.out} is not a folder written by scripts/gpu_check.sh", file=sys.stderr)
        return 2
    if args.command == "summarize":
        summary = summarize(args.out, args.seconds)
        (args.out / "gpu_check.json").write_text(json.dumps(summary, indent=2) + "\n")
        print(json.dumps(summary, indent=2))
        return 0 if summary["ok"] else 1
    written = commit(args.out)
    for path in written:
        print(f"wrote {path}")
    if written:
        print("git add " + " ".join(str(p.relative_to(REPO)) for p in written))
    return 0 if written else 1


if __name__ == "__main__":
    sys.exit(main())
