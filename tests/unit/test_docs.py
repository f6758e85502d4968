"""The README front page stays short, and every link in the README and docs/ resolves inside the repository."""

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def _anchors(path: Path) -> set[str]:
    """GitHub-style heading anchors of a markdown file."""
    anchors, fence = set(), False
    for line in path.read_text().splitlines():
        if line.startswith("```"):
            fence = not fence
        if not fence and line.startswith("#"):
            text = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", text).replace(" ", "-"))
    return anchors


def test_readme_front_page_is_short():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; move reference material to docs/"
    head = "\n".join(lines[:30])
    assert "make demo" in head and "make test" in head


def test_every_doc_link_resolves_inside_the_repository():
    broken = []
    for doc in DOCS:
        for target in LINK.findall(doc.read_text()):
            if re.match(r"^[a-z]+://", target) or target.startswith("mailto:"):
                continue
            path, _, anchor = target.partition("#")
            dest = (doc.parent / path).resolve() if path else doc
            if not dest.is_relative_to(REPO) or not dest.exists():
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such file)")
            elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
                broken.append(f"{doc.relative_to(REPO)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_nothing_points_outside_the_repository():
    offenders = [str(p.relative_to(REPO)) for p in [*DOCS, *(REPO / "accelkit").rglob("*.py")]
                 if re.search(r"shared/(reference|ARCHITECTURE|STYLE)", p.read_text())]
    assert not offenders, f"these point at files outside the repository: {offenders}"


def _undocumented_flags(command: tuple[str, ...], docs: list[str]) -> list[str]:
    """The options of ``accelkit <command> --help`` that none of ``docs`` names (an on/off flag by either spelling)."""
    import typer

    from accelkit.cli.app import app

    cli = typer.main.get_command(app)
    for name in command:
        cli = cli.commands[name]
    text = "\n".join((REPO / "docs" / doc).read_text() for doc in docs)
    text = re.sub(r"--\[no-\]([\w-]+)", r"--\1 --no-\1", text)  # `--[no-]x`: both spellings
    missing = []
    for param in cli.params:
        spellings = [*param.opts, *getattr(param, "secondary_opts", [])]
        if "--help" not in spellings and not any(re.search(re.escape(s) + r"(?![\w-])", text) for s in spellings):
            missing.append("/".join(spellings))
    return missing


#: each command's docs: where a user of that command looks for its flags
COMMAND_DOCS = {
    ("plan",): ["plan.md"], ("tune",): ["recipes.md"], ("loadtest",): ["loadtest.md"], ("monitor",): ["monitor.md"],
    ("profile",): ["monitor.md"], ("hw", "probe"): ["hw.md", "bench.md", "distributed.md"],
    ("sweep",): ["distributed.md"], ("report",): ["bench.md", "python-api.md"],
    **{("bench", w): ["bench.md", "distributed.md"] for w in
       ("suite", "bert", "llm", "llm-train", "resnet", "diffusion", "custom", "dataloader")},
}


@pytest.mark.parametrize("command", list(COMMAND_DOCS), ids=" ".join)
def test_every_flag_of_the_measuring_and_planning_commands_is_documented(command):
    assert not _undocumented_flags(command, COMMAND_DOCS[command])


def test_every_serve_flag_is_documented():
    """`serve --help` lists the flags generated from EngineConfig/ServerConfig; each is named in the serve or engine
    docs, where a user looks (--block-size, --seed, --chunked-prefill … were in the help alone)."""
    assert not _undocumented_flags(("serve",), ["serve.md", "engine.md"])


def test_serve_seed_flag_shows_the_one_range_the_engine_takes():
    """Its help showed -9223372036854775808<=x<=18446744073709551615, two spellings of every negative seed's stream."""
    from typer.testing import CliRunner

    from accelkit.cli.app import app

    help_text = " ".join(CliRunner().invoke(app, ["serve", "--help"], terminal_width=200).output.split())
    assert "0<=x<=18446744073709551615" in help_text and "-9223372036854775808" not in help_text
