"""Sweep-file values the load must refuse by field, in one line, before any point runs: a number no float holds
(an integer literal of 400 digits was an internal error), and a plan's seq_len 0 (it ran at 4096)."""

from __future__ import annotations

import pytest

from accelkit.core import UserError
from accelkit.sweep.grid import Point, plan_workload
from accelkit.sweep.spec import load_sweep

HUGE = "1" + "0" * 400  # YAML reads it as an int; float(int) overflows


@pytest.mark.parametrize(("text", "needle"), [
    ("kind: bench\nworkloads: {resnet: {size: tiny}}\nloop: {min_time_s: " + HUGE + "}\n",
     "loop: min_time_s is an integer beyond ±1.8e308: out of range; expected a finite number"),
    ("kind: loadtest\nworkloads: {m: {}}\nrates: [" + HUGE + "]\nloadtest: {base_url: 'http://127.0.0.1:1'}\n",
     "rates[0] is an integer beyond ±1.8e308: out of range; expected a finite number"),
    ("kind: plan\nhardware: h100\nworkloads: {llama-3.1-8b: {seq_len: 0}}\n",
     "point 0 (llama-3.1-8b seq_len=0 · bf16): seq_len=0 is out of range; expected >= 1"),
])
def test_the_load_refuses_the_value_by_field(tmp_path, text, needle):
    path = tmp_path / "s.yaml"
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_sweep(path)
    assert needle in str(info.value) and "\n" not in str(info.value)


def test_a_plan_point_without_seq_len_takes_the_default_and_one_with_it_keeps_it():
    point = Point(0, "plan", "llama-3.1-8b", {}, "bf16", None, {}, None)
    assert plan_workload(point).seq_len == 4096
    assert plan_workload(Point(0, "plan", "llama-3.1-8b", {"seq_len": 1}, "bf16", None, {}, None)).seq_len == 1
