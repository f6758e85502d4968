"""The one `error:` line quotes the value the user gave exactly as given: only line breaks are folded."""

from tests.conftest import main_in_process


def test_a_no_break_space_in_a_value_reaches_the_error_line_unchanged(capsys, tmp_path):
    name = str(tmp_path / "results\u00a0of monday.json")
    code, out, err = main_in_process(capsys, "results", "import", name)
    assert code == 2 and out == ""
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and name in lines[0], err


def test_a_message_built_over_several_lines_prints_as_one(capsys):
    import pytest

    from accelkit.cli.app import _fail

    with pytest.raises(SystemExit) as exit_:
        _fail("spec.yaml: mapping values are not allowed here\n  in \"<unicode string>\", line 3\r\n\n   column 6", 2)
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert err == 'error: spec.yaml: mapping values are not allowed here in "<unicode string>", line 3 column 6\n'
