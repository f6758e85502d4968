"""docs/bench.md: the steady state runs "until ≥ --min-iterations and ≥ --min-time", and --max-iterations is a hard
cap. Both given, the cap below the minimum, the cap won without a word (`--min-iterations 20 --max-iterations 5`
measured 5): now one line naming both, exit 2, in `bench`, a suite and `tune` alike."""

from __future__ import annotations

import pytest

from accelkit.cli.app import main

MESSAGE = ("error: --max-iterations 5 is below --min-iterations 20: the cap would stop each variant before the "
           "minimum; raise --max-iterations to at least 20 or lower --min-iterations")


@pytest.mark.parametrize("command", [["bench", "bert", "--size", "tiny"], ["bench", "suite", "quick"],
                                     ["tune", "bert", "--size", "tiny"]])
def test_a_cap_below_the_minimum_is_refused(capsys, tmp_path, monkeypatch, command):
    monkeypatch.setenv("ACCELKIT_HOME", str(tmp_path))
    with pytest.raises(SystemExit) as stopped:
        main([*command, "--min-iterations", "20", "--max-iterations", "5", "--no-save"])
    assert stopped.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.strip().splitlines() == [MESSAGE]
