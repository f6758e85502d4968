"""A `hw probe` of the planned device replaces the priors kernel class by kernel class: matmul, copy, and
the kernel probes (elementwise bandwidth for memory-bound kernels, causal attention for flash attention)."""

from accelkit.core import Cluster, Measurement, Recipe, Workload
from accelkit.hardware import get_device
from accelkit.models import get_preset
from accelkit.plan import PlanOptions, make_context, plan


def _probe(elementwise=None, attention=None):
    details = {"device": "cuda:0", "catalog_name": "H100-SXM5-80GB",
               "matmul": {"bf16": {"tflops": 700.0, "fraction_of_peak": 700 / 989}},
               "bandwidth": {"gbps": 2800.0, "fraction_of_peak": 2800 / 3350}}
    if elementwise is not None:
        details["elementwise"] = {"gbps": 3350 * elementwise, "fraction_of_peak": elementwise,
                                  "reference": "catalog HBM bandwidth"}
    if attention is not None:
        details["attention"] = {"tflops": 989 * attention, "fraction_of_peak": attention * 4096 / (4096 + 128),
                                "fraction_at_long_sequence": attention, "shape": {"seq": 4096, "head_dim": 128}}
    return Measurement(kind="probe", name="hw probe", hardware="H100-SXM5-80GB", details=details)


W = Workload(model=get_preset("llama-3.1-8b"), task="train", seq_len=8192,
             recipe=Recipe(precision="bf16", dp=8, zero=3, micro_batch=1, grad_accum=4))
CLUSTER = Cluster(device=get_device("h100"), num_devices=8)


def test_kernel_probes_replace_the_memory_and_attention_priors():
    from accelkit.results import ResultStore

    with ResultStore() as store:
        store.add(_probe(elementwise=0.5, attention=0.25))
    ctx = make_context(W, CLUSTER)
    assert ctx.efficiency.memory == 0.5 and ctx.efficiency.attention == 0.25
    text = "\n".join(ctx.assumptions)
    assert "elementwise add" in text and "causal attention fwd+bwd" in text
    assert "kipply" not in text and "FlashAttention-3 paper" not in text  # the replaced priors are gone
    measured = plan(W, CLUSTER).details["step_time_s"]
    prior = plan(W, CLUSTER, PlanOptions(use_calibration=False)).details["step_time_s"]
    assert measured > prior  # slower memory-bound kernels and attention than the priors


def test_an_older_probe_without_kernel_figures_keeps_those_priors():
    from accelkit.results import ResultStore

    with ResultStore() as store:
        store.add(_probe())
    ctx = make_context(W, CLUSTER)
    assert abs(ctx.efficiency.memory - 2800 / 3350) < 1e-9  # the copy probe, as before
    assert any("FlashAttention-3" in a for a in ctx.assumptions)
