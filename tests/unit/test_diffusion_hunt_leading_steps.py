"""SDXL's EulerDiscreteScheduler with "leading" timestep spacing (sdxl-base's published config) spaces its steps
num_train_timesteps // steps apart from timestep 0: from 501 to 999 steps that is 1 apart, so `--steps 600` ran
timesteps 600 … 1 from pure noise — the noisiest 400 left out, the image noisy — and diffusers says nothing (the
same wherever 1000 % steps is large: 251, 334, 400 start at 751, 667, 799; found in a hunt). check_generation, which
plan, the bench and text-to-image share, refuses those counts in one line naming the first timestep and the counts
around it that start within the top tenth; the usual counts (and tiny models' few steps) are left alone."""

from __future__ import annotations

import pytest

from accelkit.models.diffusion import default_generation, get_diffusion_preset
from accelkit.models.diffusion.build import diffusers_attr
from accelkit.models.diffusion.pipeline import check_generation
from accelkit.models.diffusion.spec import SCHEDULER_CLASS

SPEC = get_diffusion_preset("sdxl-base")


def _first_timestep(steps: int) -> int:
    """The first timestep diffusers' own scheduler, built from the preset's config, runs."""
    scheduler = diffusers_attr("diffusers", SCHEDULER_CLASS["sdxl"]).from_config(SPEC.scheduler)
    scheduler.set_timesteps(steps)
    return int(scheduler.timesteps[0])


@pytest.mark.parametrize(("steps", "below", "above"), [(501, 500, 900), (600, 500, 900), (899, 500, 900),
                                                       (334, 333, 450), (400, 333, 450), (251, 250, 300)])
def test_leading_counts_that_start_far_below_the_top_are_refused_in_one_line(steps, below, above):
    first = _first_timestep(steps)
    assert first < 900  # what diffusers runs: the noisiest tenth and more left out
    why = check_generation(SPEC, default_generation(SPEC, steps=steps), {"steps": "--steps"})
    assert why is not None and why.startswith(f"--steps {steps} ") and "\n" not in why
    assert f"first runs at timestep {first}, not near 999" in why and f"use {below} or {above} " in why
    for fits in (below, above):  # the counts it names start within the top tenth, and are accepted
        assert _first_timestep(fits) >= 900 - 1000 // fits
        assert check_generation(SPEC, default_generation(SPEC, steps=fits)) is None


@pytest.mark.parametrize("steps", [1, 4, 8, 20, 25, 30, 50, 100, 250, 500, 900, 999, 1000])
def test_usual_counts_are_left_alone(steps):
    assert check_generation(SPEC, default_generation(SPEC, steps=steps)) is None


def test_trailing_spacing_spaces_any_count():
    spec = get_diffusion_preset("sdxl-base")
    trailing = type(spec).from_dict({**spec.to_dict(), "scheduler": {**spec.scheduler, "timestep_spacing": "trailing"}})
    assert check_generation(trailing, default_generation(trailing, steps=600)) is None
