"""`accelkit bench --suite quick`: every workload of the suite runs and lands in the store (loops shortened
here; `make demo` runs the real suite)."""

import json

from tests.conftest import accelkit
from tests.integration.test_bench_cli import stored_bench

#: what this test checks is that every workload runs and is stored: the fewest iterations a variant takes (a warm-up
#: call, two measured) — six workloads at test_bench_cli's FAST loops were the slowest part of this file
SHORTEST = ("--warmup", "1", "--warmup-time", "0", "--min-iterations", "2", "--min-time", "0")


def test_quick_suite_runs_every_workload(probed):
    proc = accelkit("bench", "--suite", "quick", *SHORTEST, "--json", timeout=600)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["suite"] == "quick" and not doc["interrupted"] and not doc["skipped"]
    assert [r["workload"] for r in doc["runs"]] == ["bert", "resnet", "llm", "llm-train", "dataloader", "diffusion"]
    assert doc["environment"]["torch"] and all("environment" not in r for r in doc["runs"])
    assert len(stored_bench(probed)) == sum(len(r["variants"]) for r in doc["runs"])


def test_reference_suite_skips_what_does_not_fit_with_the_reason():
    from accelkit.bench.suite import PUBLISHED, get_suite

    suite = get_suite("reference")
    assert [i.key for i in suite.items] == ["bert-large-infer", "resnet50-train", "llama3-8b-decode",
                                            "sdxl-text-to-image"]
    sdxl = suite.items[3]  # MLPerf Inference's text-to-image settings on a GPU
    assert {k: sdxl.gpu_config[k] for k in ("height", "steps")} == {"height": 1024, "steps": 20}
    assert sdxl.config["guidance"] == 8.0 and sdxl.config["arch"] == "sdxl"
    assert {v["value"] for v in PUBLISHED[("sdxl-text-to-image", "H100-SXM5-80GB")]} == {1.64, 2.04}
    assert suite.items[0].config["seq_len"] == 384
    assert {v["value"] for v in PUBLISHED[("resnet50-train", "A100-SXM4-80GB")]} == {938, 2470}
