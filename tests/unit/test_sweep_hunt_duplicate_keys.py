"""A key given twice in a sweep file is refused at load, naming the key and both lines: PyYAML keeps the last one
silently, so a second `llama-3-8b:` under workloads (or a second `precisions:`) dropped the first from the grid."""

from __future__ import annotations

import pytest

from accelkit.core import UserError
from accelkit.sweep.grid import expand
from accelkit.sweep.spec import load_sweep

HEAD = "name: s\nkind: plan\nhardware: h100\n"


@pytest.mark.parametrize(("body", "expected"), [
    ("workloads:\n  llama-3-8b: {seq_len: 1024}\n  llama-3-8b: {seq_len: 2048}\n",
     "line 6, column 3 is not valid YAML: llama-3-8b is given twice (first on line 5), and only the last would be "
     "used; give each key once"),
    ("workloads: {llama-3-8b: {}}\nprecisions: [bf16]\nprecisions: [fp8]\n",
     "line 6, column 1 is not valid YAML: precisions is given twice (first on line 5), and only the last would be "
     "used; give each key once"),
    ("workloads: {llama-3-8b: {}}\nlayouts: [{dp: 2, dp: 4}]\n",
     "line 5, column 19 is not valid YAML: dp is given twice (first on line 5), and only the last would be used; "
     "give each key once"),
])
def test_a_key_given_twice_is_refused(tmp_path, body: str, expected: str) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + body)
    with pytest.raises(UserError) as info:
        load_sweep(path)
    assert str(info.value) == f"{path}: {expected}"


def test_merge_keys_and_distinct_keys_still_load(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "workloads:\n  llama-3-8b: &w {seq_len: 1024}\n  qwen3-8b: {<<: *w, seq_len: 512}\n")
    points = expand(load_sweep(path))
    assert [(p.workload, p.config) for p in points] == [("llama-3-8b", {"seq_len": 1024}),
                                                         ("qwen3-8b", {"seq_len": 512})]
