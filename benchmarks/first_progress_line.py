"""How soon does a long command say something when stdout and stderr are both pipes (a CI log, `cmd 2>&1 | tee`)?

Starts each command as a real process (``python -m accelkit …``, stdout and stderr pipes, a fresh ACCELKIT_HOME)
and times, from just before the process is started to the moment its first stderr line arrives, the first line
(whatever it is) and the first progress line (``[  0.5 s] …``, or bench's own lines), then kills the process (its
own process group) — these commands run minutes, and only their start is measured. ``serve`` serves the tiny test
model (``accelkit.serve.testing.save_tiny_model``); for it the time to its ready line is recorded as well. The load
average (``/proc/loadavg``) is read before and after each command's runs.

    .venv/bin/python benchmarks/first_progress_line.py [--runs 5]

Writes benchmarks/results/first_progress_line.json (with the environment).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

RESULTS = Path(__file__).parent / "results" / "first_progress_line.json"
PROGRESS_LINE = re.compile(r"^\[ *\d+\.\d s\] |^bench ")
READY_LINE = re.compile(r"^serving ")


def _loadavg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def run_once(args: list[str], home: str, *, stop_at: re.Pattern[str], timeout_s: float = 300) -> dict[str, object]:
    """One start of ``accelkit ARGS``: seconds to its first stderr line, first progress line and ``stop_at`` line."""
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "accelkit", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, bufsize=1, start_new_session=True, env={**os.environ, "ACCELKIT_HOME": home})
    seen: dict[str, object] = {"first_line_s": None, "first_progress_s": None, "stop_s": None, "first_line": None}

    def read() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            now = time.perf_counter() - t0
            if seen["first_line_s"] is None:
                seen["first_line_s"], seen["first_line"] = now, line.rstrip("\n")[:120]
            if seen["first_progress_s"] is None and PROGRESS_LINE.match(line):
                seen["first_progress_s"] = now
            if stop_at.match(line):
                seen["stop_s"] = now
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout_s)
    with contextlib.suppress(ProcessLookupError):  # it may have ended by itself
        os.killpg(proc.pid, signal.SIGKILL)  # the group this script started, nothing else
    proc.wait(timeout=60)
    return seen


def _summary(values: list[float | None]) -> dict[str, object]:
    got = [v for v in values if v is not None]
    return {"median_s": round(statistics.median(got), 2) if got else None, "max_s": round(max(got), 2) if got else None,
            "missing": len(values) - len(got)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    opts = parser.parse_args()
    from accelkit.hardware.detect import environment
    from accelkit.serve.testing import save_tiny_model

    with tempfile.TemporaryDirectory(prefix="first-progress-") as tmp:
        model = str(save_tiny_model(Path(tmp) / "tiny", "tiny-llama"))
        serve = ["serve", "--model", model, "--port", "0", "--kv-cache-memory", "8MiB"]
        commands = {  # name: (args, the line after which the process is killed)
            "serve (tiny model)": (serve, READY_LINE),
            "serve --progress (tiny model)": ([*serve, "--progress"], READY_LINE),
            "bench suite reference --quick --device cpu": (["bench", "suite", "reference", "--quick", "--device", "cpu"],
                                                           PROGRESS_LINE),
            "hw probe --quick": (["hw", "probe", "--quick"], PROGRESS_LINE),
        }
        report: dict[str, object] = {}
        for name, (args, stop_at) in commands.items():
            load_before = _loadavg()
            runs = [run_once(args, tempfile.mkdtemp(dir=tmp), stop_at=stop_at) for _ in range(opts.runs)]
            entry = {
                "command": "accelkit " + " ".join(a if a != model else "<tiny model dir>" for a in args),
                "first_line": _summary([r["first_line_s"] for r in runs]),  # type: ignore[misc]
                "first_progress_line": _summary([r["first_progress_s"] for r in runs]),  # type: ignore[misc]
                "first_lines": sorted({str(r["first_line"]) for r in runs}),
                "loadavg_before": load_before, "loadavg_after": _loadavg(),
                "runs": runs,
            }
            if stop_at is READY_LINE:
                entry["ready_line"] = _summary([r["stop_s"] for r in runs])  # type: ignore[misc]
            report[name] = entry
            print(name, json.dumps({k: v for k, v in entry.items() if k != "runs"}), flush=True)
    document = {"benchmark": "first_progress_line", "runs_each": opts.runs, "commands": report,
                "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "environment": environment(with_torch=False)}
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(document, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
