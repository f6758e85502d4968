"""Text-to-image FLOPs (found in a hunt): the count runs at most COUNTED_STEPS denoiser steps and multiplies the rest
out, still equal to the closed form (tiny-sdxl at --steps 1001 spent minutes counting every step on the meta device);
and each phase's mfu.flops_per_item is per image, as the step's is, so the phases add up to it at --batch-size 2
(they were per call: twice the step's figure under the same key)."""

from __future__ import annotations

import pytest
import torch

from accelkit.bench.runner import run_benchmark
from accelkit.bench.variants import matrix
from accelkit.bench.workloads.diffusion.workload import COUNTED_STEPS
from accelkit.models.diffusion import pipeline_count
from tests.integration.test_bench_diffusion import QUICK, bench_count, workload


def test_the_count_runs_a_few_steps_and_multiplies_out_the_rest_exactly():
    w = workload("sdxl", steps=40)
    calls = []
    handle = torch.nn.modules.module.register_module_forward_hook(
        lambda module, args, output: calls.append(1) if type(module).__name__ == "UNet2DConditionModel" else None)
    try:
        total = bench_count(w)
    finally:
        handle.remove()
    assert len(calls) == COUNTED_STEPS < 40
    count = pipeline_count(w.model_spec, w.generation)
    assert total / w.generation.batch_size == count.image_flops and w.phase_flops["denoiser"] == count.denoise_flops


def test_each_phases_flops_per_item_is_per_image_and_they_add_up_to_the_steps():
    run = run_benchmark(workload("sd3", batch_size=2), matrix(["fp32"]), QUICK)
    (entry,) = run.variants
    phases = [p for p in entry.phase_breakdown or [] if p.mfu is not None]
    assert {p.phase for p in phases} == {"text encoders", "denoiser", "vae decode"}
    assert sum(p.mfu.flops_per_item for p in phases) == entry.mfu.flops_per_item  # type: ignore[union-attr]
    for p in phases:  # its FLOP/s are the call's: per image × images ÷ the phase's seconds per call
        assert p.mfu.achieved_flops == pytest.approx(p.mfu.flops_per_item * 2 / p.median_s)  # type: ignore[union-attr,operator]
