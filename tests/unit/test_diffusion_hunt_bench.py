"""`accelkit bench diffusion`'s variants: an SDPA backend listed twice in --attention is one variant, as a
precision listed twice is (it ran, and printed, two identical rows)."""

from __future__ import annotations

from accelkit.bench.variants import Variant
from accelkit.bench.workloads import make_workload


def test_a_backend_listed_twice_is_one_variant():
    workload = make_workload("diffusion", {"size": "tiny", "attention": ["math", "default", "math", "default"]})
    names = [v.name for v in workload.variants([Variant(precision="fp32"), Variant(precision="bf16")])]
    assert names == ["fp32+sdpa-math", "fp32", "bf16+sdpa-math", "bf16"]
