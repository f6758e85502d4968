"""`accelkit tune … --nproc-per-node N --memory-budget` held nothing to the budget (the planner estimates no
distributed run, and the measured peaks were never compared with it), and a compression that failed its quality
check had an empty why column."""

import json

from tests.conftest import accelkit


def test_the_budget_holds_measured_peaks_and_a_failed_check_says_why(probed):
    proc = accelkit("tune", "llm-train", "--model", "tiny-llama", "--batch-size", "4", "--seq-len", "32",
                    "--device", "cpu", "--nproc-per-node", "2", "--quick", "--no-save", "--json", "--lr", "3e-3",
                    "--quality-steps", "40", "--memory-budget", "1KiB", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    measured = [t for t in doc["trials"] if t["memory_bytes"] is not None]
    assert measured and all(t["memory_bytes"] > 1024 for t in measured)  # a rank's peak: far over 1 KiB
    for t in measured:
        assert t["status"] == "over-budget" and t["reason"].startswith("measured peak "), t
        assert " MiB > budget 1.0 KiB" in t["reason"]  # not "budget 0.0 MiB"
    assert doc["winner"] is None and doc["pareto"] == []
    r1 = next(t for t in doc["trials"] if t["name"] == "fp32+powersgd-r1")
    assert not r1["passed"] and "FAILS" in r1["reason"]  # the check's own message, after the budget's
