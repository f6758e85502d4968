"""A --device name of no accepted shape is refused before torch is imported (~2 s) and before a command says it is
starting: `bench bert --device nope` printed "bench bert: starting" and took 2.3 s to say the name is not valid,
`profile bert --device nope` 2.3 s after a progress line. A name that needs torch to judge (cuda:3 on a machine with
one GPU, or none) is still judged by ``resolve_device`` after torch's import, in its own words."""

from __future__ import annotations

import pytest

from accelkit.core import UserError
from accelkit.hardware.device import check_device_name, resolve_device
from tests.unit.cli_refusal_util import one_error, refusals_in_a_fresh_interpreter

INVALID = ["nope", "tpu", "gpu", "cuda:x", "cuda:-1", "cuda:0:1", "", "mps:0"]


@pytest.mark.parametrize("name", INVALID)
def test_the_check_refuses_what_resolve_device_refuses_in_its_words(name):
    with pytest.raises(UserError) as checked:
        check_device_name(name)
    with pytest.raises(UserError) as resolved:
        resolve_device(name)
    assert str(checked.value) == str(resolved.value) == f"device {name.strip().lower()!r} is not valid; use auto, " \
                                                        "cpu, cuda or cuda:N"


@pytest.mark.parametrize(("name", "read"), [("auto", "auto"), (" CPU ", "cpu"), ("cuda", "cuda"), ("CUDA:3", "cuda:3"),
                                            ("cuda:", "cuda:")])
def test_the_check_passes_every_shape_resolve_device_takes(name, read):
    assert check_device_name(name) == read


@pytest.mark.parametrize("args", [("bench", "bert", "--device", "nope"), ("bench", "llm", "--device", "cuda:x"),
                                  ("profile", "bert", "--device", "nope")])
def test_a_command_refuses_the_name_before_it_starts(cli, args):
    assert one_error(cli(*args)) == f"error: device {args[-1]!r} is not valid; use auto, cpu, cuda or cuda:N"


#: run one after another in one fresh interpreter (this one imported torch long ago)
FRESH = [["bench", "bert", "--device", "nope"], ["bench", "resnet", "--device", "cuda:x"],
         ["profile", "bert", "--device", "nope"], ["hw", "probe", "--device", "nope"]]
#: the library call, in the same interpreter after the commands
_THEN = """from accelkit.core import UserError
from accelkit.hardware.device import resolve_device
try:
    resolve_device("nope")
except UserError as exc:
    runs.append([2, f"error: {exc}", "torch" in sys.modules])
"""


def test_the_refusals_do_not_import_torch(tmp_path):
    """Import state is what is tested: a new interpreter, one for all the commands and a library call."""
    runs = refusals_in_a_fresh_interpreter(FRESH, tmp_path, then=_THEN)
    for argv, (code, err, torch_loaded) in zip([*FRESH, ["resolve_device('nope')"]], runs, strict=True):
        assert code == 2 and len(err.strip().splitlines()) == 1 and "is not valid; use auto" in err, (argv, code, err)
        assert not torch_loaded, f"{' '.join(argv)} imported torch before refusing: {err}"
