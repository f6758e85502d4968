"""A bad argument that needs no torch to judge is refused before torch is imported (~2 s) and before a command says it
is starting: `profile bert --size huge` took 2 s and a progress line to say the size is not one of three,
`bench custom --module nope` printed "bench custom: starting" and took 2.7 s to say the target has no colon. The words
are the ones the later check (``load_factory``, the workload's config, the model registry) would have used."""

from __future__ import annotations

import sys

import pytest

from accelkit.bench.workloads.custom import check_target, load_factory
from accelkit.core import UserError
from tests.unit.cli_refusal_util import one_error, refusals_in_a_fresh_interpreter

MISSING = "accelkit_no_such_module"


def _load_factory_error(target: str, what: str = "--module") -> str:
    """What ``load_factory`` itself says of ``target`` (it imports; here it fails before importing anything)."""
    with pytest.raises(UserError) as info:
        load_factory(target, what=what)
    return f"error: {info.value}"


@pytest.mark.parametrize(("args", "target", "what"), [
    (("bench", "custom", "--module", "nope"), "nope", "--module"),
    (("bench", "custom", "--module", f"{MISSING}:factory"), f"{MISSING}:factory", "--module"),
    (("bench", "custom", "--module", f"{MISSING}.models:factory"), f"{MISSING}.models:factory", "--module"),
    (("tune", "--module", "nope"), "nope", "--module"),
    (("profile", "--module", f"{MISSING}:factory"), f"{MISSING}:factory", "--module"),
    (("bench", "dataloader", "--dataset", "nope"), "nope", "--dataset"),
    (("bench", "custom", "--module", ".models:factory"), ".models:factory", "--module"),
])
def test_a_target_that_cannot_load_is_refused_in_load_factorys_words(cli, args, target, what):
    assert one_error(cli(*args)) == _load_factory_error(target, what)


def test_a_relative_target_is_named_as_one():
    """import_module('.models') raised a TypeError, which load_factory reported as the user's module failing to
    import ('fix the module', `python -c 'import .models'`)."""
    assert _load_factory_error(".models:make") == \
        "error: --module '.models:make' names a relative module; write its full name, package.module:factory"


@pytest.mark.parametrize(("args", "expected"), [
    (("profile", "bert", "--size", "huge"), "error: --size 'huge' is not valid; expected one of 'tiny', 'base', 'large'"),
    (("bench", "llm", "--model", "nope-model"), "error: unknown model 'nope-model'"),
    (("profile", "llm-train", "--model", "bert-base"),
     "error: 'bert-base' is an encoder model; llm-train needs a decoder (e.g. tiny-llama, llama-3.1-8b)"),
])
def test_a_workload_value_is_refused_before_the_run(cli, args, expected):
    assert one_error(cli(*args)).startswith(expected)


@pytest.mark.parametrize("command", ["tune", "profile"])
def test_custom_is_the_workload_of_module(cli, command):
    """`tune custom` (its help lists custom) without --module was an internal error (CustomConfig() without its
    module); with --module it is `tune --module`, checked as that is."""
    assert one_error(cli(command, "custom")) == f"error: `{command} custom` needs --module package.module:factory"
    assert one_error(cli(command, "custom", "--module", "nope")) == _load_factory_error("nope")


def test_a_target_that_is_there_is_not_imported_by_the_check(tmp_path, monkeypatch):
    """The check finds a module in the working directory (as ``load_factory`` imports it) without running it, and
    leaves ``sys.path`` as it was."""
    (tmp_path / "accelkit_check_target_mod.py").write_text("raise SystemExit('imported')\n")
    monkeypatch.chdir(tmp_path)
    path = list(sys.path)
    check_target("accelkit_check_target_mod:factory")
    assert "accelkit_check_target_mod" not in sys.modules and sys.path == path


#: refusals that need no torch, run one after another in one fresh interpreter (this one imported torch long ago)
FRESH = [
    ["profile", "bert", "--size", "huge"],
    ["profile", "--module", f"{MISSING}:factory"],
    ["profile", "llm", "--model", "nope-model"],
    ["bench", "custom", "--module", "nope"],
    ["bench", "custom", "--module", f"{MISSING}:factory"],
    ["bench", "llm", "--model", "nope-model"],
    ["bench", "llm-train", "--model", "tiny-llama", "--lr", "inf"],
    ["bench", "dataloader", "--dataset", "nope"],
    ["tune", "--module", "nope"],
    ["plan", "--model", "llama-3.1-8b", "--hardware", "h100", "--target-tokens-per-s", "inf"],
]


def test_the_refusals_do_not_import_torch(tmp_path):
    """Import state is what is tested: a new interpreter, one for all the commands."""
    for argv, (code, err, torch_loaded) in zip(FRESH, refusals_in_a_fresh_interpreter(FRESH, tmp_path), strict=True):
        assert code == 2 and len(err.strip().splitlines()) == 1 and err.startswith("error: "), (argv, code, err)
        assert not torch_loaded, f"accelkit {' '.join(argv)} imported torch before refusing: {err}"
