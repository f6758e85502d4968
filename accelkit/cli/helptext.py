"""How `--help` reads: commands grouped under the README's questions and in its order, each described in full
(click cuts a description to the terminal's width with "..."), and an "Examples:" block under every command."""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup

#: the README's "What works today" questions, in its order; `results` (the store every command writes) last
PANELS = ("Plan", "Measure", "Optimize", "Serve", "Observe", "Scale", "Results")
#: the top-level commands in the README's order (typer would list sub-groups after the plain commands)
ORDER = ("plan", "models", "hw", "bench", "report", "profile", "tune", "serve", "loadtest", "monitor", "sweep",
         "results")


def examples(*lines: str) -> str:
    """An epilog listing commands as typed: ``Examples:`` and one line each, never rewrapped (click keeps a
    paragraph that starts with ``\\b`` as it is)."""
    return "Examples:\n\n\b\n" + "\n".join(f"  {line}" for line in lines)


class HelpGroup(TyperGroup):
    """A command group whose `--help` lists its commands in full: under their ``rich_help_panel`` (in the order the
    panels first appear) and with the whole first sentence of each description, wrapped rather than cut."""

    def list_commands(self, ctx: Any) -> list[str]:
        names = super().list_commands(ctx)

        def key(name: str) -> tuple[int, int]:
            panel = getattr(self.commands.get(name), "rich_help_panel", None)
            return (PANELS.index(panel) if panel in PANELS else len(PANELS),
                    ORDER.index(name) if name in ORDER else len(ORDER) + names.index(name))

        return sorted(names, key=key)

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows: list[tuple[str, str, str]] = []
        for name in self.list_commands(ctx):
            cmd = self.get_command(ctx, name)
            if cmd is None or cmd.hidden:
                continue
            panel = getattr(cmd, "rich_help_panel", None) or "Commands"
            rows.append((panel, name, cmd.get_short_help_str(limit=10_000)))
        for panel in dict.fromkeys(row[0] for row in rows):
            with formatter.section(panel):
                formatter.write_dl([(name, text) for p, name, text in rows if p == panel])
