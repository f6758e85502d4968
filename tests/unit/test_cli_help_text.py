"""Every `--help` speaks to the person typing flags: no Python `None` as a value ("None = the model's length",
"None: no cap" came from config field docs), and a flag read by a parse function shows what it takes (`<int>`,
`<seconds>`, `<size>`, `<list>`), not `<str>` — `bench --warmup <str>` read as if it took text."""

from __future__ import annotations

import re

import pytest
import typer
from typer.testing import CliRunner

from accelkit.cli.app import app
from accelkit.cli.spec_options import _for_users


def _paths():
    def walk(command, path):
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, (*path, name))

    return list(walk(typer.main.get_command(app), ()))


def _help(path: tuple[str, ...]) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=400, env={"COLUMNS": "400"})
    assert result.exit_code == 0, (path, result.output)
    return result.output


def test_the_walk_reaches_every_command():
    paths = _paths()
    assert {("plan",), ("serve",), ("loadtest",), ("hw", "probe"), ("bench", "resnet"), ("bench", "custom")} <= set(
        paths)
    assert len(paths) >= 29


@pytest.mark.parametrize("path", _paths(), ids=lambda p: " ".join(p) or "accelkit")
def test_no_help_shows_none_as_a_value(path):
    found = [line.strip() for line in _help(path).splitlines() if re.search(r"\bNone\b", line)]
    assert not found, found


def test_numeric_flags_read_by_a_parse_function_name_their_values():
    text = _help(("bench", "bert"))
    for flag, metavar in (("--warmup", "<int>"), ("--warmup-time", "<seconds>"), ("--min-iterations", "<int>"),
                          ("--min-time", "<seconds>"), ("--max-iterations", "<int>"), ("--precision", "<list>")):
        assert re.search(rf"^\s*{flag} {metavar}\s", text, re.M), (flag, metavar)
    assert re.search(r"^\s*--copy-size <size>\s", _help(("hw", "probe")), re.M)
    assert re.search(r"^\s*--collective-timeout <seconds>\s", _help(("bench", "llm-train")), re.M)


def test_the_field_doc_wording():
    assert _for_users("Context length; None = the model's max_position_embeddings.") == (
        "Context length; not given: the model's max_position_embeddings.")
    assert _for_users("Most requests in flight; None: no cap.") == "Most requests in flight; not given: no cap."
    assert _for_users("HOST:PORT; None on one node (--standalone).") == "HOST:PORT; not given on one node (--standalone)."
    assert _for_users("NoneSuch stays") == "NoneSuch stays"
