"""Issue 29 acceptance 3: a comparison run under a bursty background load — CPU hogs the test switches on and off
(SIGSTOP / SIGCONT) while a real `accelkit bench` compares fp32 with bf16 — prints verdicts that agree with the
ratio, the throughputs and the medians beside them, or says "inconclusive" and why. On a loaded machine `make demo`
printed "bf16 fastest at 1.77×" beside a lower bf16 throughput and a median latency ten times fp32's."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

from typer.testing import CliRunner

from accelkit.cli.app import app

HOG = "while True: pass"


def _bursty_load(stop: threading.Event) -> None:
    """One busy process per core, stopped and continued in bursts of uneven length (0.2–1.1 s), until ``stop``."""
    hogs = [subprocess.Popen([sys.executable, "-c", HOG]) for _ in range(os.cpu_count() or 2)]
    try:
        on, pattern = True, [0.7, 0.2, 1.1, 0.4, 0.3, 0.9]
        i = 0
        while not stop.wait(pattern[i % len(pattern)]):
            on = not on
            for hog in hogs:
                hog.send_signal(signal.SIGCONT if on else signal.SIGSTOP)
            i += 1
    finally:
        for hog in hogs:
            hog.send_signal(signal.SIGCONT)
            hog.kill()
            hog.wait()


def _side(x: float) -> int:
    return (x > 1) - (x < 1)


def test_verdicts_agree_with_their_figures_under_a_bursty_load(probed):
    stop = threading.Event()
    load = threading.Thread(target=_bursty_load, args=(stop,), daemon=True)
    load.start()
    try:
        result = CliRunner().invoke(app, ["bench", "bert", "--size", "tiny", "--seq-len", "32", "--batch-size", "2",
                                          "--precision", "fp32,bf16", "--warmup", "2", "--warmup-time", "0",
                                          "--min-iterations", "10", "--min-time", "2", "--no-predict", "--no-save",
                                          "--json"])
    finally:
        stop.set()
        load.join(timeout=30)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    base, variant = doc["variants"]
    cmp = variant["comparison"]
    verdict, ratio = cmp["verdict"], cmp["ratio"]
    throughput = variant["throughput"]["value"] / base["throughput"]["value"]
    median = base["latency_s"]["median"] / variant["latency_s"]["median"]  # as a speed-up; the same batch
    figures = f"{verdict!r}: pairs {ratio:.3f}, throughput {throughput:.3f}, median {median:.3f}"
    if verdict in ("faster", "slower"):
        assert _side(ratio) == _side(throughput) == _side(median) == (1 if verdict == "faster" else -1), figures
    elif verdict.startswith("no difference"):
        lo, hi = cmp["p25"], cmp["p75"]
        assert not (throughput > hi and median > hi) and not (throughput < lo and median < lo), figures
    else:
        assert verdict.startswith("inconclusive ("), figures
    (line,) = doc["verdicts"]
    # the line under the table names a winner only on a firm verdict, and then the winner's figures are the better
    firm = "the baseline fp32 was fastest" in line or line.startswith("forward: bf16 fastest at")
    if firm:
        winner, loser = (variant, base) if line.startswith("forward: bf16 fastest") else (base, variant)
        assert winner["throughput"]["value"] > loser["throughput"]["value"], (line, figures)
        assert winner["latency_s"]["median"] < loser["latency_s"]["median"], (line, figures)
    if verdict.startswith("inconclusive (the figures disagree"):
        assert line.startswith("forward: no verdict between"), line
