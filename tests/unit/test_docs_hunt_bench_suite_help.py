"""`accelkit bench suite --help` names the loop defaults a suite really runs with (docs/bench.md: the quick suite
warms up ≥ 5 iterations and 0.3 s, then measures ≥ 10 iterations and 1.5 s); it said the workloads' "default 10"
warm-up iterations and 10 s."""

from __future__ import annotations

import re

from typer.testing import CliRunner

from accelkit.bench.suite import SUITES
from accelkit.cli.app import app


def _help(*path: str) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=400, env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    return re.sub(r"[\s│]+", " ", result.output)


def test_suite_help_gives_each_suites_own_loop_defaults():
    quick, reference = SUITES["quick"]().loop, SUITES["reference"]().loop
    assert (quick.warmup_iterations, quick.warmup_time_s, quick.min_time_s) == (5, 0.3, 1.5)  # docs/bench.md
    for path in (("bench", "suite"), ("bench",)):  # `bench --suite NAME` is the older spelling
        text = _help(*path)
        assert "Minimum warm-up iterations (default: the suite's — quick 5, reference 10; --quick 3)." in text
        assert "Minimum warm-up seconds (default: the suite's — quick 0.3, reference 2; --quick 0.2)." in text
        assert f"… and at least S seconds (default: the suite's — quick 1.5, reference {reference.min_time_s:g}; " \
               "--quick 1)." in text


def test_a_workload_keeps_the_bench_defaults_in_its_help():
    assert "Minimum warm-up iterations (default 10; --quick 3)." in _help("bench", "bert")
