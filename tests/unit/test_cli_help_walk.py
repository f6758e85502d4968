"""Issue #29 item 10 / acceptance 5: `--help` is where a new user starts. The top level groups the commands under
the README's questions, in its order; no description is cut with "..."; every command shows examples that parse;
required options come first; every option says what it is; `--progress` is spelled one way everywhere."""

from __future__ import annotations

import re
import shlex

import pytest
import typer
from typer.testing import CliRunner

from accelkit.cli.app import app
from tests.conftest import REPO


def _paths() -> list[tuple[str, ...]]:
    def walk(command, path):
        yield path
        for name, sub in sorted(getattr(command, "commands", {}).items()):
            yield from walk(sub, (*path, name))

    return list(walk(typer.main.get_command(app), ()))


def _command(path: tuple[str, ...]):
    command = typer.main.get_command(app)
    for name in path:
        command = command.commands[name]
    return command


def _help(path: tuple[str, ...], width: int = 80) -> str:
    result = CliRunner().invoke(app, [*path, "--help"], terminal_width=width, env={"COLUMNS": str(width)})
    assert result.exit_code == 0, (path, result.output)
    return result.output


def _examples(text: str) -> list[str]:
    """The commands under the help's 'Examples:' heading (a `# comment` after one is dropped)."""
    _, found, rest = text.partition("Examples:")
    assert found, "no Examples: section"
    lines = [line.split("  #")[0].strip() for line in rest.splitlines()]
    return [line for line in lines if line]


def _readme_panels() -> list[tuple[str, list[str]]]:
    """The README's 'What works today' table: question → the top-level commands it lists first, in order."""
    readme = (REPO / "README.md").read_text()
    table = readme.split("## What works today", 1)[1].split("\n\n", 2)[1]
    seen: set[str] = set()
    panels = []
    for row in table.splitlines()[2:]:
        question, commands = (cell.strip() for cell in row.strip("|").split("|")[:2])
        names = []
        for code in re.findall(r"`([^`]+)`", commands):
            word = code.removeprefix("accelkit ").split()[0]
            if "." in word or word.startswith("-") or word in seen:
                continue
            seen.add(word)
            names.append(word)
        panels.append((question, names))
    return panels


def test_top_level_groups_commands_as_the_readme_does():
    text = _help(())
    sections = re.findall(r"^(\w+):\n((?:  \S.*\n|   .*\n)+)", text, re.M)
    shown = [(title, re.findall(r"^  (\S+)", body, re.M)) for title, body in sections if title not in ("Options",)]
    expected = [(q, names) for q, names in _readme_panels() if names] + [("Results", ["results"])]
    assert shown == expected
    assert "Commands:" not in text  # nothing left ungrouped


@pytest.mark.parametrize("path", _paths(), ids=lambda p: " ".join(p) or "accelkit")
def test_every_help_has_examples_and_nothing_cut(path):
    text = _help(path)
    assert not re.search(r"\w\.\.\.$", text, re.M), text  # click's cut description ends "word..."
    examples = _examples(text)
    assert examples, text
    for example in examples:
        for segment in example.split("|"):
            words = shlex.split(segment.split(">")[0])
            if words[0] != "accelkit" or "COMMAND" in words:
                assert words[0] in ("accelkit", "ssh"), example
                continue
            command, walked = typer.main.get_command(app), []
            for word in words[1:]:
                if word not in getattr(command, "commands", {}):
                    break
                command, walked = command.commands[word], [*walked, word]
            assert tuple(walked[: len(path)]) == path, (example, path)  # it shows this command (or one of its own)
            flags = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
            assert not [w for w in words if w.startswith("--") and w.split("=")[0] not in flags], example


@pytest.mark.parametrize("path", _paths(), ids=lambda p: " ".join(p) or "accelkit")
def test_required_options_first_and_every_option_says_what_it_is(path):
    command = _command(path)
    options = [p for p in command.params if p.param_type_name == "option" and not p.hidden]
    required = [p.required for p in options]
    assert required == sorted(required, reverse=True), [(p.name, p.required) for p in options]
    assert all(p.help for p in options), [p.opts for p in options if not p.help]
    for p in options:
        if "--progress" in p.opts:
            assert p.secondary_opts == ["--no-progress"], path  # one spelling everywhere


def test_loadtest_help_starts_with_what_it_needs():
    text = _help(("loadtest",))
    options = re.findall(r"^  (--[\w-]+)", text.split("Options:", 1)[1], re.M)
    assert options[:2] == ["--base-url", "--model"]
    assert re.search(r"^  --port <int range>\s+\S", _help(("serve",)), re.M)  # it says what it is
