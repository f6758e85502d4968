"""Does the fp32 reference cost more memory than the variants? (issue 13)

Runs, for each checkout given (default: this one), the shape of tests/integration/test_bench_reference_memory.py —
a logits-dominated decoder (vocabulary 32000 on hidden 64) at batch 16 × 256 on the CPU — twice, each in its own
process, and reads that process's own peak RSS (VmHWM; the bench's ``peak_memory_bytes`` keeps it across its
per-block resets of the high-water mark, which ``os.wait4``'s ``ru_maxrss`` does not survive):

1. the bf16 training step alone (the workload's ``prepare`` and three steps: the variant's own peak);
2. the whole ``accelkit bench llm-train --precision bf16`` command (reference pass, load, warm-up, measure).

The ratio whole ÷ alone is what issue 13 bounds at 1.2. Pass an older checkout too to see what it did (one from
before the bench kept VmHWM across its resets reports only the peak since its last measured block began):

    .venv/bin/python benchmarks/reference_memory.py [--repo /path/to/other/checkout ...]

Writes benchmarks/results/reference_memory_cpu.json (with the environment and each checkout's git commit).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
from tests.integration.test_bench_reference_memory import CONFIG, SHAPE, VARIANT_ALONE, peak_mib  # noqa: E402

OUT = HERE / "benchmarks" / "results" / "reference_memory_cpu.json"


def run_python(repo: Path, args: list[str], home: Path) -> str:
    """Run Python in ``repo``; its stdout."""
    env = {**os.environ, "PYTHONPATH": str(repo), "ACCELKIT_HOME": str(home)}
    proc = subprocess.run([sys.executable, *args], cwd=repo, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"{repo}: {' '.join(args[:4])} failed:\n{proc.stderr[-2000:]}")
    return proc.stdout


def measure(repo: Path, config: Path, home: Path) -> dict:
    alone = peak_mib(run_python(repo, ["-c", VARIANT_ALONE, json.dumps({"model": str(config), **SHAPE}), "bf16"],
                                home), bench=False)
    stdout = run_python(repo, [
        "-m", "accelkit", "bench", "llm-train", "--model", str(config), "--batch-size", str(SHAPE["batch_size"]),
        "--seq-len", str(SHAPE["seq_len"]), "--precision", "bf16", "--device", "cpu", "--warmup", "0",
        "--warmup-time", "0", "--min-iterations", "2", "--min-time", "0", "--no-probe", "--no-save", "--json"], home)
    try:
        whole = peak_mib(stdout, bench=True)
    except KeyError:
        raise SystemExit(f"{repo}: its bench JSON has no peak_memory_bytes (a checkout from before it was recorded)"
                         ) from None
    commit = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    return {"repo": str(repo), "git_commit": commit, "variant_alone_peak_mib": alone, "whole_command_peak_mib": whole,
            "ratio": whole / alone, "within_1_2x": whole <= 1.2 * alone}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repo", type=Path, action="append", default=[], help="another checkout to measure too")
    args = parser.parse_args()
    from accelkit.hardware.detect import environment

    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "config.json"
        config.write_text(json.dumps(CONFIG))
        runs = [measure(repo.resolve(), config, Path(tmp) / f"home{i}") for i, repo in enumerate([HERE, *args.repo])]
    doc = {"benchmark": "reference_memory", "shape": {**SHAPE, "model": CONFIG}, "bound": 1.2, "runs": runs,
           "method": __doc__.split("\n\n")[1], "environment": environment(with_torch=True)}
    OUT.write_text(json.dumps(doc, indent=2) + "\n")
    for r in runs:
        print(f"{r['repo']} ({r['git_commit'][:9]}): bf16 variant alone {r['variant_alone_peak_mib']:.0f} MiB, whole "
              f"command {r['whole_command_peak_mib']:.0f} MiB → {r['ratio']:.2f}×")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()
