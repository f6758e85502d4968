"""`accelkit tune … --nproc-per-node N --memory-budget` held nothing to the budget (the planner estimates no
distributed run, and the measured peaks were never compared with it). (A compression that fails its quality check
saying so in the why column: test_tune_compression.)"""

import json

from tests.conftest import accelkit


def test_the_budget_holds_measured_peaks(probed):
    proc = accelkit("tune", "llm-train", "--model", "tiny-llama", "--batch-size", "4", "--seq-len", "32",
                    "--device", "cpu", "--nproc-per-node", "2", "--quick", "--no-save", "--json", "--max-trials", "2",
                    "--memory-budget", "1KiB", "--quality-steps", "5",  # (the check's and the loop's length: not what is tested)
                    "--warmup", "1", "--warmup-time", "0", "--min-iterations", "2", "--min-time", "0", timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    doc = json.loads(proc.stdout)
    measured = [t for t in doc["trials"] if t["memory_bytes"] is not None]
    assert measured and all(t["memory_bytes"] > 1024 for t in measured)  # a rank's peak: far over 1 KiB
    for t in measured:
        assert t["status"] == "over-budget" and t["reason"].startswith("measured peak "), t
        assert " MiB > budget 1.0 KiB" in t["reason"]  # not "budget 0.0 MiB"
    assert len(measured) == 2 and doc["winner"] is None and doc["pareto"] == []
