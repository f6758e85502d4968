"""The planner's kernel probes on a GPU: elementwise bandwidth against the catalog HBM bandwidth and causal
flash attention (fwd+bwd) against the dense bf16 peak, and the plan on that GPU using them in place of the
published priors. Skipped without a CUDA device (with the reason); `scripts/gpu_check.sh` runs it. The
measured figures land in the results store of $ACCELKIT_HOME (gpu_check.sh keeps it under $OUT)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (torch.cuda.is_available() is False)"),
]


def test_kernel_probes_on_the_gpu_feed_the_plan():
    from accelkit.core import Cluster, Recipe, Workload
    from accelkit.hardware.probe import ProbeConfig, probe
    from accelkit.models import get_preset
    from accelkit.plan import make_context
    from accelkit.plan.calibrate import resolve_hardware
    from accelkit.results import ResultStore

    result = probe(ProbeConfig(device="cuda:0", dtypes=("bf16",), quick=True))
    d = result.details
    print("elementwise", d["elementwise"]["gbps"], "GB/s", d["elementwise"]["fraction_of_peak"],
          "attention", d["attention"]["tflops"], "TFLOP/s", d["attention"]["fraction_at_long_sequence"])
    assert 0.2 < d["elementwise"]["fraction_of_peak"] <= 1.05 if d["catalog_name"] else d["elementwise"]["gbps"] > 0
    if d["catalog_name"] is None:
        pytest.skip(f"{result.hardware} is not in the catalog: no datasheet peak to compare with")
    assert 0.05 < d["attention"]["fraction_at_long_sequence"] < 1.0
    with ResultStore() as store:
        store.add(result)
    w = Workload(model=get_preset("llama-3.1-8b"), task="train", seq_len=8192,
                 recipe=Recipe(precision="bf16", dp=8, zero=3, micro_batch=1))
    ctx = make_context(w, Cluster(device=resolve_hardware(d["catalog_name"]), num_devices=8))
    assert ctx.efficiency.attention == pytest.approx(d["attention"]["fraction_at_long_sequence"])
    assert any("elementwise add" in a for a in ctx.assumptions)
