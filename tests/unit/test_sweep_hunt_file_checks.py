"""What `load_sweep` refuses in a sweep file, each in one line naming the value and the fix.

- An axis of the wrong shape or type: `batch_sizes: 4` and `batch_sizes: [a]` were refused as "expected tuple[int,
  ...] or None", which names no fix.
- A key given twice: PyYAML keeps the last one silently, so a second `llama-3-8b:` under workloads (or a second
  `precisions:`) dropped the first from the grid."""

from __future__ import annotations

import pytest

from accelkit.core import UserError
from accelkit.sweep.grid import expand
from accelkit.sweep.spec import load_sweep

HEAD = "name: s\nkind: plan\nhardware: h100\n"
WORKLOAD = "workloads: {llama-3-8b: {}}\n"


def refusal(path, text: str) -> str:
    """The one-line UserError ``load_sweep`` gives for a file holding ``text``."""
    path.write_text(text)
    with pytest.raises(UserError) as info:
        load_sweep(path)
    return str(info.value)


@pytest.mark.parametrize(("line", "expected"), [
    ("batch_sizes: 4", "batch_sizes=4 is not valid; expected a list such as batch_sizes: [1, 2, 4]; for the one "
                       "value write batch_sizes: [4]"),
    ("precisions: bf16", "precisions=bf16 is not valid; expected a list such as precisions: [fp32, bf16]; for the "
                         "one value write precisions: [bf16]"),
    ("layouts: {dp: 8}", "layouts={dp: 8} is not valid; expected a list such as layouts: [{dp: 8}, {tp: 2, dp: 4}]; "
                         "for the one value write layouts: [{dp: 8}]"),
    ("batch_sizes: [a]", "batch_sizes[0]=a is not valid; expected an integer, as in batch_sizes: [1, 2, 4]"),
    ("batch_sizes: [1, 2.5]", "batch_sizes[1]=2.5 is not valid; expected an integer, as in batch_sizes: [1, 2, 4]"),
    ("batch_sizes: [true]", "batch_sizes[0]=True is not valid; expected an integer, as in batch_sizes: [1, 2, 4]"),
    ("precisions: [8]", "precisions[0]=8 is not valid; expected a precision name, as in precisions: [fp32, bf16]"),
])
def test_an_axis_of_the_wrong_type_names_the_fix(tmp_path, line: str, expected: str) -> None:
    path = tmp_path / "s.yaml"
    assert refusal(path, HEAD + WORKLOAD + line + "\n") == f"{path}: {expected}"


def test_well_typed_axes_load(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + WORKLOAD + "batch_sizes: [1, 2]\nprecisions: [bf16, fp8]\nlayouts: [{dp: 8}]\n")
    spec = load_sweep(path)
    assert spec.batch_sizes == (1, 2) and spec.precisions == ("bf16", "fp8") and spec.layouts == ({"dp": 8},)


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
    assert refusal(path, HEAD + body) == f"{path}: {expected}"


def test_merge_keys_and_distinct_keys_still_load(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "workloads:\n  llama-3-8b: &w {seq_len: 1024}\n  qwen3-8b: {<<: *w, seq_len: 512}\n")
    points = expand(load_sweep(path))
    assert [(p.workload, p.config) for p in points] == [("llama-3-8b", {"seq_len": 1024}),
                                                         ("qwen3-8b", {"seq_len": 512})]
