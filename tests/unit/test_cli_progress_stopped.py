"""A long command stopped early (Ctrl-C, SIGTERM) whose work returned what it finished ends its progress lines with
"stopped", not "done" — `tune` and `sweep` said "done" just before saying what the interrupt kept."""

from __future__ import annotations

from accelkit.cli.output import Progress


def test_the_last_progress_line_says_stopped_when_the_work_was_stopped(capsys):
    for stopped, last in ((False, "tune tiny: done"), (True, "tune tiny: stopped")):
        with Progress("tune tiny", show=True) as bar:
            bar.update("trial 1", step="trial 1")
            bar.stopped = stopped
        lines = capsys.readouterr().err.strip().splitlines()
        assert lines[-1].endswith(last), lines
