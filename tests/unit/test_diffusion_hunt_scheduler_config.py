"""A local SDXL pipeline directory whose scheduler_config.json holds a value diffusers' scheduler cannot run: a null
num_train_timesteps was an internal error (exit 1) in `accelkit plan`; 0 was planned with "use 0 or less"; "1000",
1000.0, -5, a timestep_spacing of ["leading"] or a beta_schedule of "nope" were planned and failed inside diffusers
(exit 1) in the bench's load or first call (found in a hunt). Now reading the directory refuses each in one line
naming the file, the key and the values that work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from accelkit.core import UserError
from accelkit.models.diffusion import get_diffusion_preset, resolve_diffusion
from tests.unit.test_models_diffusion_local import write_dir


def _with_scheduler(root: Path, family: str, **changes: object) -> str:
    path = write_dir(root, get_diffusion_preset(f"tiny-{family}"))
    file = root / "scheduler" / "scheduler_config.json"
    file.write_text(json.dumps({**json.loads(file.read_text()), **changes}))
    return path


@pytest.mark.parametrize(("key", "value", "works"), [
    ("num_train_timesteps", None, "at least 1"), ("num_train_timesteps", 0, "at least 1"),
    ("num_train_timesteps", "1000", "at least 1"), ("num_train_timesteps", 1000.0, "at least 1"),
    ("steps_offset", -1, "at least 0"), ("timestep_spacing", ["leading"], '"trailing"'),
    ("beta_schedule", "nope", '"scaled_linear"'),
])
def test_a_scheduler_value_diffusers_cannot_run_is_refused_naming_file_and_key(tmp_path, key, value, works):
    path = _with_scheduler(tmp_path, "sdxl", **{key: value})
    with pytest.raises(UserError) as info:
        resolve_diffusion(path)
    message = str(info.value)
    assert message.startswith(f"{tmp_path / 'scheduler' / 'scheduler_config.json'}: {key!r} is {json.dumps(value)};")
    assert works in message and "\n" not in message


def test_flow_matching_schedulers_are_held_to_their_one_key(tmp_path):
    (tmp_path / "a").mkdir()
    with pytest.raises(UserError, match="'num_train_timesteps' is 0;"):
        resolve_diffusion(_with_scheduler(tmp_path / "a", "flux", num_train_timesteps=0))
    (tmp_path / "b").mkdir()
    spec = resolve_diffusion(_with_scheduler(tmp_path / "b", "sd3", timestep_spacing="anything"))  # not read there
    assert spec.scheduler["timestep_spacing"] == "anything"


def test_the_published_values_load(tmp_path):
    spec = resolve_diffusion(_with_scheduler(tmp_path, "sdxl", timestep_spacing="trailing"))
    assert spec.scheduler["num_train_timesteps"] == 1000 and spec.scheduler["timestep_spacing"] == "trailing"
