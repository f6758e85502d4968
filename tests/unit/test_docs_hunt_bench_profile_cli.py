"""`accelkit profile`'s usage errors and workload flags, as docs/monitor.md describes them: every bench workload by
name, and the workload flags of `bench` that a profile's workload takes (`profile llm --prompt-len N`)."""

from __future__ import annotations

import pytest

from accelkit.cli.app import main


def _error(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """`accelkit profile ARGS` through the console entry point: its one `error:` line, after checking exit 2."""
    with pytest.raises(SystemExit) as stopped:
        main(["profile", *args])
    assert stopped.value.code == 2
    (line,) = capsys.readouterr().err.strip().splitlines()
    return line


def test_no_workload_names_every_workload_and_does_not_say_not_both(capsys):
    """It said "give a WORKLOAD (bert, resnet, llm, llm-train) or --module …, not both" with neither given."""
    line = _error(capsys)
    assert "give a WORKLOAD (bert, resnet, llm, llm-train, dataloader, diffusion) or --module" in line
    assert "not both" not in line


def test_both_a_workload_and_a_module_is_one_line_naming_both(capsys):
    line = _error(capsys, "bert", "--module", "mypkg.models:make")
    assert "give a WORKLOAD or --module, not both: `profile bert`" in line
    assert "`profile --module mypkg.models:make`" in line


def test_prompt_len_and_image_size_are_workload_flags(capsys):
    """--prompt-len/--output-len/--image-size were no options of `profile` ("No such option: --prompt-len"), so an
    llm profile could only run at the preset's 128-token prompt; now they are refused only where they do not apply."""
    assert _error(capsys, "bert", "--size", "tiny", "--prompt-len", "16") == (
        "error: --prompt-len does not apply to `profile bert`; it applies to `profile llm`")
    assert _error(capsys, "bert", "--size", "tiny", "--output-len", "4").startswith(
        "error: --output-len does not apply to `profile bert`; it applies to `profile llm`")
    assert _error(capsys, "llm", "--model", "tiny-llama", "--image-size", "16").startswith(
        "error: --image-size does not apply to `profile llm`; it applies to `profile resnet`")
