"""A sweep file section that only another kind reads is refused when the file loads: `loop:` / `bench:` in a plan or
loadtest sweep, `hardware:` in a bench sweep and `loadtest:` in a bench sweep were dropped without a word (a plan
sweep with `bench: {device: cpu}` ran and stored every point as if it were not there)."""

from __future__ import annotations

import pytest

from tests.unit.sweep_util import load_text, refusal

PLAN = "kind: plan\nhardware: h100\nworkloads: {tiny-llama: {task: train}}\n"
BENCH = "kind: bench\nworkloads: {resnet: {size: tiny}}\n"
LOADTEST = "kind: loadtest\nworkloads: {m: {}}\nloadtest: {base_url: 'http://127.0.0.1:9'}\n"


@pytest.mark.parametrize(("text", "message"), [
    (PLAN + "loop: {min_iterations: 3}\n",
     "loop applies to kind bench, not plan (no plan point reads it); remove it, or set kind: bench"),
    (PLAN + "bench: {device: cpu}\n",
     "bench applies to kind bench, not plan (no plan point reads it); remove it, or set kind: bench"),
    (BENCH + "hardware: h100\n",
     "hardware applies to kind plan, not bench (no bench point reads it); remove it, or set kind: plan"),
    (BENCH + "loadtest: {num_prompts: 4}\n",
     "loadtest applies to kind loadtest, not bench (no bench point reads it); remove it, or set kind: loadtest"),
    (LOADTEST + "loop: {min_time_s: 1}\n",
     "loop applies to kind bench, not loadtest (no loadtest point reads it); remove it, or set kind: bench"),
    (LOADTEST + "hardware: h100\n",
     "hardware applies to kind plan, not loadtest (no loadtest point reads it); remove it, or set kind: plan"),
])
def test_a_section_of_another_kind_is_refused_by_name(tmp_path, text, message):
    assert refusal(tmp_path, text) == message


@pytest.mark.parametrize("text", [PLAN, BENCH + "loop: {min_iterations: 3}\nbench: {device: cpu}\n", LOADTEST,
                                  PLAN + "loop: {}\n"])  # an empty section asks for nothing
def test_the_sections_of_the_kind_load(tmp_path, text):
    assert load_text(tmp_path, text).workloads
