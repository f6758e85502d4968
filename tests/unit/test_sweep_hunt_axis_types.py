"""An axis of the wrong shape or type is refused naming the value and the list to write: `batch_sizes: 4` and
`batch_sizes: [a]` were refused as "expected tuple[int, ...] or None", which names no fix."""

from __future__ import annotations

import pytest

from accelkit.core import UserError
from accelkit.sweep.spec import load_sweep

HEAD = "name: s\nkind: plan\nhardware: h100\nworkloads: {llama-3-8b: {}}\n"


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
    path.write_text(HEAD + line + "\n")
    with pytest.raises(UserError) as info:
        load_sweep(path)
    assert str(info.value) == f"{path}: {expected}"


def test_well_typed_axes_load(tmp_path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(HEAD + "batch_sizes: [1, 2]\nprecisions: [bf16, fp8]\nlayouts: [{dp: 8}]\n")
    spec = load_sweep(path)
    assert spec.batch_sizes == (1, 2) and spec.precisions == ("bf16", "fp8") and spec.layouts == ({"dp": 8},)
