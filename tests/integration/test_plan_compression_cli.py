"""`accelkit plan --grad-compression / --compare-compression` from the command line: the JSON document, the table,
and one-line refusals (exit 2)."""

import json

from tests.conftest import accelkit

LLAMA70B_8_NODES = ("plan", "--model", "llama-3.1-70b", "--hardware", "h100", "--num-devices", "64", "--seq-len", "8192",
                    "--global-batch", "128", "--dp", "8", "--tp", "8", "--zero", "1", "--micro-batch", "1",
                    "--recompute", "full", "--scaleout-gbps", "100", "--grad-reduce-fp32", "--no-use-calibration")


def test_compare_compression_json_and_table(_isolated_home):
    proc = accelkit(*LLAMA70B_8_NODES, "--compare-compression", "--json")
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    rows = {r["compression"]: r for r in doc["rows"]}
    assert doc["num_nodes"] == 8 and doc["scaleout_bandwidth_bytes_per_s"] == 12.5e9
    assert rows["bf16"]["step_time_s"] < rows["none"]["step_time_s"]
    assert rows["bf16"]["buffer_bytes_per_step"] * 2 == rows["none"]["buffer_bytes_per_step"]
    assert "refused" in rows["powersgd"]
    table = accelkit(*LLAMA70B_8_NODES, "--compare-compression")
    assert table.returncode == 0 and "bf16 pays" in table.stdout and "grad bytes/step/rank" in table.stdout


def test_plan_with_compression_reports_the_reduction(_isolated_home):
    proc = accelkit("plan", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "16", "--dp", "16",
                    "--zero", "0", "--grad-compression", "powersgd", "--powersgd-rank", "8", "--json")
    assert proc.returncode == 0, proc.stderr
    red = json.loads(proc.stdout)["grad_reduction"]
    assert red["compression"] == "powersgd" and red["ratio"] < 0.05 and len(red["collectives"]) == 3


def test_compression_mistakes_are_one_line(_isolated_home):
    base = ("plan", "--model", "llama-3.1-8b", "--hardware", "h100", "--num-devices", "16")
    for args, needle in [(("--powersgd-rank", "2"), "--powersgd-rank applies to --grad-compression powersgd"),
                         (("--grad-compression", "powersgd", "--zero", "3"), "DDP communication hook"),
                         (("--compare-compression", "--compare", "h100,h200"), "--compare-compression compares one")]:
        proc = accelkit(*base, *args)
        assert proc.returncode == 2, (args, proc.stderr)
        assert needle in proc.stderr and "Traceback" not in proc.stderr
