"""`tune` given both a workload and --module said "give a WORKLOAD … or --module" (as if neither were given), and
`tune diffusion` offered "did you mean custom?" — diffusion is a bench workload, which tune does not search."""

from __future__ import annotations

import pytest

from accelkit.cli.app import main


@pytest.mark.parametrize(("argv", "line"), [
    (["tune", "bert", "--module", "pkg.mod:factory"],
     "error: give a WORKLOAD or --module, not both: `tune bert` tunes the built-in workload, `tune --module "
     "pkg.mod:factory` your factory's model"),
    (["tune", "diffusion"],
     "error: tune has no diffusion workload; measure a pipeline's recipes with `accelkit bench diffusion`, or tune "
     "bert, resnet, llm, llm-train or --module"),
    (["tune"], "error: give a WORKLOAD (bert, resnet, llm, llm-train) or --module package.module:factory"),
])
def test_the_refusal_says_what_was_given(capsys, argv: list[str], line: str) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    captured = capsys.readouterr()
    assert info.value.code == 2 and captured.out == ""
    assert " ".join(captured.err.split()) == line
