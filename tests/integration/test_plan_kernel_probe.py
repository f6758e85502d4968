"""The kernel probes on this CPU, end to end: `hw probe` measures elementwise bandwidth and causal attention
beside the matmul and copy, and `plan --hardware cpu` uses them (no GPU here: the GPU path is the same code
with catalog peaks; scripts/gpu_check.sh runs it on a GPU)."""

import json

from tests.conftest import accelkit


def test_probe_measures_elementwise_and_attention_and_plan_uses_them(probed):
    from accelkit.results import ResultStore

    with ResultStore() as store:
        probe = store.query(kind="probe", limit=1)[0].result
    d = probe.details
    assert d["elementwise"]["gbps"] > 0 and d["elementwise"]["fraction_of_peak"] > 0
    assert d["attention"]["tflops"] > 0 and d["attention"]["fraction_of_peak"] > 0
    assert d["attention"]["fraction_at_long_sequence"] > d["attention"]["fraction_of_peak"]
    assert len(probe.samples["attention_tflops"]) == d["attention"]["stats"]["n"]
    proc = accelkit("plan", "--model", "tiny-llama", "--hardware", "cpu", "--num-devices", "1", "--precision", "fp32",
                    "--json")
    assert proc.returncode == 0, proc.stderr
    text = "\n".join(json.loads(proc.stdout)["assumptions"])
    assert "measured by `hw probe` causal attention" in text and "elementwise add" in text
