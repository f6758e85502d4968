"""A sweep file's `resources` (what each Ray task asks for) went to Ray unchecked: a misspelt `num_gpu`, a negative
count or a fractional one above 1 was "internal error (ValueError: Invalid option keyword num_gpu …) — a bug in
accelkit", exit 1, once Ray had started. Now the file's load refuses it by field; Ray's own forms still load."""

from __future__ import annotations

import pytest

from tests.unit.sweep_util import load_text, refusal

PLAN = "kind: plan\nhardware: h100\nworkloads: {tiny-llama: {task: train}}\nresources: "


@pytest.mark.parametrize(("resources", "message"), [
    ("{num_gpu: 1}", "resources has no field num_gpu; did you mean num_gpus? known: num_cpus, num_gpus, memory, "
                     "object_store_memory, max_retries"),
    ("{gpus: 1}", "resources has no field gpus; did you mean num_gpus? known: num_cpus, num_gpus, memory, "
                  "object_store_memory, max_retries"),
    ("{num_gpus: -1}", "resources.num_gpus=-1 is out of range; expected >= 0"),
    ("{memory: -5}", "resources.memory=-5 is out of range; expected >= 0"),
    ("{num_cpus: 1.5}", "resources.num_cpus=1.5 is not valid; above 1 Ray takes whole cpus only (e.g. 1 or 2; a "
                        "fraction below 1 shares one)"),
])
def test_a_resource_ray_would_refuse_is_refused_on_load(tmp_path, resources, message):
    assert refusal(tmp_path, PLAN + resources + "\n") == message


@pytest.mark.parametrize("resources", ["{num_cpus: 0.5, num_gpus: 8}", "{max_retries: -1}", "{memory: 1.0e+9}",
                                       "{num_cpus: 1.0e+400}"])  # (inf: the CLI's finite-number check names it)
def test_what_ray_takes_loads(tmp_path, resources):
    assert load_text(tmp_path, PLAN + resources + "\n").resources
