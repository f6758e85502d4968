"""`accelkit bench diffusion --size tiny` on this CPU, as a user runs it: the real command in a subprocess, timed
from start to exit (issue 34: ≤ 60 s with the default loop), for each architecture (SD3 MMDiT, FLUX, SDXL UNet);
then fp32 against bf16 on tiny-sd3 for the image accuracy gate. Kept per run: wall seconds, images/s and seconds
per image, each phase's share, FLOPs per image counted (FlopCounterMode on the meta device) beside the closed form
the planner uses, and the gate's figures.

Reproduce: `.venv/bin/python benchmarks/text_to_image_cpu.py` (writes benchmarks/results/text_to_image_cpu.json;
a few minutes on 2 cores; run it on a quiet machine — the wall times are the point).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

OUT = Path(__file__).parent / "results" / "text_to_image_cpu.json"
LIMIT_S = 60.0  # issue 34's acceptance bound for the default tiny run


def bench(*args: str, home: str) -> tuple[float, dict[str, Any]]:
    """(wall seconds, the --json document) of one `accelkit bench diffusion` run."""
    cmd = [sys.executable, "-m", "accelkit", "bench", "diffusion", "--device", "cpu", "--json", *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "ACCELKIT_HOME": home},
                          timeout=1800)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip().splitlines()[-1:]}")
    return wall, json.loads(proc.stdout)


def summary(wall: float, doc: dict[str, Any]) -> dict[str, Any]:
    variants = []
    for v in doc["variants"]:
        value = v["throughput"]["value"]
        variants.append({
            "name": v["name"], "images_per_s": value, "s_per_image": 1 / value if value else None,
            "latency_p50_s": v["latency_s"]["median"], "noise": v["noise"],
            "flops_per_image_counted": v["mfu"]["flops_per_item"],
            "flops_per_image_closed_form": v["mfu"]["analytic_flops_per_item"],
            "phases": {p["phase"]: {"median_s": p["median_s"], "share": p["share"]} for p in v["phase_breakdown"]},
            "gate": v.get("gate"),
        })
    return {"label": doc["label"], "wall_s": wall, "within_limit": wall <= LIMIT_S, "variants": variants,
            "notes": doc["notes"]}


def main() -> None:
    from accelkit.hardware.detect import environment

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    runs = []
    with tempfile.TemporaryDirectory() as home:
        # a stored probe first, as on a machine that has run `accelkit hw probe` (MFU needs a CPU peak)
        subprocess.run([sys.executable, "-m", "accelkit", "hw", "probe", "--quick", "--device", "cpu"],
                       env={**os.environ, "ACCELKIT_HOME": home}, capture_output=True, check=True)
        for arch in ("sd3", "flux", "sdxl"):
            wall, doc = bench("--size", "tiny", "--arch", arch, home=home)
            runs.append({"command": f"accelkit bench diffusion --size tiny --arch {arch}", **summary(wall, doc)})
            print(f"{arch}: {wall:.1f} s", file=sys.stderr)
        wall, doc = bench("--size", "tiny", "--precision", "fp32,bf16", home=home)
        runs.append({"command": "accelkit bench diffusion --size tiny --precision fp32,bf16", **summary(wall, doc)})
    report = {"benchmark": "text_to_image_cpu", "limit_s": LIMIT_S, "runs": runs,
              "environment": environment(with_torch=True)}
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
