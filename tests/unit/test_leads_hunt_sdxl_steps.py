"""SDXL's EulerDiscreteScheduler with "leading" timestep spacing spaces its steps num_train_timesteps // steps apart:
past 1000 steps that is 0, every step runs at timestep 1 and the image stays noise, and diffusers says nothing (found
in a hunt: `accelkit plan --model sdxl-base --steps 1001` planned it, the bench ran it). check_generation — shared by
plan, the bench and text-to-image — refuses it in one line naming the flag, the value and the largest that works;
SD3's and FLUX's flow-matching scheduler spaces any number of steps and is left alone."""

from __future__ import annotations

import pytest

from accelkit.core import UserError
from accelkit.models.diffusion import default_generation, get_diffusion_preset
from accelkit.models.diffusion.build import diffusers_attr
from accelkit.models.diffusion.pipeline import check_generation
from accelkit.models.diffusion.spec import SCHEDULER_CLASS
from accelkit.plan.calibrate import resolve_hardware
from accelkit.plan.diffusion import plan_image


def _timesteps(name: str, steps: int) -> list[float]:
    spec = get_diffusion_preset(name)
    scheduler = diffusers_attr("diffusers", SCHEDULER_CLASS[spec.family]).from_config(spec.scheduler)
    scheduler.set_timesteps(steps, **({"mu": 1.0} if spec.family == "flux" else {}))
    return [float(t) for t in scheduler.timesteps]


@pytest.mark.parametrize("name", ["sdxl-base", "tiny-sdxl"])
def test_sdxl_steps_past_the_training_timesteps_are_refused_naming_the_flag_and_the_largest(name):
    spec = get_diffusion_preset(name)
    assert len(set(_timesteps(name, 1001))) == 1 and len(set(_timesteps(name, 1000))) == 1000  # what diffusers does
    why = check_generation(spec, default_generation(spec, steps=1001), {"steps": "--steps"})
    assert why is not None and why.startswith("--steps 1001 ") and "use 1000 or less" in why and "\n" not in why
    assert check_generation(spec, default_generation(spec, steps=1000)) is None
    with pytest.raises(UserError, match=r"^--steps 1001 .*use 1000 or less$"):  # `accelkit plan` says it too
        plan_image(spec, default_generation(spec, steps=1001), resolve_hardware("h100"))


@pytest.mark.parametrize("name", ["tiny-sd3", "tiny-flux"])
def test_flow_matching_spaces_any_number_of_steps(name):
    spec = get_diffusion_preset(name)
    assert len(set(_timesteps(name, 3000))) > 2900  # distinct sigmas: a real (if long) schedule
    assert check_generation(spec, default_generation(spec, steps=3000)) is None
